#!/usr/bin/env bash
# Device call P (fourth session): the plain schedule back on its mbarrier turn (the overlapped
# one keeps the named barriers). A/B of the head-dim-128 bf16 forwards, bba926e (cur) against
# this tree (hyb), then tests/gpu/test_gluon_attn.py on this tree, then `attnpack tune` of the
# prefill forward keys whose best plain config was within 6 % of the winner, merged on the machine.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs
. build_tools/runtime_env.sh $L
( python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd -o /tmp/t_fwd -j 8 ) > $L/build_tuning.log 2>&1 &
B="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 --head-dim 128 -j 4"
rm -rf /tmp/ab_cur && mkdir /tmp/ab_cur && cp -r aot python /tmp/ab_cur/
cp .carry/ab/fwd_cur.py /tmp/ab_cur/aot/kernels/gluon_attn/fwd.py
( cd /tmp/ab_cur && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_cur/python python3 -m attnpack.cli $B -o /tmp/a_cur ) > $L/build_cur.log 2>&1 &
python3 -m attnpack.cli $B -o /tmp/a_hyb > $L/build_hyb.log 2>&1
while [ ! -s /tmp/a_cur/attnpack-0.1.0-sm_90.apk ] && [ $SECONDS -lt 150 ]; do sleep 2; done
sleep 1; echo "ab builds done at $SECONDS s"
timeout 90 python3 bench/kernel_ab.py --archive cur=/tmp/a_cur/attnpack-0.1.0-sm_90.apk \
  --archive hyb=/tmp/a_hyb/attnpack-0.1.0-sm_90.apk --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --reps 15 --json $L/ab.json > $L/ab.txt 2>&1
echo "ab rc $? at $SECONDS s"; cut -c1-150 $L/ab.txt
tar czf $OUT/logsP.tgz -C /tmp logs
wait
timeout $((470 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -x -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -2 $L/test_gluon_attn.log
tar czf $OUT/logsP.tgz -C /tmp logs
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/attnpack-0.1.0-sm_90.apk -o $OUT/fwd_plain.jsonl \
  --keys .carry/keys_fwd_plain.json --minutes $(python3 -c "print(max(0.2, (555 - $SECONDS) / 60 - 0.2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_plain.jsonl
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/fwd_plain.jsonl -o $OUT/sm_90.jsonl > $L/merge.log 2>&1; tail -1 $L/merge.log
tar czf $OUT/logsP.tgz -C /tmp logs
