#!/usr/bin/env bash
# Prepared in the thirty-sixth session. After runER.sh on the same H200 (the tree sent with the
# merged database in aot/tuning_db/sm_90.jsonl, so a fresh machine benches the same): issue 15's
# figures, build_tools/bench_tree.sh (the bundle built, `attnpack bench` bf16 forward and
# forward + backward over both shape sets, test_torch_sdpa.py), then bench/torch_overhead.py
# (the paired host-time method) for issue 15's host-time condition.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runET.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
DEADLINE_S=470 bash build_tools/bench_tree.sh
. build_tools/bench_env.sh /tmp/overhead-logs
timeout $((590 - SECONDS)) python3 bench/torch_overhead.py > "$OUT/torch_overhead.txt" 2>&1
echo "torch_overhead rc $? at $SECONDS s"; cat "$OUT/torch_overhead.txt"
