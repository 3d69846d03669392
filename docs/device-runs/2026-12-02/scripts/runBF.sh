#!/usr/bin/env bash
# Device call BF (eleventh session), the committed tree with run55's database: the build (the
# bundle from it), `attnpack bench` of both sets (fwd and fwdbwd, ABBA rounds), then
# test_torch_sdpa.py.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots \
  --out /tmp/bench > $L/bench.txt 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json $OUT/results.json 2>/dev/null
timeout $((400 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py > $L/test_torch_sdpa.txt 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 $L/test_torch_sdpa.txt
cp $L/summary.txt $L/bench.txt $L/test_torch_sdpa.txt $OUT/ 2>/dev/null
