#!/usr/bin/env bash
# Device run: build libattnpack and a bf16 tuning archive (triton + gluon, every variant) on the
# machine, then `attnpack tune` the keys of .carry/tune_keys.json in their order, for MINUTES.
set -uo pipefail
cd "$(dirname "$0")/.."
L=$OUT/logs; mkdir -p $L
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
{ cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-gpu --target attnpack; } > $L/cmake.log 2>&1
export ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
ls -la $ATTNPACK_RUNTIME_LIB >> $L/cmake.log 2>&1
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon --dtype bf16 -o /tmp/tuning -j 16 ) > $L/build_all.log 2>&1
tail -3 $L/build_all.log
( time python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tuning/attnpack-*-sm_90.apk \
    -o $OUT/tuned.jsonl --keys .carry/tune_keys.json --minutes $(python3 -c "print(max(0.5, (${BUDGET_S:-540} - $SECONDS - 20) / 60))") ) > $L/tune.log 2>&1
grep -v "UserWarning\|o = F.scaled\|return Variable" $L/tune.log | tail -5
tar czf $OUT/logs.tgz -C $OUT logs
