#!/usr/bin/env bash
# Eighteenth session (2026-12-03), after run85: five more TMA decode configs (128-key tiles:
# unsplit with 4 stages, chunked 1024-8192 with 2 stages; run85's unsplit N128 kernel won 69 of
# the 120 decode keys). The same 120 keys again (scripts/keys_decode_tma.json), the whole
# tests/gpu/test_triton_decode.py, bench/decode_rows.py, then a merge that keeps an entry's
# kernel unless the new winner beat it by 1 % in this run (`db merge --min-gain 1.01`: run85's
# plain merge swapped ties at the timing shape, one of which lost 9 % at a model row's own
# shape), and build_tools/bench_tree.sh.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh decode_tma2 .carry/keys_decode_tma.json 250 280
. build_tools/runtime_env.sh /tmp/logs-cn
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
ATTNPACK_DECODE_ARCHIVE=$A timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_triton_decode.py > $OUT/test_triton_decode.txt 2>&1
TEST_RC=$?
echo "test_triton_decode rc $TEST_RC at $SECONDS s"; tail -n 1 $OUT/test_triton_decode.txt
timeout 60 python3 bench/decode_rows.py --archive $A --kernel-filter decode1 \
  --json $OUT/decode_rows.json > $OUT/decode_rows.txt 2>&1
echo "decode_rows rc $? at $SECONDS s"; grep "streams |" $OUT/decode_rows.txt
if [ $TEST_RC -eq 0 ]; then
  python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
    $OUT/decode_tma2.jsonl -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
else
  echo "not merged: a decode kernel failed its test"
fi
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
# a call returns at most eight files: the text logs travel as one archive
(cd $OUT && tar czf logs.tar.gz tune_decode_tma2.txt test_triton_decode.txt decode_rows.txt \
  test_torch_sdpa.txt && rm -f tune_decode_tma2.txt test_triton_decode.txt decode_rows.txt \
  test_torch_sdpa.txt)
