#!/usr/bin/env bash
# The test suite on this machine (after build_tools/setup.sh):
#   1. the runtime's ctest programs (C header as C, sha256 vectors, find_package from an install);
#   2. libattnpack's CPU tests again under AddressSanitizer;
#   3. pytest over tests/cpu and tests/gpu (the GPU tests skip cleanly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
BUILD_DIR=${BUILD_DIR:-build}
(cd "$BUILD_DIR/runtime" && ctest --output-on-failure)
PY=$PY runtime/tests/run_cpu_tests_asan.sh
ATTNPACK_RUNTIME_LIB=$PWD/$BUILD_DIR/runtime/libattnpack.so \
ATTNPACK_TORCH_LIB=$PWD/$BUILD_DIR/torch/libattnpack_torch.so \
  $PY -m pytest tests/cpu tests/gpu -q -rs "$@"
