#!/usr/bin/env bash
# Prepared in the thirty-ninth session (built and verified on the CPU, not run): run171's sweep
# timed the fast backward's preprocess at 97.6 / 97.5 µs with 32 rows a program on 4 warps,
# against 101.3 / 100.8 µs for the shipped 64 (an H100, B16 H16 S1024 d128 and B16 H32 S1024
# d64; torch's copy of the same bytes 93.7). bwd_pre32.patch gives every non-wide preprocess 32
# rows a program (the early convert's counters stay one a 64-row dK/dV tile, zeroed by the
# program that starts it; the convert keeps 64 rows). build_tools/patch_ab.sh: the whole of
# test_gluon_bwd.py on the patched tree (poisoned workspaces: a counter left unzeroed would hang
# the early convert, the smoke test's deadline), then the det0 tma1 kernels of both archives by
# cycles, whole calls (preprocess, dK/dV, convert), over both shape sets. About 4 µs a call is
# the most to expect (0.5 % at S1024, less at longer rows): MIN_GAIN stays 1.003. On one GPU;
# say which. If kept: `git apply` it (it carries its CPU test's grids) and bench on an H200.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFG.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_pre32.patch bwd \
  pre32 tests/gpu/test_gluon_bwd.py
