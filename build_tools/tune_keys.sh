#!/usr/bin/env bash
# On a GPU machine: `attnpack tune` of the keys in KEYS_FILE into $OUT/NAME.jsonl, with this
# tree's full tuning archive (triton + gluon, built into /tmp/ta-DIGEST by the first call on the
# machine with these kernel sources, reused by later ones: DIGEST is over aot/kernels and
# python/attnpack, so a patch applied since builds its own, from the compile cache), resuming
# from .carry/tuned/NAME.jsonl where an earlier call returned that file (the tuner skips keys
# already in its output). No key starts after STOP_S seconds and
# the tuner is stopped at KILL_S (seconds from this script's start: a caller that spent some of
# its call passes less). The log, warnings left out, goes to $OUT/tune_NAME.txt.
#   usage: build_tools/tune_keys.sh NAME KEYS_FILE STOP_S [KILL_S]    env: OUT, ATTNPACK_ARCH
cd "$(dirname "$0")/.."
NAME=$1 KEYS=$2 STOP_S=$3 KILL_S=${4:-$3}
ARCH=${ATTNPACK_ARCH:-sm_90}
L=/tmp/tune-logs; mkdir -p "$OUT" $L
export PYTHONUNBUFFERED=1
. build_tools/runtime_env.sh $L
DIGEST=$(find aot/kernels python/attnpack -name '*.py' -print0 | sort -z | xargs -0 sha256sum \
  | sha256sum | cut -c1-12)
A=/tmp/ta-$DIGEST/attnpack-0.1.0-$ARCH.apk
if [ ! -f $A ]; then
  python3 -m attnpack.cli build --arch $ARCH --all --family triton --family gluon -o /tmp/ta-$DIGEST \
    -j "$(nproc)" > $L/build_tuning.log 2>&1
  echo "archive rc $? at $SECONDS s"; tail -n 1 $L/build_tuning.log
fi
if [ -f ".carry/tuned/$NAME.jsonl" ] && [ ! -f "$OUT/$NAME.jsonl" ]; then
  cp ".carry/tuned/$NAME.jsonl" "$OUT/$NAME.jsonl"
fi
timeout $((KILL_S - SECONDS)) python3 -m attnpack.cli tune --arch $ARCH --archive $A \
  -o "$OUT/$NAME.jsonl" --keys "$KEYS" \
  --minutes "$(python3 -c "print(max(0.1, round(($STOP_S - $SECONDS) / 60, 2)))")" > $L/tune_$NAME.log 2>&1
echo "$NAME tune rc $? at $SECONDS s: $(grep -c '"op"' "$OUT/$NAME.jsonl") entries"
grep -v "Warning\|fn = lambda\|^  *F\.\|^  *o = " $L/tune_$NAME.log | tail -n 60 > "$OUT/tune_$NAME.txt"
