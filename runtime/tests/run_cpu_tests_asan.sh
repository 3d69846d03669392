#!/usr/bin/env bash
# The runtime's CPU tests (tests/cpu/test_runtime*.py) against an AddressSanitizer and
# UndefinedBehaviorSanitizer build of libattnpack, loaded into Python with ASan's runtime
# preloaded; the archive fuzzer (test_runtime_fuzz.py) runs its sanitized build on
# ATTNPACK_FUZZ_MUTANTS mutants (default 3000).
#   usage: runtime/tests/run_cpu_tests_asan.sh [pytest args...]
#   env:   PY (default .venv/bin/python), BUILD_DIR (default build/rt-asan)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
BUILD_DIR=${BUILD_DIR:-build/rt-asan}

cmake -S runtime -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DATTNPACK_SANITIZE=address,undefined \
  -DPython3_EXECUTABLE="$PY" >/dev/null
cmake --build "$BUILD_DIR"

# The test archives are compiled first, outside the sanitizer: Triton's compiler is not built
# for it and dies under a preloaded libasan.
ARCHIVES=$(mktemp -d)
trap 'rm -rf "$ARCHIVES"' EXIT
PYTHONPATH=python:tests/cpu "$PY" -c "import test_runtime_fixtures as f; f.prebuild('$ARCHIVES')"

# libstdc++ is preloaded too: python does not link it, and ASan can intercept C++ throws only
# if it is there at start-up. detect_leaks=0: CPython itself does not free everything at exit.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
ATTNPACK_FUZZ_MUTANTS=${ATTNPACK_FUZZ_MUTANTS:-3000} \
LD_PRELOAD="$(${CXX:-g++} -print-file-name=libasan.so):$(${CXX:-g++} -print-file-name=libstdc++.so)" \
ATTNPACK_RUNTIME_LIB="$BUILD_DIR/libattnpack.so" ATTNPACK_TEST_ARCHIVE_DIR="$ARCHIVES" \
PYTHONPATH=python "$PY" -m pytest -q -p no:cacheprovider tests/cpu/test_runtime*.py "$@"
