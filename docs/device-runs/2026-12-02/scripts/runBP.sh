#!/usr/bin/env bash
# Thirteenth session, after runBO.sh on the same machine: the tree with run62's re-tuned
# backward and fp16 forward entries merged (and scripts/bwd_neg.patch applied if runBO kept
# it): the build, `attnpack bench` fwd and fwdbwd over both sets, then test_torch_sdpa.py.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs3; mkdir -p $L
state=$(cat /tmp/bo_state 2>/dev/null || echo none)
echo "runBO state: $state" | tee $OUT/state.txt
if [ "$state" = neg ]; then
  grep -q "_row_values" aot/kernels/gluon_attn/bwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_neg.patch
fi
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 220 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots \
  --out /tmp/bench > $OUT/bench.txt 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json $OUT/results.json 2>/dev/null
timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py > $OUT/test_torch_sdpa.txt 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 $OUT/test_torch_sdpa.txt
