#!/usr/bin/env bash
# Device call M (fourth session): A/B of the Gluon forward's loads and turn, the same kernels
# built from three trees: old (main before this change), kv (K and V on ready barriers of their
# own, Q loaded before V(0)), nb (kv plus the turn on named hardware barriers). Kernel-level,
# every bf16 forward config on every prefill row of bench/shapes.json and bench/model_shapes.json,
# against cuDNN in the same run. Then tests/gpu/test_gluon_attn.py on the nb tree, as time allows.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/cmake.log 2>&1
export ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so
B="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -j 5"
for side in old kv; do
  rm -rf /tmp/ab_$side && mkdir /tmp/ab_$side && cp -r aot python /tmp/ab_$side/
  cp .carry/ab/fwd_$side.py /tmp/ab_$side/aot/kernels/gluon_attn/fwd.py
  ( cd /tmp/ab_$side && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_$side/python python3 -m attnpack.cli $B -o /tmp/a_$side ) > $L/build_$side.log 2>&1 &
done
python3 -m attnpack.cli $B -o /tmp/a_nb > $L/build_nb.log 2>&1
wait
tail -n2 $L/build_*.log
echo "builds done at $SECONDS s"
A=(--archive old=$(ls /tmp/a_old/*.apk) --archive kv=$(ls /tmp/a_kv/*.apk) --archive nb=$(ls /tmp/a_nb/*.apk))
timeout 300 python3 bench/kernel_ab.py "${A[@]}" --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $L/ab.json > $L/ab.txt 2>&1
echo "ab rc $? at $SECONDS s"; cat $L/ab.txt | cut -c1-200
tar czf $OUT/logsM.tgz -C /tmp logs
left=$((565 - SECONDS))
if [ $left -gt 120 ]; then
  timeout $left python3 -m pytest tests/gpu/test_gluon_attn.py -q -x -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
  echo "test rc $? at $SECONDS s"; tail -3 $L/test_gluon_attn.log
fi
tar czf $OUT/logsM.tgz -C /tmp logs
