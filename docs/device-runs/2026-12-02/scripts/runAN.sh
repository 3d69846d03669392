#!/usr/bin/env bash
# Device call AN (ninth session): K released after QKᵀ (`kfree1`: a k_free barrier of its own,
# so the loader refills a slot's K an iteration before V) against the same forward kernels
# releasing K with V. The archive (.carry/ab_kfree, bf16, CPU-built from this tree with every
# forward config doubled by the knob) carries both. (1) smoke of its 172 gluon kernels on three
# problems against fp32 math, in a child with a deadline; (2) `attnpack tune` of the 214 bf16
# prefill forward keys (head dims 128, 256, 64, 96 in that order), every candidate timed.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
echo "runtime at $SECONDS s"
A=$PWD/.carry/ab_kfree/attnpack-0.1.0-sm_90.apk
timeout 150 python3 .carry/smoke_archive.py $A > $L/smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 2 $L/smoke.log; grep BAD $L/smoke.log | head
cp $L/* $OUT/ 2>/dev/null
if [ $rc != 0 ]; then exit 1; fi
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_kfree.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((540 - $SECONDS) / 60, 2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_kfree.jsonl; tail -n 1 $L/tune.log
cp $L/* $OUT/ 2>/dev/null
