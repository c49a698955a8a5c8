#!/usr/bin/env bash
# One machine start's host data (docs/host.md): a standalone `mechsim probe` (as a user runs it),
# the host-state diagnostics, the interleaved hostval cases (their profile = the probe before; their
# window profile = the probe read between their own samples), a standalone probe after; then, while
# the elapsed time allows, a second session with the next seed and its own probes before and after.
# Run on the GPU machine from the repository root; writes under $1.
#   bash validation/experiments/hostval_device.sh "$OUT" SEED [SECOND_SESSION_BY_S]
set -u
out=${1:?output folder}; seed=${2:-0}; second_by=${3:-0}
mkdir -p "$out/data"
export PYTHONUNBUFFERED=1
log="$out/log.txt"
t_start=$EPOCHREALTIME
probe() {
  local t0=$EPOCHREALTIME
  python3 mechsim/probe_runner.py --out "$out/$1" >>"$log" 2>&1 || tail -20 "$log"
  echo "probe $1 wall_s $(awk "BEGIN{print $EPOCHREALTIME - $t0}")" | tee -a "$log"
}
session() {   # $1 seed, $2 profile file
  MECHSIM_HOST_PROFILE="$out/$2" MECHSIM_HOSTVAL_SEED=$1 \
    python3 validation/runners/run_suite.py --suite full --match hostval --out "$out/data" >>"$log" 2>&1
  bad=$(python3 -c "import json,glob,sys; r=[x for f in glob.glob(sys.argv[1]+'/*/*.json') for x in json.load(open(f))['records'] if x['params'].get('seed')==int(sys.argv[2])]; print(sum(x['error'] is not None for x in r), len(r))" "$out/data" "$1")
  echo "hostval seed $1 errors/records: $bad" | tee -a "$log"
  if [ "${bad%% *}" != "0" ]; then
    tail -30 "$log"
    MECHSIM_HOSTVAL_INTERLEAVE=0 MECHSIM_HOST_PROFILE="$out/$2" MECHSIM_HOSTVAL_SEED=$1 \
      python3 validation/runners/run_suite.py --suite full --match hostval --out "$out/data" >>"$log" 2>&1
  fi
}
cat /proc/sys/kernel/random/boot_id >>"$log"; nproc >>"$log"; uptime >>"$log"
probe probe_before.json
python3 validation/experiments/host_state.py --out "$out/host_state.json" >>"$log" 2>&1 || echo "host_state failed" >>"$log"
session "$seed" probe_before.json
probe probe_after.json
if [ "$second_by" != "0" ] && awk "BEGIN{exit !($EPOCHREALTIME - $t_start < $second_by)}"; then
  session "$((seed + 1))" probe_after.json
  probe probe_end.json
fi
echo "elapsed_s $(awk "BEGIN{print $EPOCHREALTIME - $t_start}")" | tee -a "$log"
tail -5 "$log"
