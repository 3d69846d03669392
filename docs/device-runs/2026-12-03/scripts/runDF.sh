#!/usr/bin/env bash
# Prepared in the twenty-second session for the next one (not run). The forward keys of streams
# class 64 that run101 did not re-tune (keys_fwd_class64_rest.json: 108 keys, the 70 bf16 ones
# first, then fp16), each timed at its batch and at B·Hkv = 64 (runner.timing_shapes) and merged
# at 1 % by their scores (build_tools/tune_merge.sh). run101 tuned 13 such keys in 62 s, so a
# call reaches about 80; the tuner skips keys already in .carry/tuned/fwd_class64_rest.jsonl,
# so a second call (that file copied there from the first's $OUT) finishes the list.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_merge.sh fwd_class64_rest .carry/keys_fwd_class64_rest.json 540 575
