#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one (not run; after runCG.sh and runCH.sh on
# the same machine): with the patches their A/Bs kept applied (build_tools/apply_kept.sh),
# re-tune the bf16 causal prefill forward keys (scripts/keys_fwd_bf16_causal.json) where the
# half last tile was kept, merge the entries over the database, then build_tools/bench_tree.sh
# (the bench, forward and forward + backward over both sets, and test_torch_sdpa.py). Returns
# the entries (fwd_bf16_causal.jsonl: copy it into .carry/tuned/ to resume in a later call).
cd "$(dirname "$0")/.."
bash build_tools/apply_kept.sh halfdiag=docs/device-runs/2026-12-02/scripts/fwd_halfdiag.patch \
  dqunser=docs/device-runs/2026-12-02/scripts/bwd_dq_unserial.patch | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
if grep -q "halfdiag: kept" $OUT/state.txt; then
  bash build_tools/tune_keys.sh fwd_bf16_causal .carry/keys_fwd_bf16_causal.json \
    $((260 - SECONDS)) $((300 - SECONDS))
  . build_tools/runtime_env.sh /tmp/logs-ci
  python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/fwd_bf16_causal.jsonl \
    -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.jsonl
fi
if grep -q ": kept" $OUT/state.txt; then
  DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
else
  echo "neither patch kept: no bench (run76 is the bench of this tree)"
fi
