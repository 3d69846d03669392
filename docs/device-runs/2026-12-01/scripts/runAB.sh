#!/usr/bin/env bash
# Device call AB (seventh session): three consumer warpgroups in the Gluon forward, head dim 64.
# (1) `attnpack tune` of the 134 head-dim-64 prefill forward keys with the 6 three-consumer
# configs beside the 12 two-consumer ones and the triton ones: every candidate's time per key is
# the A/B (the output keeps them all); (2) tests/gpu/test_gluon_attn.py: smoke (every kernel),
# persistent units, and the head-dim-64 grid cases (every config of the key each).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd --head-dim 64 -o /tmp/t_fwd -j 8 ) > $L/build_tuning.log 2>&1 &
# every kernel once, first: a deadlock (a wrong barrier phase) must not hang the tuner
timeout 200 python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x -k smoke -p no:cacheprovider > $L/test_smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 3 $L/test_smoke.log
wait; tail -n 4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
if [ $rc != 0 ]; then tar czf $OUT/logsAB.tgz -C /tmp logs; exit 1; fi
timeout 300 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/$A -o $OUT/fwd_tuned_d64.jsonl \
  --keys .carry/keys_fwd_d64.json --minutes 3.5 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned_d64.jsonl; tail -n 2 $L/tune.log
tar czf $OUT/logsAB.tgz -C /tmp logs
timeout $((570 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x \
  -k "persistent_units or 64-True or 64-False" -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 3 $L/test_gluon_attn.log
tar czf $OUT/logsAB.tgz -C /tmp logs
