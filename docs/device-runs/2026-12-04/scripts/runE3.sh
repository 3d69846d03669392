#!/usr/bin/env bash
# Twenty-eighth session, after run124-125 (the deterministic backward's Δ in its dQ kernel):
# the backward keys with Sq <= 2048 whose entry is not a det1 kernel and that run124 did not
# re-tune (`keys_bwd_short.json`: 116 keys, fp16 and bf16, head dims 64/96/128, each in its
# streams class), where a det1 kernel that lost before may win now. On one H200: a tuning
# archive of every triton and Gluon kernel (both dtypes; the tuner runs forwards for the
# backward keys, and the old winners are among the
# candidates, which the 1 % merge needs), then `attnpack tune` by turns into
# $OUT/bwd_short.jsonl (merged on the CPU).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon \
  -o /tmp/ta -j 16 > "$L/build.log" 2>&1
echo "archive rc $? at $SECONDS s"; tail -n 1 "$L/build.log"
bash build_tools/tune_keys.sh bwd_short .carry/keys_bwd_short.json \
  $((540 - SECONDS)) $((575 - SECONDS))
cp /tmp/tune-logs/tune_bwd_short.log "$L/" 2>/dev/null
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
