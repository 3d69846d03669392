#!/usr/bin/env bash
# Prepared in the sixteenth session for the next one (not run): tune the decode keys in all
# four streams classes, 256 and 512 new in the sixteenth session (attnpack.tune.buckets; run81's
# bench/decode_rows.py found the class-128 pick 1.13-1.14x slower than the best decode kernel
# at 512 and 1024 streams), with the four 8-warp decode configs (triton family, new in the same
# session: 113-203 registers and no stack frame at head dims 64-128 where two 4-warp ones spill)
# among the candidates. scripts/keys_decode_classes.json: the 34 decode keys (17 bf16, 17 fp16)
# in all four classes (136 keys; 64 and 128 again for the 8-warp configs), bf16 and class 512
# first (run55 tuned a decode key in 0.2-1.3 s); resumable (copy the returned decode.jsonl into
# .carry/tuned/). Then tests/gpu/test_triton_decode.py at head dims 64 and 128 on the tuning
# archive (every decode kernel against math SDPA, the 8-warp ones' first run), the merge, and
# build_tools/bench_tree.sh (the model set's decode rows are the ones that move).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh decode .carry/keys_decode_classes.json 200 230
. build_tools/runtime_env.sh /tmp/logs-ck
ATTNPACK_DECODE_ARCHIVE=/tmp/ta/attnpack-0.1.0-sm_90.apk timeout 100 python3 -m pytest -q \
  -p no:cacheprovider tests/gpu/test_triton_decode.py -k "d64 or d128" > $OUT/test_triton_decode.txt 2>&1
echo "test_triton_decode rc $? at $SECONDS s"; tail -n 1 $OUT/test_triton_decode.txt
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode.jsonl \
  -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
