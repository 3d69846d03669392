#!/usr/bin/env bash
# Device call V (fifth session): the final tree's build (the head-dim-96 backward keys merged in
# call U), then the GPU files that serve it through F.sdpa and the runtime.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_torch_sdpa.py tests/gpu/test_runtime_attention.py" \
  OUT=$L timeout 250 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "git $ATTNPACK_COMMIT"; grep -h "passed\|failed" $L/test_*.log | tail -3; echo "done at $SECONDS s"
tar czf $OUT/logsV.tgz -C /tmp logs
