#!/usr/bin/env bash
# Prepared in the thirty-first session (no device was lent; built and checked on the CPU only),
# optional, after runEE/runEF and runEC/runED. In every Gluon dK/dV kernel below head dim 256 one
# consumer's key-tile loop waited for Sᵀ before it issued dPᵀ (SASS: `GW0eGW1GW1GW0` in
# attnpack.builder.sass.wgmma_order's letters, the other loops `GGW1eGW1GW0`; docs/gluon-bwd.md).
# bwd_dpt_zero.patch starts dPᵀ from zero and adds −Δ once it is done: all 148 changed kernels'
# loops then read as written, none serialized, but 22 kernels (both dtypes) spill more (4-19
# more local-memory instructions, e.g. the causal det1 qN64 kernels 0 -> 14). Whether the gap
# it closes (the tensor pipe between Sᵀ's end and dPᵀ's issue, which the other consumer's GEMMs
# may fill anyway) is worth that is for the H200. build_tools/patch_ab.sh: test_gluon_bwd.py on
# the patched tree (smoke over every kernel, bitwise repeatability, every bf16 case), then the
# committed and the patched bf16 backward kernels by cycles over both shape sets.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEG.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-6} KERNEL_FILTER='^(?!.*wide1)' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/bwd_dpt_zero.patch bwd dpt0 \
  tests/gpu/test_gluon_bwd.py -k "smoke or repeatable or bf16"
