#!/usr/bin/env bash
# Device call T (fifth session): the build at the final tree (the Gluon backward with the dQ TMA
# reduce-add variants; the backward keys re-tuned in call S2 and merged), the GPU files
# that serve it through the runtime and F.sdpa, then `attnpack bench` of both shape sets, fwd and
# fwd+bwd, bf16, no cold starts.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_torch_sdpa.py tests/gpu/test_runtime_attention.py tests/gpu/test_torch_contracts.py" \
  OUT=$L timeout 280 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
grep -h "passed\|failed" $L/test_*.log | tail -3; echo "tests done at $SECONDS s"
tar czf $OUT/logsT.tgz -C /tmp logs
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((585 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsT.tgz -C /tmp logs
