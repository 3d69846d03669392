#!/usr/bin/env bash
# Device call AE (seventh session): the overlapped persistent N128 2-stage forward config, at
# head dims 96 and 128 without a mask (where the 3-stage one does not fit shared memory).
# (1) smoke of every gluon forward kernel; (2) `attnpack tune` of the 77 head-dim-96/128 full
# prefill forward keys, every candidate timed; (3) test_gluon_attn.py grid cases at 96 and 128
# without a mask, and the persistent-unit cases.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op fwd --head-dim 96 --head-dim 128 -o /tmp/t_fwd -j 8 ) > $L/build_tuning.log 2>&1 &
timeout 200 python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x -k smoke -p no:cacheprovider > $L/test_smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 1 $L/test_smoke.log
wait; tail -n 4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
if [ $rc != 0 ]; then tar czf $OUT/logsAE.tgz -C /tmp logs; exit 1; fi
timeout 200 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_fwd/$A -o $OUT/fwd_tuned_full_d96_128.jsonl \
  --keys .carry/keys_fwd_full_d96_128.json --minutes 2.5 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned_full_d96_128.jsonl; tail -n 1 $L/tune.log
tar czf $OUT/logsAE.tgz -C /tmp logs
timeout $((560 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x \
  -k "96-False or 128-False or persistent_units" -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 2 $L/test_gluon_attn.log
tar czf $OUT/logsAE.tgz -C /tmp logs
