#!/usr/bin/env bash
# On a GPU machine: build_tools/tune_keys.sh NAME KEYS_FILE STOP_S KILL_S, then merge its output
# over this tree's database where a new winner is 1 % faster in this run (`attnpack db merge
# --min-gain 1.01`); the merged database goes to aot/tuning_db/ARCH.jsonl (for a bench later in
# the same call) and to $OUT/ARCH_merged.txt (to commit if the tests and the bench agree).
# On another GPU model than the database's (an H100 over the H200's) the merge is refused and
# the database left as it was; MERGE_FLAGS=--mixed-gpus merges anyway, each entry naming its GPU.
#   usage: build_tools/tune_merge.sh NAME KEYS_FILE STOP_S KILL_S
#   env: OUT, ATTNPACK_ARCH, MERGE_FLAGS
cd "$(dirname "$0")/.."
ARCH=${ATTNPACK_ARCH:-sm_90}
bash build_tools/tune_keys.sh "$@"
. build_tools/runtime_env.sh /tmp/tune-merge-logs
python3 -m attnpack.cli db merge --min-gain 1.01 ${MERGE_FLAGS:-} aot/tuning_db/$ARCH.jsonl "$OUT/$1.jsonl" \
  -o aot/tuning_db/$ARCH.jsonl && cp aot/tuning_db/$ARCH.jsonl "$OUT/${ARCH}_merged.txt"
git diff --stat aot/tuning_db/ | tail -n 1
