#!/usr/bin/env bash
# Prepared in the eleventh session for the next one (not run): re-tune with the tuner's new
# timing (queued reps behind a GPU spin, docs/tuning.md "Timing kernels of a few
# microseconds") the entries still timed the old way: the 198 bf16 backward keys first (issue
# 15), then the 102 fp16 prefill forward keys, as far as the call's time goes (resumable: run
# it again with the same -o files to go on).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon -o /tmp/ta -j 16 ) > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"; tail -n 3 $L/build_tuning.log
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/bwd_bf16_lead.jsonl \
  --keys .carry/keys_bwd_bf16_all.json --minutes $(python3 -c "print(round((480 - $SECONDS) / 60, 2))") > $L/tune_bwd.log 2>&1
echo "bwd tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_bf16_lead.jsonl
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_fp16_lead.jsonl \
  --keys .carry/keys_fwd_fp16_prefill.json --minutes $(python3 -c "print(max(0.1, round((560 - $SECONDS) / 60, 2)))") > $L/tune_fwd.log 2>&1
echo "fwd tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_fp16_lead.jsonl
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_bwd.log > $OUT/tune_bwd.txt
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd.log > $OUT/tune_fwd.txt
cp $L/build_tuning.log $OUT/ 2>/dev/null
