#!/usr/bin/env bash
# Prepared in the thirty-fifth session (no device lent; built and checked on the CPU). The fast
# backward's third launch, dQ's convert, costs a fixed 45-47 µs a row at the public rows (it
# reads the fp32 accumulator and writes dQ at the bandwidth), 6 % of the backward at S1024 and
# 9 % at S512. bwd_early_convert.patch adds the `early` knob (docs/gluon-bwd.md, "The convert
# started early"): per-tile counters that the preprocess zeroes, each dK/dV program publishing
# its complete dQ adds on them as it ends, and a convert that waits for its own tile's counter
# instead of for the dK/dV grid's end, so the SMs the dK/dV kernel's last round leaves idle run
# most of it. 24 kernels (tma1 and dqq, 2 and 3 stages, head dims 96/128). A wrong count or a
# missing publish would hang the convert: the smoke test's per-kernel deadline catches that.
# On one GPU (say which): build_tools/patch_ab.sh, the whole of test_gluon_bwd.py on the patched
# tree (about 420 tests, 2 minutes on the H200; the early kernels are among every head-dim-96/128
# case), no A/B if a test failed (STOP_ON_TEST_FAIL), then the committed and the patched
# archives' bf16 non-persistent tma1 kernels at head dims 96/128 by cycles, the whole call
# (three launches) timed, over both shape sets.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEQ.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='d(96|128)-(full|causal)/M64_stages[23]_det0_tma1(_dqq1)?(_early1)?$' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/bwd_early_convert.patch bwd \
  early tests/gpu/test_gluon_bwd.py
