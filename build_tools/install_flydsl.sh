#!/usr/bin/env bash
# Build-time toolchain of the FlyDSL family (aot/kernels/flydsl_attn), on a CPU-only machine:
#   - flydsl (pinned) into the project venv; it needs torch at import (setup.sh installs it first);
#   - Debian's lld-19: FlyDSL links code objects with $ROCM_PATH/llvm/bin/ld.lld, and an ld.lld on
#     PATH alone is not found, so we make a private ROCM_PATH folder whose llvm/bin/ld.lld links
#     to ld.lld-19 (no /opt/rocm needed, nothing system-wide touched);
#   - Debian's llvm-22 for llvm-objdump-22 / llvm-readelf-22 (LLVM 19 predates gfx950).
# Nothing here is needed at run time: libattnpack launches the code objects from the archive.
#
# Usage: build_tools/install_flydsl.sh [PYTHON]   (default .venv/bin/python)
# Environment: ATTNPACK_FLYDSL_ROCM_PATH (default ~/.cache/attnpack/flydsl-rocm).
# Prints the ROCM_PATH folder on its last line; aot/kernels/flydsl_attn/backend.py (rocm_path) finds the
# same folder by the same default.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
FLYDSL_VERSION=0.4.2
ROCM_DIR=${ATTNPACK_FLYDSL_ROCM_PATH:-$HOME/.cache/attnpack/flydsl-rocm}

if ! command -v ld.lld-19 >/dev/null 2>&1 || ! command -v llvm-objdump-22 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends lld-19 llvm-22 >/dev/null
  else
    echo "install_flydsl.sh: need lld-19 and llvm-22 (apt-get install lld-19 llvm-22, as root)" >&2
    exit 1
  fi
fi

"$PY" -c "import flydsl, sys; sys.exit(flydsl.__version__ != '$FLYDSL_VERSION')" 2>/dev/null \
  || "$PY" -m pip install -q "flydsl==$FLYDSL_VERSION"

mkdir -p "$ROCM_DIR/llvm/bin"
ln -sf "$(command -v ld.lld-19)" "$ROCM_DIR/llvm/bin/ld.lld"
"$ROCM_DIR/llvm/bin/ld.lld" --version >/dev/null
echo "$ROCM_DIR"
