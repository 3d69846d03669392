#!/usr/bin/env bash
# Thirteenth session, second call, on the machine runBM.sh just used. If runBM kept the tensor-
# core row sums (/tmp/bm_state says "tc": every test passed and the best tc kernel per shape
# was at least 0.5 % faster by cycles), re-tune the 214 bf16 prefill forward keys on the
# patched full archive, then the 102 fp16 prefill forward keys as far as the time goes.
# Otherwise (or on a fresh machine) run runBH.sh: the backward and fp16 forward re-tune on main.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs2; mkdir -p $L
state=$(cat /tmp/bm_state 2>/dev/null || echo none)
echo "runBM state: $state" | tee $OUT/state.txt
if [ "$state" != tc ]; then exec bash .carry/runBH.sh; fi
grep -q TC_SUM aot/kernels/gluon_attn/fwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/fwd_tcsum.patch || { echo "patch failed"; exit 1; }
. build_tools/runtime_env.sh $L
python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon -o /tmp/ta -j 16 > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout $((590 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_bf16.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((400 - $SECONDS) / 60, 2))") > $L/tune_fwd_bf16.log 2>&1
echo "bf16 tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_bf16.jsonl
timeout $((590 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_fp16.jsonl \
  --keys .carry/keys_fwd_fp16_prefill.json --minutes $(python3 -c "print(max(0.1, round((575 - $SECONDS) / 60, 2)))") > $L/tune_fwd_fp16.log 2>&1
echo "fp16 tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_fp16.jsonl
for t in bf16 fp16; do
  grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd_$t.log | tail -n 40 > $OUT/tune_fwd_$t.txt
done
