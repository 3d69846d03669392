#!/usr/bin/env bash
# Device call X (sixth session): A/B of the persistent Gluon forward's work order, three trees:
# base (0bc6114, head-major tiles), lpt (adefda1, longest first in L2-sized head groups), pair
# (this tree: units pairing row block i with R-1-i); then `attnpack tune` of the prefill forward
# keys with this tree's kernels, merged; then tests/gpu/test_gluon_attn.py.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd -o /tmp/t_fwd -j 8 ) > $L/build_tuning.log 2>&1 &
F="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -j 3"
for side in base lpt; do
  rm -rf /tmp/ab_$side && mkdir /tmp/ab_$side && cp -r aot python /tmp/ab_$side/
  cp .carry/ab/fwd_$side.py /tmp/ab_$side/aot/kernels/gluon_attn/fwd.py
  ( cd /tmp/ab_$side && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_$side/python python3 -m attnpack.cli $F -o /tmp/f_$side ) > $L/build_f_$side.log 2>&1 &
done
python3 -m attnpack.cli $F -o /tmp/f_pair > $L/build_f_pair.log 2>&1
A=attnpack-0.1.0-sm_90.apk
while [ ! -s /tmp/f_base/$A -o ! -s /tmp/f_lpt/$A ] && [ $SECONDS -lt 150 ]; do sleep 2; done
sleep 1; tail -qn1 $L/build_f_*.log; echo "ab builds done at $SECONDS s"
timeout 130 python3 bench/kernel_ab.py --archive base=/tmp/f_base/$A --archive lpt=/tmp/f_lpt/$A \
  --archive pair=/tmp/f_pair/$A --kernel-filter persistent1 --shapes bench/shapes.json \
  --shapes bench/model_shapes.json --json $L/ab_fwd.json > $L/ab_fwd.txt 2>&1
echo "ab fwd rc $? at $SECONDS s"; cut -c1-200 $L/ab_fwd.txt | tail -n 45
wait; tail -n4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
tar czf $OUT/logsX.tgz -C /tmp logs
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/$A -o $OUT/fwd_tuned.jsonl \
  --keys .carry/keys_fwd_prefill.json --minutes 3.6 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned.jsonl
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/fwd_tuned.jsonl -o $OUT/sm_90.jsonl > $L/merge.log 2>&1; tail -3 $L/merge.log
tar czf $OUT/logsX.tgz -C /tmp logs
timeout $((575 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -x -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 3 $L/test_gluon_attn.log
tar czf $OUT/logsX.tgz -C /tmp logs
