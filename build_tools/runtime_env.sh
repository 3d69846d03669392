# Sourced by device-run scripts (docs/device-runs/*/scripts/): on a GPU machine with torch and
# triton but no network, put this checkout's Python deps and libattnpack alone (no bundle) in
# place for `attnpack build`, `attnpack tune` and the bench scripts.
#   . build_tools/runtime_env.sh [LOG_DIR]      from the repository root
# It installs the wheels in .whl/ (zstandard, msgpack-cxx: README, "GPU runs") into
# /tmp/attnpack-site, builds the runtime into build-tune/ for the local GPU's arch (cmake log
# in LOG_DIR, default /tmp/logs; ATTNPACK_ARCH overrides the arch), and exports PYTHONPATH and
# ATTNPACK_RUNTIME_LIB.
_log=${1:-/tmp/logs}
mkdir -p "$_log"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
fi
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
_arch=${ATTNPACK_ARCH:-$(python3 -c "import torch; p = torch.cuda.get_device_properties(0); print(p.gcnArchName.split(':')[0] if torch.version.hip else f'sm_{p.major}{p.minor}')")}
_msg=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS="$_arch" \
    -DATTNPACK_MSGPACK_INCLUDE_DIR="$_msg" -DATTNPACK_BUILD_BUNDLE=OFF \
  && cmake --build build-tune --target attnpack; } > "$_log/cmake.log" 2>&1
export ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so
unset _log _arch _msg
