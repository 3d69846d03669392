#!/usr/bin/env bash
# Prepared in the thirty-sixth session: runER.sh and runET.sh in one call, for a session with
# too little device time left for both (about 950 s with the start). On an H200 only: the 14
# backward keys behind bench/shapes.json's head-dim-128 rows (keys_rows_bwd_early_public.json,
# the first 14 of runER's) tuned with the early kernels among the candidates and merged at 1 %
# ($OUT/sm_90_merged.txt), then this tree's bundle built on the merged database and `attnpack
# bench` bf16 forward and forward + backward over bench/shapes.json alone: issue 15's figure.
# On an H100: runES.sh (the descending causal walk weighed) instead.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEU.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == *H200* ]] || { echo "not an H200: runES.sh instead"; bash .carry/runES.sh; exit 0; }
bash build_tools/tune_merge.sh rows_public .carry/keys_rows_bwd_early_public.json 330 370
echo "tune and merge at $SECONDS s"
. build_tools/bench_env.sh /tmp/bench-logs
timeout $((590 - SECONDS)) python3 -m attnpack.cli bench --shapes bench/shapes.json \
  --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json "$OUT/results.json" 2>/dev/null
