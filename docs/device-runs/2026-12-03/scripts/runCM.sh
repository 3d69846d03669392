#!/usr/bin/env bash
# Eighteenth session (2026-12-03): the TMA decode kernels (aot/kernels/triton_attn/decode.py,
# `decode1_tma1_*`: K and V through host tensor descriptors, one bulk copy a tile, instead of
# 128 threads' cp.async). run83/run84 left the decode keys 2-6 % behind cuDNN at 128 streams
# (run81's ncu: our decode kernels at 76-89 % of DRAM peak, cuDNN's at 83-92 %).
# scripts/keys_decode_tma.json: the 120 decode keys at head dims 64-128 in all four streams
# classes, bf16 and classes 128/64 first; resumable (.carry/tuned/decode_tma.jsonl). Then
# tests/gpu/test_triton_decode.py whole on the tuning archive (the TMA kernels' first run),
# bench/decode_rows.py (every decode kernel at each model decode row's own shape), the merge
# only if the test passed, and build_tools/bench_tree.sh.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh decode_tma .carry/keys_decode_tma.json 250 280
. build_tools/runtime_env.sh /tmp/logs-cm
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
ATTNPACK_DECODE_ARCHIVE=$A timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_triton_decode.py > $OUT/test_triton_decode.txt 2>&1
TEST_RC=$?
echo "test_triton_decode rc $TEST_RC at $SECONDS s"; tail -n 1 $OUT/test_triton_decode.txt
timeout 60 python3 bench/decode_rows.py --archive $A --kernel-filter decode1 \
  --json $OUT/decode_rows.json > $OUT/decode_rows.txt 2>&1
echo "decode_rows rc $? at $SECONDS s"; tail -n 12 $OUT/decode_rows.txt
if [ $TEST_RC -eq 0 ]; then
  python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode_tma.jsonl \
    -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
else
  echo "not merged: a decode kernel failed its test"
fi
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
