#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run): re-tune on this tree's kernels
# what the fourteenth session's two kernel changes leave stale: the 214 bf16 prefill forward
# keys (the softmax's one FFMA a score, docs/gluon-family.md item 12: run70 has, e.g., the d64
# causal rows' overlapped persistent N128 kernel 5 % slower and its three-consumer siblings
# 4-5 % faster), then the 92 bf16 causal backward keys run72 did not re-tune on the head groups
# (docs/gluon-bwd.md: at GQA 8 Sq = Sk 8192 the 2-stage det0_tma1 kernel is now 5.7 % faster
# than the 3-stage one the database picks). Resumable: a second call with the returned files
# in .carry/tuned/ goes on where this one stopped (the tuner skips keys already in its -o file).
cd "$(dirname "$0")/.."
# after runCC.sh and runCD.sh on the same machine: with the patches they kept
bash build_tools/apply_kept.sh grid3=docs/device-runs/2026-12-02/scripts/bwd_grid3.patch \
  fgroup=docs/device-runs/2026-12-02/scripts/fwd_group.patch | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon -o /tmp/ta -j 16 ) > $L/build_tuning.log 2>&1
echo "archive rc $? at $SECONDS s"; tail -n 3 $L/build_tuning.log
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
for f in fwd_bf16 bwd_bf16_causal; do
  [ -f .carry/tuned/$f.jsonl ] && cp .carry/tuned/$f.jsonl $OUT/$f.jsonl
done
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/fwd_bf16.jsonl \
  --keys .carry/keys_fwd_bf16.json --minutes $(python3 -c "print(round((300 - $SECONDS) / 60, 2))") > $L/tune_fwd.log 2>&1
echo "fwd tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/fwd_bf16.jsonl
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/bwd_bf16_causal.jsonl \
  --keys .carry/keys_bwd_bf16_causal.json --minutes $(python3 -c "print(max(0.1, round((565 - $SECONDS) / 60, 2)))") > $L/tune_bwd.log 2>&1
echo "bwd tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_bf16_causal.jsonl
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_fwd.log | tail -n 60 > $OUT/tune_fwd.txt
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_bwd.log | tail -n 60 > $OUT/tune_bwd.txt
