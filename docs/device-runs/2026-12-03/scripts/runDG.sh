#!/usr/bin/env bash
# Prepared in the twenty-second session for the next one (not run). The backward keys of
# streams class 64 (keys_bwd_class64_rest.json: 101 keys, the 68 bf16 ones first), timed at two
# shapes as the forward's (runDF.sh) and merged at 1 % by their scores. A backward key costs
# several times a forward one: expect two or three calls, each resuming from the last one's
# $OUT/bwd_class64_rest.jsonl copied into .carry/tuned/.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_merge.sh bwd_class64_rest .carry/keys_bwd_class64_rest.json 540 575
