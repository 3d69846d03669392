#!/usr/bin/env bash
# Twenty-seventh session: the persistent causal dK/dV kernels take their key blocks in a snake
# (grid.snake_rank: ranked longest first, every other round reversed) instead of pairs of equal
# cost. On one H200:
# 1. this tree's bf16 Gluon archive (/tmp/ta, tuning) and the bf16 backward of the tree before
#    (.carry/old-aot: HEAD~'s aot/, pairs), each with its own compile cache;
# 2. tests/gpu/test_gluon_bwd.py on the new archive: the bf16 causal gradient grid at
#    4096 x 4096 (B3 Hq32 Hkv8 at some head dims: several rounds of units, odd ones reversed)
#    and the bitwise repeatability (B2 Hkv8 S2048: a second round of 124 reversed units);
# 3. bench/kernel_ab.py, backward, causal kernels: pairs (before) against snake (after), every
#    kernel of a row and cuDNN taking turns, gradients checked against cuDNN's first;
# 4. `attnpack tune` (by turns) of the 27 causal backward keys behind the bench rows into
#    $OUT/rows_bwd_causal.jsonl (resumable from .carry/tuned/), not merged here.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/ta \
  --cache-dir /tmp/cache-new -j 10 > "$L/build.log" 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
  --kernels .carry/old-aot/kernels --cache-dir /tmp/cache-old -o /tmp/old -j 6 \
  > "$L/build_old.log" 2>&1
wait
echo "archives at $SECONDS s"; tail -n 1 "$L/build.log" "$L/build_old.log"
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
ATTNPACK_GLUON_BWD_ARCHIVE=$A timeout 150 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE \
  -p no:cacheprovider -k "(bf16 and causal and 4096x4096) or repeatable" > "$L/test_bwd.log" 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s"; tail -n 1 "$L/test_bwd.log"
grep -E "^FAILED|^ERROR" "$L/test_bwd.log" | cut -c1-300 | head -10
timeout $((360 - SECONDS)) python3 bench/kernel_ab.py --op bwd --kernel-filter causal \
  --archive pairs=/tmp/old/attnpack-0.1.0-sm_90.apk --archive snake=$A --reps 10 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_bwd.json" \
  > "$OUT/ab_bwd.txt" 2>&1
echo "kernel_ab rc $? at $SECONDS s"; tail -n 2 "$OUT/ab_bwd.txt"
bash build_tools/tune_keys.sh rows_bwd_causal .carry/keys_rows_bwd_causal.json \
  $((560 - SECONDS)) $((585 - SECONDS))
cp /tmp/tune-logs/tune_rows_bwd_causal.log "$L/" 2>/dev/null
