#!/usr/bin/env bash
# Prepared in the forty-first session, after run172 (runFI.sh on an H100: 16 SMs moved the
# preprocess's 268 MB in 218 µs, 1.23 TB/s; 132 SMs in 99 µs): the first build of
# docs/gluon-bwd.md's "preprocess beside the dK/dV kernel". bwd_beside.patch makes every fast,
# non-wide, non-persistent backward four launches: a zero step of one count a (batch, query
# head) (and of the early convert's counters), the preprocess as a persistent grid of cdiv(SMs,
# 8) programs of 8 warps walking 128-row tiles in (batch, head, row) order and publishing each
# on its head's count, the dK/dV grid launched programmatically behind it with no wait for it
# (its load warp waits for each head's count before that head's LSE and Δ), and the convert.
# Compiled and verified on the CPU (bf16, head dims 64-128); the patch carries its CPU tests
# (with it applied tests/cpu passes). Not run. build_tools/patch_ab.sh: test_gluon_bwd.py on the
# patched tree (a hang stops at run_gpu_tests.sh's timeout; STOP_ON_TEST_FAIL skips the A/B),
# then the det0 tma1 kernels of both archives by cycles over both shape sets; then, on the
# patched tree, the kernels of one backward call at two rows (bench/kernel_timeline.py --op
# bwd). On one GPU; say which.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFK.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-420} REPS=${REPS:-6} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_beside.patch bwd \
  beside tests/gpu/test_gluon_bwd.py
echo "patch_ab done at $SECONDS s"
if grep -q "^beside\|^old.*geomean" "$OUT/verdict.txt" 2>/dev/null; then
  . build_tools/bench_env.sh /tmp/tl-beside
  for row in "B16 H16 S1024 d128 full" "B16 H32 S1024 d64 full"; do
    [ $SECONDS -gt 540 ] && break
    timeout 40 python3 bench/kernel_timeline.py --row "$row" --op bwd \
      > "$OUT/timeline_${row// /_}.txt" 2>&1
    echo "timeline $row rc $? at $SECONDS s"; cat "$OUT/timeline_${row// /_}.txt"
  done
fi
