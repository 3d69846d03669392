#!/usr/bin/env bash
# Prepared in the thirteenth session for the next one (not run): re-tune the 30 bf16 backward
# keys of keys_bwd_bf16_next.json (the 20 whose timing batch grew with runner.BWD_MIN_PROGRAMS,
# docs/tuning.md, and the 11 run62 did not reach; one is both), then the 36 fp16 prefill forward
# keys run62 did not reach (keys_fwd_fp16_left.json). Merge both over the committed database
# with `attnpack db merge`; then bench (scripts/runBU.sh). Run after runBT.sh on the same
# machine, it builds the tuning archive with bwd_lpt.patch applied if runBT kept it.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs2; mkdir -p $L
# after runBT.sh on the same machine: tune on the longest-first grids if it kept them
if [ "$(cat /tmp/ab_state 2>/dev/null)" = lpt ]; then
  grep -q "_block_and_head" aot/kernels/gluon_attn/bwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_lpt.patch
fi
echo "runBT state: $(cat /tmp/ab_state 2>/dev/null || echo none)" | tee $OUT/state.txt
. build_tools/runtime_env.sh $L
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon -o /tmp/ta -j 16 ) > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"; tail -n 3 $L/build_tuning.log
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/bwd_bf16_next.jsonl \
  --keys .carry/keys_bwd_bf16_next.json --minutes $(python3 -c "print(round((420 - $SECONDS) / 60, 2))") > $L/tune_bwd.log 2>&1
echo "bwd tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_bf16_next.jsonl
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_fp16_left.jsonl \
  --keys .carry/keys_fwd_fp16_left.json --minutes $(python3 -c "print(max(0.1, round((560 - $SECONDS) / 60, 2)))") > $L/tune_fwd.log 2>&1
echo "fwd tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_fp16_left.jsonl
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_bwd.log > $OUT/tune_bwd.txt
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd.log > $OUT/tune_fwd.txt
# for runBU.sh on the same machine: it merges these over the committed database before its build
mkdir -p /tmp/tuned && cp $OUT/bwd_bf16_next.jsonl $OUT/fwd_fp16_left.jsonl /tmp/tuned/ 2>/dev/null
