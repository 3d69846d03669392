#!/usr/bin/env bash
# tests/gpu on a machine with a GPU: build libattnpack and the bundle for *this* GPU on the
# machine itself, then run pytest. Works unchanged on NVIDIA sm_90 and on AMD gfx942/gfx950
# (ROCm torch). Needs python3 with torch and triton, cmake, a C++17 compiler and libzstd.
# Offline machines: put the wheels of zstandard and msgpack-cxx in .whl/ (README, "GPU runs").
# gfx950 also builds the flydsl family: the flydsl 0.4.2 wheel (installed, or in .whl/) and an
# ld.lld (Debian lld-19, or ROCm's /opt/rocm/llvm/bin/ld.lld); build_tools/install_flydsl.sh.
#   usage: build_tools/run_gpu_tests.sh [pytest args...]     logs go to $OUT (default ./gpu-logs)
#   BENCH=1 also runs the runtime and torch overhead benchmarks and `attnpack bench` after the tests.
#   FILES="tests/gpu/test_torch_sdpa.py ..." runs only those test files.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
LOGS=${OUT:-$PWD/gpu-logs}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/attnpack-site .whl/*.whl
  export PYTHONPATH=/tmp/attnpack-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

ARCH=$($PY - <<'PY'
import torch
p = torch.cuda.get_device_properties(0)
print(p.gcnArchName.split(":")[0] if torch.version.hip else f"sm_{p.major}{p.minor}")
PY
)
MSGPACK_INCLUDE=$($PY -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
echo "GPU arch $ARCH; building runtime + bundle on this machine" | tee "$LOGS/build.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$LOGS/build.log" || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" \
  -DATTNPACK_TARGET_ARCHS="$ARCH" -DATTNPACK_MSGPACK_INCLUDE_DIR="$MSGPACK_INCLUDE" \
  -DATTNPACK_BUILD_JOBS="$(nproc)" -DATTNPACK_BUILD_BENCH="${BENCH:-0}" 2>&1 | tee -a "$LOGS/build.log" | tail -3
( time cmake --build build-gpu ) 2>&1 | tee -a "$LOGS/build.log" | tail -8

# The PyTorch extension. A CUDA torch's find_package(Torch) may insist on a CUDA toolkit it
# likes; the second configure links libtorch_cpu and libc10 directly instead.
TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
EXT=(-S python/attnpack/torch/csrc -B build-gpu/torch -G Ninja -DCMAKE_BUILD_TYPE=Release
     -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DPython3_EXECUTABLE="$(command -v $PY)"
     -DATTNPACK_MSGPACK_INCLUDE_DIR="$MSGPACK_INCLUDE")
{ cmake "${EXT[@]}" || cmake "${EXT[@]}" -DATTNPACK_TORCH_FIND_PACKAGE=OFF; } 2>&1 | tee -a "$LOGS/build.log" | tail -3
cmake --build build-gpu/torch 2>&1 | tee -a "$LOGS/build.log" | tail -3
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so

export ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle
export ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
(cd build-gpu/runtime && ctest --output-on-failure) 2>&1 | tee "$LOGS/ctest.log" | tail -3
# One pytest process per file, so a crash in one cannot hide the results of the others.
status=0
for file in ${FILES:-tests/gpu/test_*.py}; do
  name=$(basename "$file" .py)
  rc=0
  $PY -X faulthandler -m pytest "$file" -v -rfEs --tb=short -p no:cacheprovider "$@" \
    > "$LOGS/$name.log" 2>&1 || rc=$?
  last=$(tail -n 1 "$LOGS/$name.log")
  # pytest exits 5 when a whole file skips at collection (test_multi_gpu.py on one GPU): that is
  # a clean skip, not a failure. Exit 5 without a skip (nothing collected) stays a failure.
  if [ $rc = 5 ] && [[ $last == *" skipped"* ]]; then rc=0; fi
  [ $rc = 0 ] || status=$rc
  echo "$name: $last"
done
if [ "${BENCH:-0}" = 1 ]; then
  # Forward and backward, the default selection and one kernel of each family the archive has
  # for the bench's problem: $LOGS/runtime_overhead.json.
  PY=$PY build_tools/runtime_overhead_runs.sh "$LOGS" || status=1
  $PY bench/torch_overhead.py 2>&1 | tee "$LOGS/torch_overhead.txt"
  # attnpack against PyTorch's backends over both shape sets, plus the dynamic-lengths report:
  # results.json/.csv, report.md (docs/performance.md) and the plots (with matplotlib) in $LOGS/bench.
  $PY -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --out "$LOGS/bench" \
    > "$LOGS/bench.txt" 2> "$LOGS/bench.err" || status=1
  tail -n 12 "$LOGS/bench.err"
fi
exit $status
