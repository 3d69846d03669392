#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one (not run; after runCG.sh and runCH.sh on
# the same machine): with the patches their A/Bs kept applied (build_tools/apply_kept.sh),
# re-tune the four fp16 keys run77 did not reach (scripts/keys_fp16_left4.json) and, where the
# half last tile was kept, the bf16 causal prefill forward keys
# (scripts/keys_fwd_bf16_causal.json); merge the entries over the database, then build_tools/bench_tree.sh
# (the bench, forward and forward + backward over both sets, and test_torch_sdpa.py). Returns
# the entries (fp16_left4.jsonl, fwd_bf16_causal.jsonl: copy them into .carry/tuned/ to resume
# in a later call; sm_90_merged.txt is the merged database).
cd "$(dirname "$0")/.."
bash build_tools/apply_kept.sh halfdiag=docs/device-runs/2026-12-02/scripts/fwd_halfdiag.patch \
  dqunser=docs/device-runs/2026-12-02/scripts/bwd_dq_unserial.patch | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
# the four fp16 keys run77 did not reach (head dim 256, GQA 2, causal, Sq = Sk 8192 and 16384)
bash build_tools/tune_keys.sh fp16_left4 .carry/keys_fp16_left4.json 150 200  # with the archive build
if grep -q "halfdiag: kept" $OUT/state.txt; then
  bash build_tools/tune_keys.sh fwd_bf16_causal .carry/keys_fwd_bf16_causal.json \
    $((260 - SECONDS)) $((300 - SECONDS))
fi
. build_tools/runtime_env.sh /tmp/logs-ci
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/*.jsonl \
  -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
if grep -q ": kept" $OUT/state.txt; then
  DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
else
  echo "neither patch kept: no bench (run76 is the bench of this tree)"
fi
