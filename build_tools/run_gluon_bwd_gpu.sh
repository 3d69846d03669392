#!/usr/bin/env bash
# The Gluon backward on a GPU machine, without the default bundle: build libattnpack only, run
# tests/gpu/test_gluon_bwd.py, bench/gluon_bwd.py, and ncu on the main kernels. The archives
# come from prebuilt/ (built on any machine: gluon-bwd --all, gluon-fwd bf16 --all, triton-bwd
# bf16 d64/d128 defaults; bench/gluon_bwd.py --help) or are built here when missing.
#   usage: build_tools/run_gluon_bwd_gpu.sh          logs go to $OUT (default ./gpu-logs)
# This is the command of the device runs in docs/gluon-bwd.md.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/build.log"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/python:$PWD/tests/gpu${PYTHONPATH:+:$PYTHONPATH}
MS=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v python3)" \
   -DATTNPACK_BUILD_BUNDLE=OFF -DATTNPACK_MSGPACK_INCLUDE_DIR="$MS" \
 && cmake --build build-gpu --target attnpack) >> "$OUT/build.log" 2>&1
tail -1 "$OUT/build.log"
export ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
A=$(ls "$PWD"/prebuilt/gluon-bwd/attnpack-*-sm_90.apk 2>/dev/null | head -1)
[ -n "$A" ] && export ATTNPACK_GLUON_BWD_ARCHIVE=$A
timeout 600 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -p no:cacheprovider > "$OUT/test.log" 2>&1
tail -4 "$OUT/test.log"
timeout 600 python3 bench/gluon_bwd.py --archives prebuilt --warmup 5 --reps 20 --json "$OUT/bench.json" \
  > "$OUT/bench.txt" 2>&1
grep "^#" "$OUT/bench.txt"
A=$(ls "$PWD"/prebuilt/gluon-bwd/attnpack-*-sm_90.apk | head -1)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy"
timeout 300 "$NCU" --clock-control none -k regex:'^attn_bwd_dkdv_dq_atomic$' --launch-skip 2 --launch-count 1 $SECTIONS \
  python3 bench/profile_bwd.py "$A" gluon/bwd/bf16-d128-full/M64_stages2_det0 > "$OUT/ncu_det0.txt" 2>&1
timeout 300 "$NCU" --clock-control none -k regex:'^attn_bwd_d(kdv|q)$' --launch-skip 4 --launch-count 2 $SECTIONS \
  python3 bench/profile_bwd.py "$A" gluon/bwd/bf16-d128-full/M64_stages2_det1_qN128 > "$OUT/ncu_det1.txt" 2>&1
