#!/usr/bin/env bash
# Device call H (third session): build everything on the machine with the merged database (Gluon
# forwards at head dims 96/256, the fp16 backward re-tuned), then the GPU tests that cover it:
# the Gluon forward grid (now head dims 64/96/128/256), F.sdpa, the op contracts, the libtorch
# consumer and the runtime.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_gluon_attn.py tests/gpu/test_torch_sdpa.py tests/gpu/test_torch_contracts.py tests/gpu/test_runtime_attention.py tests/gpu/test_libtorch_consumer.py" \
  OUT=$L timeout 560 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "rc $?" >> $L/summary.txt
tail -12 $L/summary.txt
grep -h "passed\|failed" $L/test_*.log | tail -8
tar czf $OUT/logsH.tgz -C /tmp logs
