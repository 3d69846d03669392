#!/usr/bin/env bash
# The test suite on this machine: CPU tests always; tests/gpu too, which skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
$PY -m pytest tests/cpu tests/gpu -q "$@"
