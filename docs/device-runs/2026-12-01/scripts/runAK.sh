#!/usr/bin/env bash
# Device call AK (eighth session): a second Q buffer per consumer in the persistent Gluon
# forward (`qstages 2`: the next work tile's Q loads during this one), in the two persistent
# configs that win most head-dim-128 keys. (1) smoke of every gluon forward kernel; (2) `attnpack
# tune` of the 140 head-dim-128 prefill forward keys, every candidate timed (the A/B: each
# qstages config against the same config with one Q buffer, per key); (3) test_gluon_attn.py
# grid cases at head dim 128 and the persistent-unit cases.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd --head-dim 128 --dtype bf16 -o /tmp/t_fwd -j 8 ) > $L/build_tuning.log 2>&1 &
timeout 200 python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x -k smoke -p no:cacheprovider > $L/test_smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 1 $L/test_smoke.log
wait; tail -n 4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
if [ $rc != 0 ]; then tar czf $OUT/logsAK.tgz -C /tmp logs; exit 1; fi
timeout 200 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/$A -o $OUT/fwd_tuned_d128.jsonl \
  --keys .carry/keys_fwd_d128.json --minutes 2.5 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned_d128.jsonl; tail -n 1 $L/tune.log
tar czf $OUT/logsAK.tgz -C /tmp logs
timeout $((540 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x \
  -k "128-False or 128-True or persistent_units" -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 2 $L/test_gluon_attn.log
tar czf $OUT/logsAK.tgz -C /tmp logs
