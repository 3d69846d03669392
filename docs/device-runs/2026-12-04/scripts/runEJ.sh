#!/usr/bin/env bash
# Prepared in the thirty-third session (built and checked on the CPU, not run). run136 timed
# the overlapped forward kernels with their wait for PV(j - 1) in a block of its own
# (fwd._end_block) against without: at head dims 96/128 under causal 0.980-1.009 (0.98 at
# S512-S1024), where without a mask 1.003-1.018. The committed tree ends the block at 96/128
# with or without a mask (what run136 measured); fwd_causal_noblock.patch ends it only without
# one, so the causal kernels at 96/128 keep ptxas' order (docs/gluon-family.md, item 21). Its
# CPU test (the order test expecting `W1eW0` only at d128 without a mask) passes applied.
# build_tools/patch_ab.sh: test_gluon_attn.py on the patched tree (the smoke test over every
# forward kernel, growing maxima, every bf16 causal case), then the committed and the patched
# bf16 causal overlapped kernels by cycles over both shape sets. Then runEK.sh on the same
# machine.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEJ.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} REPS=${REPS:-8} KERNEL_FILTER="causal/.*overlap1" \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/fwd_causal_noblock.patch \
  fwd noblock tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or True-bf16"
