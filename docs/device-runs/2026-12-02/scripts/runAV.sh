#!/usr/bin/env bash
# Device call AV (tenth session): the epilogue overlapped with the next work tile's first QKᵀ (a
# persistent program with two consumers issues a tile's last PV, then the next tile's first QKᵀ, and runs the epilogue while that QKᵀ is in flight)
# against the committed forward (d6931fc). The archive (.carry/ab_epi, bf16, gluon, CPU-built
# from a tree with FWD_CONFIGS doubled: NAME is the committed kernel, NAME_epi1 the new one (persistent two-consumer configs only))
# carries both. (1) smoke of the new kernels on five problems against fp32 math; (2) `attnpack
# tune` of the 214 bf16 prefill forward keys, every candidate timed.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
echo "runtime at $SECONDS s"
A=$PWD/.carry/ab_epi/attnpack-0.1.0-sm_90.apk
timeout 170 python3 .carry/smoke_archive.py $A epi1 > $L/smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 2 $L/smoke.log; grep BAD $L/smoke.log | head
cp $L/* $OUT/ 2>/dev/null
if [ $rc != 0 ]; then exit 1; fi
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_epi.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((545 - $SECONDS) / 60, 2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_epi.jsonl; tail -n 1 $L/tune.log
cp $L/* $OUT/ 2>/dev/null
python3 .carry/twins.py $OUT/fwd_epi.jsonl epi1 | tail -40
