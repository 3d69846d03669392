#!/usr/bin/env bash
# Device call A at e891076: build everything on the machine, tests/gpu (less the triton JIT and bench
# smoke files, whose code did not change), then the runtime_overhead target for call B.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=e891076
mkdir -p $OUT/logs
FILES="tests/gpu/test_runtime_attention.py tests/gpu/test_gluon_bwd.py tests/gpu/test_torch_sdpa.py tests/gpu/test_torch_contracts.py tests/gpu/test_gluon_attn.py tests/gpu/test_libtorch_consumer.py tests/gpu/test_tune.py tests/gpu/test_multi_gpu.py" \
  OUT=$OUT/logs bash build_tools/run_gpu_tests.sh > $OUT/logs/summary.txt 2>&1
echo "rc $?" >> $OUT/logs/summary.txt
{ cmake -S . -B build-gpu -DATTNPACK_BUILD_BENCH=1 && cmake --build build-gpu --target runtime_overhead; } > $OUT/logs/bench_build.log 2>&1 || echo 'runtime_overhead build failed' >> $OUT/logs/summary.txt
cat $OUT/logs/summary.txt | tail -15
tar czf $OUT/logsA.tgz -C $OUT logs
