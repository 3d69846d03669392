#!/usr/bin/env bash
# Device call BC (eleventh session): the triton decode configs with 128/256-key split chunks.
# A triton forward tuning archive (every config, fp16 and bf16) built here; the decode GPU test
# over every decode kernel in it (new ones included); then `attnpack tune` of the 34 decode
# key entries (17 bf16 ones the database has, the same 17 in fp16), each in both streams
# classes: 68 keys, every candidate timed.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader > $L/gpu.txt
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --op fwd -o /tmp/tri -j 16 ) > $L/build_tri.log 2>&1
echo "archive at $SECONDS s"; tail -n 3 $L/build_tri.log
A=/tmp/tri/attnpack-0.1.0-sm_90.apk
ATTNPACK_DECODE_ARCHIVE=$A timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_triton_decode.py > $L/test_decode.txt 2>&1
echo "test rc $? at $SECONDS s"; tail -n 3 $L/test_decode.txt
timeout $((585 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive $A -o $OUT/decode_tuned.jsonl \
  --keys .carry/keys_decode_all.json --minutes $(python3 -c "print(round((560 - $SECONDS) / 60, 2))") > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/decode_tuned.jsonl; tail -n 2 $L/tune.log
cp $L/* $OUT/ 2>/dev/null
