#!/usr/bin/env bash
# Fifteenth session, the last call (a fresh machine, tree with fwd_group.patch committed): re-tune
# the fp16 keys on this tree's kernels, as runCA.sh did the bf16 ones: the 99 fp16 backward keys
# (scripts/keys_bwd_fp16_all.json, timed before BWD_MIN_PROGRAMS and the head groups) first, then
# the 102 fp16 prefill forward keys (keys_fwd_fp16_prefill.json, timed before the one-FFMA
# softmax and the grouped causal grid). Resumable as runCA.sh (.carry/tuned/NAME.jsonl).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT
bash build_tools/tune_keys.sh bwd_fp16 .carry/keys_bwd_fp16_all.json $((300 - SECONDS)) \
  $((${STOP_S:-420} - SECONDS))
bash build_tools/tune_keys.sh fwd_fp16 .carry/keys_fwd_fp16_prefill.json \
  $((${STOP_S:-420} - 20 - SECONDS)) $((${STOP_S:-420} - SECONDS))
