#!/usr/bin/env bash
# Prepared in the thirty-sixth session, for an H100 when no H200 comes (issue 15's figures are
# the H200's): runES.sh (the descending causal walk weighed, its A/B stopped at 400 s), then the
# committed tree (the patch taken off again) built for the bench and bench/torch_overhead.py,
# the paired host-time method (its first run was this script's, run151): issue 15's host-time
# condition, which is the host's, not the GPU model's.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEV.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
P=docs/device-runs/2026-12-04/scripts/bwd_causal_descend.patch
BUDGET_S=400 bash .carry/runES.sh
patch -p1 -R -f -s --dry-run < $P >/dev/null 2>&1 && patch -p1 -R -s < $P && echo "descend taken off"
. build_tools/bench_env.sh /tmp/overhead-logs
timeout $((590 - SECONDS)) python3 bench/torch_overhead.py > "$OUT/torch_overhead.txt" 2>&1
echo "torch_overhead rc $? at $SECONDS s"; cat "$OUT/torch_overhead.txt"
