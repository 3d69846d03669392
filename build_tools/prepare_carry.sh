#!/usr/bin/env bash
# Fill the git-ignored folders a device call carries (README, "GPU runs"): `.whl/` with the
# wheels build_tools/run_gpu_tests.sh installs on a machine with no network (zstandard and
# msgpack-cxx, downloaded here once), and `.carry/` with the scripts and key files of a
# device-runs folder, which the scripts expect as `.carry/<name>`.
#   usage: build_tools/prepare_carry.sh [SCRIPTS_DIR]   (default: the newest
#          docs/device-runs/*/scripts)
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPTS=${1:-$(ls -d docs/device-runs/*/scripts | sort | tail -n 1)}
mkdir -p .whl .carry
if ! ls .whl/zstandard-*.whl .whl/msgpack_cxx-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d .whl zstandard==0.25.0 msgpack-cxx==7.0.0
fi
cp "$SCRIPTS"/*.sh "$SCRIPTS"/*.py "$SCRIPTS"/*.json "$SCRIPTS"/*.jsonl .carry/ 2>/dev/null || true
echo "$(ls .whl | wc -l) wheels in .whl/, $(ls .carry | wc -l) files in .carry/ (from $SCRIPTS)"
