#!/usr/bin/env bash
# Seventeenth session (2026-12-03): the long split-KV decode chunks (2048, 4096 and 8192 keys;
# aot/kernels/triton_attn/family.py). run83 found one unsplit decode program per SM (128
# streams) streaming K/V at 3.7 TB/s against two per SM (256 streams) at 4.3 TB/s, and 1024-key
# chunks at 128 streams x 8192 keys making 2.6 waves. scripts/keys_decode_long.json: the 56
# decode keys at head dims 64-128 in classes 64 and 128 with Sk >= 2048 and class 256 with
# Sk >= 8192, bf16 and class 128 first. Then tests/gpu/test_triton_decode.py whole on the tuning
# archive (the new kernels' first run), the merge and build_tools/bench_tree.sh.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh decode_long .carry/keys_decode_long.json 190 220
. build_tools/runtime_env.sh /tmp/logs-cl
ATTNPACK_DECODE_ARCHIVE=/tmp/ta/attnpack-0.1.0-sm_90.apk timeout 80 python3 -m pytest -q \
  -p no:cacheprovider tests/gpu/test_triton_decode.py > $OUT/test_triton_decode.txt 2>&1
echo "test_triton_decode rc $? at $SECONDS s"; tail -n 1 $OUT/test_triton_decode.txt
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode_long.jsonl \
  -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
