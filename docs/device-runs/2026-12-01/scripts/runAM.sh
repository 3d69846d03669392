#!/usr/bin/env bash
# Device call AM (eighth session): tuning entries for fp16 at head dim 256 (the 29 keys bf16
# has: 18 forward, 11 backward), every gluon and triton candidate timed.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --head-dim 256 --dtype fp16 -o /tmp/t16 -j 16 ) > $L/build_tuning16.log 2>&1
tail -n 3 $L/build_tuning16.log; echo "tuning archive at $SECONDS s"
timeout $((230 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t16/$A -o $OUT/fp16_d256.jsonl \
  --keys .carry/keys_fp16_d256.json --minutes 2.3 > $L/tune16.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op"' $OUT/fp16_d256.jsonl; tail -n 1 $L/tune16.log
cp $L/tune16.log $L/build_tuning16.log $OUT/
