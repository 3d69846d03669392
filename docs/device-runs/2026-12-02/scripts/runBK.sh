#!/usr/bin/env bash
# Twelfth session, second call (run59): the working tree's Gluon forward (epilogue reciprocal
# in every kernel; LAZY variants: O rescaled only when a row's max moved by more than 2^8,
# decided by one bar.red.or). test_gluon_attn.py at head dim 128 (every kernel, lazy ones
# included), the growing-maxima test and the smoke test; then the 214 bf16 prefill forward
# keys re-tuned on the full archive (lazy variants among the candidates).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_gluon_attn.py" OUT=$L timeout 260 bash build_tools/run_gpu_tests.sh \
  -k "growing or 128-False or 128-True or smoke" > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
grep -E "FAILED|^E  " $L/test_gluon_attn.log | cut -c1-600 > $OUT/tests_fail.txt
tail -n 3 $L/test_gluon_attn.log >> $OUT/tests_fail.txt
. build_tools/runtime_env.sh $L
python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon -o /tmp/ta -j 16 > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout $((590 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_bf16.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((575 - $SECONDS) / 60, 2))") > $L/tune_fwd_bf16.log 2>&1
echo "bf16 tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_bf16.jsonl
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd_bf16.log | tail -n 40 > $OUT/tune_fwd_bf16.txt
