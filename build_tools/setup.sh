#!/usr/bin/env bash
# From a fresh machine to libattnpack, the default bundle and the PyTorch extension, verified:
#   system packages -> .venv (torch, triton, build/test deps, attnpack editable) -> FlyDSL
#   toolchain (build_tools/install_flydsl.sh) -> cmake build -> inspect. No GPU needed.
#   Re-running it is cheap: the compile cache keeps finished kernels.
# The package finds what this builds in build/ by itself (python/attnpack/_locate.py), so
# `import attnpack.torch; attnpack.torch.enable()` and `attnpack explain` need no variables.
# Environment: ATTNPACK_TARGET_ARCHS (default: python/attnpack/targets.py's default set,
# sm_90;gfx942;gfx950), BUILD_DIR (default build;
# another folder is reached through ATTNPACK_RUNTIME_LIB/ATTNPACK_TORCH_LIB/ATTNPACK_BUNDLE_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ARCHS=${ATTNPACK_TARGET_ARCHS:-}

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    cmake ninja-build g++ libzstd-dev python3-venv >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  # Reuse a system torch/triton where one exists (GPU machines ship their own).
  python3 -m venv --system-site-packages .venv
fi
PY=.venv/bin/python
$PY -m pip install -q --upgrade pip >/dev/null
# torch is pinned only when absent: a bare `torch` would pull a multi-GB CUDA build.
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q "torch==2.13.0"
# The editable install is the Python package alone (pyproject.toml: no CMake run in it).
$PY -m pip install -q "triton==3.6.0" "numpy<2.4" "msgpack-cxx==7.0.0" -e ".[build,test]"
# The flydsl family's compiler (build time only): flydsl (needs torch, installed above), Debian's
# lld-19 as its linker under a private ROCM_PATH, llvm-22's objdump for the gfx950 checks.
bash build_tools/install_flydsl.sh "$PY" >/dev/null

# One CMake build: libattnpack (build/runtime), the archives (build/bundle) and the PyTorch
# extension (build/torch/libattnpack_torch.so), built against the installed torch.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$PWD/$PY" -DATTNPACK_TARGET_ARCHS="$ARCHS" -DATTNPACK_BUILD_TORCH=ON \
  -DCMAKE_PREFIX_PATH="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
cmake --build "$BUILD_DIR"

for apk in "$BUILD_DIR"/bundle/*.apk; do
  $PY -m attnpack.cli inspect "$apk" | head -2
done
echo "setup done: runtime and archives in $BUILD_DIR/, CLI at .venv/bin/attnpack"
