#!/usr/bin/env bash
# Twentieth session: runCR.sh again, shortened to the device time left (about 440 s of call), with
# keys_fwd_bf16_causal.json fixed (each key's streams class from its database entry; run93 stopped
# at the first key, whose file entry said 128). Re-tune the bf16 causal prefill forward keys on
# this tree's tuning archive for at most 150 s (the rest next time: copy fwd_bf16_causal.jsonl into
# .carry/tuned/ and the tuner skips them), merge where a new winner is 1 % faster in this run,
# then build_tools/bench_tree.sh on the merged database.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh fwd_bf16_causal .carry/keys_fwd_bf16_causal.json 150 180
. build_tools/runtime_env.sh /tmp/logs-cu
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  $OUT/fwd_bf16_causal.jsonl -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((425 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
