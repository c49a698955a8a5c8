#!/bin/bash
# Hardware counters per op on the device machine (docs/counters.md):
#   bash validation/runners/run_counters.sh tiny|full SEED
# writes under $OUT: ncu_query.txt (the metrics ncu has), counters.ncu-rep, raw.csv (per kernel),
# raw_nvtx.csv (the same rows named by their NVTX range), counters_manifest.json, sol_rule.txt.
set -u
SET=${1:-tiny}; SEED=${2:-24}; OUT=${OUT:-/tmp/counters_out}; mkdir -p "$OUT"
R=validation/runners/run_counters.py
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
"$NCU" --version | tail -1
"$NCU" --query-metrics > "$OUT/ncu_query.txt" 2>&1
M=$(python3 $R --list-metrics "$OUT/ncu_query.txt")
echo "metrics: $M"
# ncu's own speed-of-light bottleneck rule (the thresholds the binding-unit rule cites)
D=$(dirname "$(readlink -f "$NCU")")
for f in $(find "$D" /opt/nvidia -iname "*SpeedOfLight*.py" -o -iname "*Bottleneck*.py" 2>/dev/null | sort -u | head -4); do
  echo "== $f"; grep -n -i "latency\|threshold\|60\|80" "$f" | head -30; done > "$OUT/sol_rule.txt"
PYTHONUNBUFFERED=1 "$NCU" --clock-control none --profile-from-start off --nvtx -f -o "$OUT/counters" \
  --metrics "$M" python3 $R --set "$SET" --seed "$SEED" --out "$OUT" 2>&1 | grep -v "^==PROF== Profiling" | tail -20
"$NCU" -i "$OUT/counters.ncu-rep" --csv --page raw --print-nvtx-rename kernel > "$OUT/raw_nvtx.csv"
"$NCU" -i "$OUT/counters.ncu-rep" --csv --page raw > "$OUT/raw.csv"
wc -l "$OUT"/*.csv; ls -la "$OUT"
