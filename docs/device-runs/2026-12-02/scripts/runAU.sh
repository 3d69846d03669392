#!/usr/bin/env bash
# Device call AU (tenth session): the deferred last PV (a persistent program with two consumers
# issues a work tile's last PV in the next tile's first turn, beside that tile's first QKᵀ)
# against the committed forward (d6931fc). The archive (.carry/ab_defer, bf16, gluon, CPU-built
# from a tree with FWD_CONFIGS doubled: NAME is the committed kernel, NAME_new1 the new one)
# carries both. (1) smoke of the new kernels on five problems against fp32 math; (2) `attnpack
# tune` of the 214 bf16 prefill forward keys, every candidate timed.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
echo "runtime at $SECONDS s"
A=$PWD/.carry/ab_defer/attnpack-0.1.0-sm_90.apk
timeout 170 python3 .carry/smoke_archive.py $A new1 > $L/smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 2 $L/smoke.log; grep BAD $L/smoke.log | head
cp $L/* $OUT/ 2>/dev/null
if [ $rc != 0 ]; then exit 1; fi
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_defer.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((545 - $SECONDS) / 60, 2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_defer.jsonl; tail -n 1 $L/tune.log
cp $L/* $OUT/ 2>/dev/null
python3 .carry/twins.py $OUT/fwd_defer.jsonl new1 | tail -40
