#!/usr/bin/env bash
# Device call S (fifth session): the Gluon backward with the dQ TMA reduce-add through a host
# tensor map over the dq_accum workspace (format 2.4). tests/gpu/test_gluon_bwd.py over every
# declared gluon backward kernel, then `attnpack tune` of the 274 backward keys at head dims
# 64/128 of the database (bf16 first) over a triton + gluon backward tuning archive.
cd "$(dirname "$0")/.."
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
export PYTHONPATH=$PYTHONPATH:$PWD/tests/gpu
echo "git $ATTNPACK_COMMIT; runtime built at $SECONDS s: $(tail -1 $L/cmake.log)"
B="python3 -m attnpack.cli build --arch sm_90 --all --op bwd --head-dim 64 --head-dim 128 -j 16"
$B --family gluon -o /tmp/gluon-bwd > $L/build_gluon.log 2>&1
$B --family gluon --family triton -o /tmp/tuning > $L/build_tuning.log 2>&1
echo "built at $SECONDS s: $(tail -1 $L/build_gluon.log); $(tail -1 $L/build_tuning.log)"
export ATTNPACK_GLUON_BWD_ARCHIVE=$(ls /tmp/gluon-bwd/attnpack-*-sm_90.apk)
timeout 240 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -p no:cacheprovider > $L/test_bwd.log 2>&1
echo "test rc $? at $SECONDS s"; tail -2 $L/test_bwd.log; grep -E "^FAILED|^ERROR" $L/test_bwd.log | head -10
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tuning/attnpack-*-sm_90.apk -o $OUT/bwd_tuned.jsonl \
  --keys .carry/keys_bwd_tma.json --minutes $(python3 -c "print(max(0.5, (555 - $SECONDS) / 60 - 0.3))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s: $(grep -c '"op": "bwd"' $OUT/bwd_tuned.jsonl) keys"
grep -v "UserWarning\|o = F.scaled\|return Variable" $L/tune.log | tail -3
tar czf $OUT/logsS.tgz -C /tmp logs
