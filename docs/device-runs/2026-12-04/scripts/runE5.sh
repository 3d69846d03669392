#!/usr/bin/env bash
# Prepared in the twenty-eighth session, not run (its device time was spent). The head-dim-64
# backward is the weak half of the public forward + backward rows (run125: forward 1.02-1.14x
# cuDNN, forward + backward 0.99-1.02x without a mask): its dK/dV steps take 64 query rows, so
# Sᵀ and dPᵀ are [64 keys, 64 queries] and every GEMM has K or N of 64. scripts/bwd_d64_m128.patch
# declares five configs with 128 query rows a step (bwd_fp32_registers keeps them to head dim
# 64): det0 atomic, det0 tma1, det0 tma1 persistent, det1 qN64, det1 qN64 persistent. Built on
# the CPU (bf16, 2 stages): stack frames 0-32 bytes outside the persistent tma1 one (72 full,
# 104 causal), shared memory 98 KiB (det1) to 226 KiB (tma1). M = 128 spilled hundreds of bytes
# when the backward was first written, before the row statistics went into the initial
# accumulators. build_tools/patch_ab.sh: tests/gpu/test_gluon_bwd.py on the patched tree (head
# dim 64, the smoke test over every kernel, the archive's list, repeatability), then the
# committed and the patched bf16 head-dim-64 backward kernels by cycles over both shape sets
# (the new configs count in the patched side's fastest kernel a row).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-540} KERNEL_FILTER=d64 REPS=${REPS:-6} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-04/scripts/bwd_d64_m128.patch bwd m128 tests/gpu/test_gluon_bwd.py \
  -k "d64 or smoke or every_declared or repeatable"
