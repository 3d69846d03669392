#!/usr/bin/env bash
# Prepared in the nineteenth session for the next one (not run). The one-compare causal mask
# (32e8b7b, run89: 1.017x by cycles over the causal forward rows, per kernel 1.00-1.04x) makes the
# causal kernels faster by different amounts, so the database's causal forward winners, chosen on
# the old kernels, may no longer be the fastest. Re-tune the 110 bf16 causal prefill forward keys
# (scripts/keys_fwd_bf16_causal.json) on this tree's tuning archive, merge them over the database
# where a new winner beats the entry's kernel by 1 % in this run (`db merge --min-gain 1.01`), then
# build_tools/bench_tree.sh (bench over both sets, test_torch_sdpa.py) on the merged database.
# Returns fwd_bf16_causal.jsonl (copy it into .carry/tuned/ to resume a cut-off tune) and
# sm_90_merged.txt (the merged database, to commit if the bench and the tests agree).
# env: STOP_S, KILL_S (the tune's, 230 and 270), CALL_S (585: the bench's tests stop there,
# seconds from this script's start), for a call with less device time (runCU.sh).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh fwd_bf16_causal .carry/keys_fwd_bf16_causal.json \
  "${STOP_S:-230}" "${KILL_S:-270}"
. build_tools/runtime_env.sh /tmp/logs-cr
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  $OUT/fwd_bf16_causal.jsonl -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((${CALL_S:-585} - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
