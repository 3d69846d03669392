#!/usr/bin/env bash
# The test suite on this machine (after build_tools/setup.sh):
#   1. the runtime's ctest programs (C header as C, sha256 vectors, find_package from an install);
#   2. libattnpack's CPU tests again under AddressSanitizer;
#   3. pytest over tests/cpu and tests/gpu (the GPU tests skip cleanly without a GPU).
# build_tools/check_wheel.sh (CI runs it after this) builds and installs the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
BUILD_DIR=${BUILD_DIR:-build}
(cd "$BUILD_DIR/runtime" && ctest --output-on-failure)
PY=$PY runtime/tests/run_cpu_tests_asan.sh
if [ "$BUILD_DIR" != build ]; then
  # The package looks in build/ of this checkout by itself (python/attnpack/_locate.py).
  export ATTNPACK_RUNTIME_LIB=$PWD/$BUILD_DIR/runtime/libattnpack.so
  export ATTNPACK_TORCH_LIB=$PWD/$BUILD_DIR/torch/libattnpack_torch.so
fi
$PY -m pytest tests/cpu tests/gpu -q -rs "$@"
