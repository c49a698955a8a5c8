#!/usr/bin/env bash
# One machine start's host data (docs/host.md): a standalone `mechsim probe` (as a user runs it),
# the host-state diagnostics, the interleaved hostval cases (their profile = the probe before),
# a second standalone probe. Run on the GPU machine from the repository root; writes under $1.
#   bash validation/experiments/hostval_device.sh "$OUT" SEED
set -u
out=${1:?output folder}; seed=${2:-0}
mkdir -p "$out/data"
export PYTHONUNBUFFERED=1
log="$out/log.txt"
probe() {
  local t0=$EPOCHREALTIME
  python3 mechsim/probe_runner.py --out "$out/$1" >>"$log" 2>&1
  echo "probe $1 wall_s $(awk "BEGIN{print $EPOCHREALTIME - $t0}")" | tee -a "$log"
}
cat /proc/sys/kernel/random/boot_id >>"$log"; nproc >>"$log"; uptime >>"$log"
probe probe_before.json
python3 validation/experiments/host_state.py --out "$out/host_state.json" >>"$log" 2>&1 || echo "host_state failed" >>"$log"
MECHSIM_HOST_PROFILE="$out/probe_before.json" MECHSIM_HOSTVAL_SEED=$seed \
  python3 validation/runners/run_suite.py --suite full --match hostval --out "$out/data" >>"$log" 2>&1
bad=$(python3 -c "import json,glob,sys; r=[x for f in glob.glob(sys.argv[1]+'/*/*.json') for x in json.load(open(f))['records']]; print(sum(x['error'] is not None for x in r), len(r))" "$out/data")
echo "hostval errors/records: $bad" | tee -a "$log"
if [ "${bad%% *}" != "0" ]; then
  MECHSIM_HOSTVAL_INTERLEAVE=0 MECHSIM_HOST_PROFILE="$out/probe_before.json" MECHSIM_HOSTVAL_SEED=$seed \
    python3 validation/runners/run_suite.py --suite full --match hostval --out "$out/data" >>"$log" 2>&1
fi
probe probe_after.json
tail -5 "$log"
