#!/usr/bin/env bash
# Device call AO (ninth session): the forward with K released before V in 2-stage rings (the
# final kernels: .carry/final_fwd, CPU-built `--all --op fwd` gluon+triton, both dtypes).
# (1) smoke of its 344 gluon kernels on three problems against fp32 math, in a child with a
# deadline; (2) `attnpack tune` of 316 prefill forward keys (bf16 214, fp16 102); (3)
# test_gluon_attn.py at head dims 128 and 256 and the persistent-unit cases, as time allows.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
echo "runtime at $SECONDS s"
A=$PWD/.carry/final_fwd/attnpack-0.1.0-sm_90.apk
timeout 150 python3 .carry/smoke_archive.py $A > $L/smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 1 $L/smoke.log; grep BAD $L/smoke.log | head
cp $L/* $OUT/ 2>/dev/null
if [ $rc != 0 ]; then exit 1; fi
timeout $((450 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_tuned.jsonl \
  --keys .carry/keys_fwd_all.json --minutes $(python3 -c "print(round((420 - $SECONDS) / 60, 2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_tuned.jsonl; tail -n 1 $L/tune.log
cp $L/* $OUT/ 2>/dev/null
timeout $((590 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -x \
  -k "128-False or 128-True or 256-False or 256-True or persistent_units" -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 2 $L/test_gluon_attn.log
cp $L/* $OUT/ 2>/dev/null
