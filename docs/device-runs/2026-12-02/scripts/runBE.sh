#!/usr/bin/env bash
# Device call BE (eleventh session): the tuner with a host lead before each timed rep (and reps
# queued, a settling second). A forward tuning archive (triton + gluon, every config, both
# dtypes) built here; the 68 decode keys re-tuned; then the 214 bf16 prefill forward keys.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon --op fwd -o /tmp/tf -j 16 ) > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"; tail -n 4 $L/build_tuning.log
A=/tmp/tf/attnpack-0.1.0-sm_90.apk
timeout 120 python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/decode_lead.jsonl \
  --keys .carry/keys_decode_all.json > $L/tune_decode.log 2>&1
echo "decode tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/decode_lead.jsonl
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_bf16_lead.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((555 - $SECONDS) / 60, 2))") > $L/tune_fwd.log 2>&1
echo "fwd tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_bf16_lead.jsonl; tail -n 1 $L/tune_fwd.log
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_decode.log > $OUT/tune_decode.txt
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd.log > $OUT/tune_fwd.txt
cp $L/build_tuning.log $L/gpu.txt $OUT/ 2>/dev/null
