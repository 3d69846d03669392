#!/usr/bin/env bash
# Twelfth session, third call (run60): the tree with the epilogue reciprocal and run59's
# re-tuned bf16 prefill forward keys: build (the bundle from the database), `attnpack bench`
# fwd and fwdbwd over both sets, then test_torch_sdpa.py with the time left.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots \
  --out /tmp/bench > $OUT/bench.txt 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json $OUT/results.json 2>/dev/null
# run59's ten failing cases (a lazy kernel failed each first, and the kernels after it in name
# order went unchecked), and the growing-maxima test, on this tree's kernels
T=tests/gpu/test_gluon_attn.py
G=$T::test_forward_and_triton_backward_match_math_sdpa
P=$T::test_persistent_units_cover_every_row_block
python3 -m pytest -q -p no:cacheprovider "$G[1-32-8-1-4096-128-False-bf16]" "$G[1-32-8-1000-1000-128-False-fp16]" \
  "$G[1-32-8-4096-128-128-False-bf16]" "$G[1-32-8-4096-128-128-False-fp16]" "$G[1-32-8-4096-4096-128-False-bf16]" \
  "$G[3-32-8-4096-128-128-False-fp16]" "$P[128-False-5-7-7-640]" "$P[128-False-9-16-4-1024]" \
  "$T::test_row_maxima_growing_along_the_keys" > $OUT/test_gluon_attn.txt 2>&1
echo "test_gluon_attn rc $? at $SECONDS s"; tail -n 2 $OUT/test_gluon_attn.txt
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py > $OUT/test_torch_sdpa.txt 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 $OUT/test_torch_sdpa.txt
