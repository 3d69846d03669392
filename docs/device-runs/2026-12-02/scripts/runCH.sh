#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one (not run). The deterministic backward's dQ
# kernel without serialized wgmmas (scripts/bwd_dq_unserial.patch): it kept its dQ accumulator
# in flight across key tiles, and ptxas, short of registers for that, serialized every wgmma of
# the kernel (C7512: each k-step waits for itself; all 48 attn_bwd_dq kernels on the committed
# tree, attnpack.builder.sass.wgmma_serialized). The patch waits for dQ at the end of each key
# tile and frees its K/V slot there; the CPU tests then find no serialized backward step and no
# new spill. build_tools/patch_ab.sh: test_gluon_bwd.py on the patched tree (bitwise
# repeatability of the deterministic kernels included), then the committed and patched bf16
# backward archives by cycles over both shape sets, deterministic (det1) kernels only;
# /tmp/ab_state_dqunser reads "dqunser" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} KERNEL_FILTER=det1 bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-02/scripts/bwd_dq_unserial.patch bwd dqunser \
  tests/gpu/test_gluon_bwd.py
