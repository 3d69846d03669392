#!/usr/bin/env bash
# Device call N (fourth session): A/B of the Gluon forward, main before this change (old) against
# the final tree (new: K/V split with 2-stage rings, turns on named barriers), kernel-level, then
# `attnpack tune` of every prefill forward key of the database (bf16 first) with the new kernels,
# merged into sm_90.jsonl on the machine.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd -o /tmp/t_fwd -j 9 ) > $L/build_tuning.log 2>&1 &
B="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -j 3"
rm -rf /tmp/ab_old && mkdir /tmp/ab_old && cp -r aot python /tmp/ab_old/
cp .carry/ab/fwd_old.py /tmp/ab_old/aot/kernels/gluon_attn/fwd.py
( cd /tmp/ab_old && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_old/python python3 -m attnpack.cli $B -o /tmp/a_old ) > $L/build_old.log 2>&1 &
python3 -m attnpack.cli $B -o /tmp/a_new > $L/build_new.log 2>&1
while [ ! -s /tmp/a_old/attnpack-0.1.0-sm_90.apk ] && [ $SECONDS -lt 200 ]; do sleep 2; done
sleep 1; tail -n2 $L/build_old.log $L/build_new.log; echo "ab builds done at $SECONDS s"
timeout 200 python3 bench/kernel_ab.py --archive old=/tmp/a_old/attnpack-0.1.0-sm_90.apk \
  --archive new=/tmp/a_new/attnpack-0.1.0-sm_90.apk --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $L/ab.json > $L/ab.txt 2>&1
echo "ab rc $? at $SECONDS s"; cut -c1-170 $L/ab.txt
wait; tail -n4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
tar czf $OUT/logsN.tgz -C /tmp logs
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/attnpack-0.1.0-sm_90.apk -o $OUT/fwd_tuned.jsonl \
  --keys .carry/keys_fwd_prefill.json --minutes $(python3 -c "print(max(0.5, (560 - $SECONDS) / 60 - 0.4))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned.jsonl
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/fwd_tuned.jsonl -o $OUT/sm_90.jsonl > $L/merge.log 2>&1; tail -3 $L/merge.log
tar czf $OUT/logsN.tgz -C /tmp logs
