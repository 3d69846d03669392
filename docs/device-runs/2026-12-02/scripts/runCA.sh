#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run): re-tune on this tree's kernels
# what the fourteenth session's two kernel changes leave stale: the 214 bf16 prefill forward
# keys (the softmax's one FFMA a score, docs/gluon-family.md item 12: run70 has, e.g., the d64
# causal rows' overlapped persistent N128 kernel 5 % slower and its three-consumer siblings
# 4-5 % faster), then the 92 bf16 causal backward keys run72 did not re-tune on the head groups
# (docs/gluon-bwd.md: at GQA 8 Sq = Sk 8192 the 2-stage det0_tma1 kernel is now 5.7 % faster
# than the 3-stage one the database picks). Resumable: a second call with the returned files
# in .carry/tuned/ goes on where this one stopped (the tuner skips keys already in its -o file).
cd "$(dirname "$0")/.."
# after runCC.sh and runCD.sh on the same machine: with the patches they kept
bash build_tools/apply_kept.sh grid3=docs/device-runs/2026-12-02/scripts/bwd_grid3.patch \
  fgroup=docs/device-runs/2026-12-02/scripts/fwd_group.patch | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT
bash build_tools/tune_keys.sh fwd_bf16 .carry/keys_fwd_bf16.json $((300 - SECONDS)) $((585 - SECONDS))
bash build_tools/tune_keys.sh bwd_bf16_causal .carry/keys_bwd_bf16_causal.json $((565 - SECONDS)) \
  $((585 - SECONDS))
