#!/usr/bin/env bash
# Device call S2 (fifth session): `attnpack tune` of the 264 backward keys at head dims 64/128
# of the database (bf16 first) over a triton + gluon tuning archive of those head dims, with the
# Gluon backward's dQ TMA reduce-add variants (tma1). Call S built that archive without
# forwards, which the tuner needs for O and LSE, and tuned nothing (its test_gluon_bwd passed).
cd "$(dirname "$0")/.."
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
export PYTHONPATH=$PYTHONPATH:$PWD/tests/gpu
echo "git $ATTNPACK_COMMIT; runtime built at $SECONDS s: $(tail -1 $L/cmake.log)"
B="python3 -m attnpack.cli build --arch sm_90 --all --head-dim 64 --head-dim 128 -j 16"
$B --family gluon --family triton -o /tmp/tuning > $L/build_tuning.log 2>&1
echo "built at $SECONDS s: $(tail -1 $L/build_tuning.log)"
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tuning/attnpack-*-sm_90.apk -o $OUT/bwd_tuned.jsonl \
  --keys .carry/keys_bwd_tma.json --minutes $(python3 -c "print(max(0.5, (560 - $SECONDS) / 60 - 0.3))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s: $(grep -c '"op": "bwd"' $OUT/bwd_tuned.jsonl) keys"
grep -v "UserWarning\|o = F.scaled\|return Variable" $L/tune.log | tail -3
tar czf $OUT/logsS2.tgz -C /tmp logs
