#!/usr/bin/env bash
# Prepared in the sixteenth session for the next one (not run): tune the decode keys in the
# streams classes 256 and 512, new in the sixteenth session (attnpack.tune.buckets; run81's
# bench/decode_rows.py found the class-128 pick 1.13-1.14x slower than the best decode kernel
# at 512 and 1024 streams). scripts/keys_decode_wide.json: the 34 decode keys (17 bf16, 17
# fp16) in each of the two classes, bf16 and class 512 first; resumable (copy the returned
# decode_wide.jsonl into .carry/tuned/). Then merge, bench (build_tools/bench_tree.sh: the model
# set's decode rows are the ones that move) and bench/decode_rows.py on the merged database, which
# should now find the pick fastest at 512 and 1024 streams.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh decode_wide .carry/keys_decode_wide.json 230 260
. build_tools/runtime_env.sh /tmp/logs-ck
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode_wide.jsonl \
  -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((520 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
# the tuning archive holds the database it was built with; decode_rows reads the merged one
python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon --op fwd \
  -o /tmp/ta2 -j "$(nproc)" > /tmp/logs-ck/build_ta2.log 2>&1
timeout $((590 - SECONDS)) python3 bench/decode_rows.py --archive /tmp/ta2/attnpack-0.1.0-sm_90.apk \
  --kernel-filter decode1 > "$OUT/decode_rows.txt" 2>&1
echo "decode_rows rc $? at $SECONDS s"; grep -c "fastest" "$OUT/decode_rows.txt"
