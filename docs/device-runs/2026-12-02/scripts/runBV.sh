#!/usr/bin/env bash
# Fourteenth session: the Gluon forward's softmax with one FFMA a score (scripts/fwd_ffma.patch:
# p = exp2(a·s − r) with a per-row scale a and reference r, fwd._reference), weighed by
# build_tools/patch_ab.sh: test_gluon_attn.py's smoke over every forward kernel, the growing
# row maxima and the head-dim-128 causal and head-dim-64 full grids on the patched tree, then
# the old and patched bf16 forward archives by cycles over both shape sets; then the extreme-
# value contract tests (test_torch_contracts.py -k extreme) on the patched bundle.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=470 bash build_tools/patch_ab.sh docs/device-runs/2026-12-02/scripts/fwd_ffma.patch \
  fwd ffma tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-False"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((590 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_contracts.py -k extreme \
  > $OUT/test_contracts_extreme.txt 2>&1
echo "contracts rc $? at $SECONDS s"; tail -n 2 $OUT/test_contracts_extreme.txt
