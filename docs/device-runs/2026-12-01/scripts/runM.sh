#!/usr/bin/env bash
# Device call M (fourth session): A/B of the Gluon forward's loads and turn, the same kernels
# built from three trees: old (main before this change), kv (K and V on ready barriers of their
# own, Q loaded before V(0)), nb (kv plus the turn on named hardware barriers). Kernel-level,
# every bf16 forward config on every prefill row of bench/shapes.json and bench/model_shapes.json,
# against cuDNN in the same run. Then tests/gpu/test_gluon_attn.py on the nb tree, as time allows.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs
. build_tools/runtime_env.sh $L
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
