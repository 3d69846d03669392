#!/usr/bin/env bash
# Twenty-first session: the re-tune of runCR.sh alone (no bench: the session's last call benches
# the tree with everything it merged). The 110 bf16 causal prefill forward keys of
# keys_fwd_bf16_causal.json on this tree's tuning archive, no key started after 360 s, then
# `db merge --min-gain 1.01` over the committed database. Returns fwd_bf16_causal.jsonl and
# sm_90_merged.txt.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh fwd_bf16_causal .carry/keys_fwd_bf16_causal.json 360 400
. build_tools/runtime_env.sh /tmp/logs-cx
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  $OUT/fwd_bf16_causal.jsonl -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
git diff --stat aot/tuning_db/ | tail -n 1
