#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one (not run). The Gluon forward's last key
# tile on its first half (scripts/fwd_halfdiag.patch): with N128 tiles over M64 consumer rows
# under causal, the tile holding a consumer's diagonal is half masked for every one of its rows
# (consumer 0 of two: always, where Sk >= Sq), so its QKᵀ, softmax and PV run 64 keys wide
# (fwd._last_tile_half, docs/gluon-family.md item 14). On the CPU: 172 forward kernels compile,
# none with serialized wgmmas, the key-tile loops as long as before; the d64 causal overlapped
# persistent N128 3-stage kernel now spills 8 bytes (fp16 and bf16). build_tools/patch_ab.sh:
# test_gluon_attn.py's smoke, growing maxima and causal grids at head dims 64, 96 and 128 on
# the patched tree, then the committed and patched bf16 forward archives by cycles over both
# shape sets (causal kernels); /tmp/ab_state_halfdiag reads "halfdiag" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} KERNEL_FILTER=causal bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-02/scripts/fwd_halfdiag.patch fwd halfdiag \
  tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-True or 96-True"
