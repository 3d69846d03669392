#!/usr/bin/env bash
# Prepared in the thirty-first session (no device was lent; built and checked on the CPU only).
# The overlapped forward schedule did not overlap: ptxas scheduled its wait for PV(j - 1) as
# early in the softmax's basic block as it could, above the first exp2, in all 116 overlapped
# kernels (docs/gluon-family.md, item 21). fwd_overlap_block.patch ends the block before that
# wait (fwd._end_block, a branch round code that never runs): the wait then comes after the
# softmax's last exp2 in every one of them, no spills, no serialized wgmma, mostly 3-5
# instructions more a loop trip; the other 88 forward kernels keep their instructions
# (sass_compare.py); the patch's CPU test checks the order. It also declares the overlapped
# persistent N128 2-stage config under causal at head dims 96/128 (excluded as spilling; it no
# longer spills): four new kernels, timed on the patched side only. build_tools/patch_ab.sh:
# test_gluon_attn.py on the patched tree (the smoke test over every forward kernel, where a hang
# would show, growing maxima, persistent units, every bf16 causal case and the B1 H8 fp16 cases
# without a mask), then the committed and the patched bf16 overlapped forward kernels by cycles
# over both shape sets.
# Thirty-second session: the tree now has the split tail's 14 kernels (`tail1`,
# docs/gluon-family.md item 22, built, not run); the smoke test runs them too, and the
# selection adds their own test (`split_tail`). Whether every test passed goes to
# /tmp/tail_state (ok or fail): runEF.sh merges a tail kernel's win only on "ok".
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEE.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} REPS=${REPS:-8} KERNEL_FILTER=overlap1 \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/fwd_overlap_block.patch \
  fwd block tests/gpu/test_gluon_attn.py \
  -k "smoke or split_tail or row_maxima or test_persistent_units or True-bf16 or (1-8-8 and False-fp16)"
if grep -q "tests rc 0," "$OUT/verdict.txt" 2>/dev/null; then echo ok; else echo fail; fi \
  | tee /tmp/tail_state "$OUT/tail_state.txt"
