#!/usr/bin/env bash
# Prepared in the fortieth session. The second call after runFG.sh, on the same GPU model: with
# PATCH set (runFG kept it), that patch applied to this tree first; then
# build_tools/bench_tree.sh (the bundle built, `attnpack bench` bf16 forward and forward +
# backward over both shape sets, test_torch_sdpa.py: issue 15's figures on an H200), then
# test_torch_contracts.py and test_bench.py with the time left: the thirty-ninth session's
# whole-table preload (CUDA-graph captures preload before they capture) and bundle_info()'s
# gpu_entries (which the bench reads) had run on no GPU.
#   usage (device, repo root): [PATCH=docs/.../bwd_pre32.patch] ATTNPACK_COMMIT=<sha> OUT=$OUT \
#          bash .carry/runFH.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if [ -n "${PATCH:-}" ]; then patch -p1 < "$PATCH" || { echo "$PATCH does not apply"; exit 1; }; fi
DEADLINE_S=420 bash build_tools/bench_tree.sh
. build_tools/bench_env.sh /tmp/contracts-logs > /dev/null
timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_contracts.py tests/gpu/test_bench.py > "$OUT/contracts.txt" 2>&1
echo "test_torch_contracts + test_bench rc $? at $SECONDS s"; tail -n 3 "$OUT/contracts.txt"
