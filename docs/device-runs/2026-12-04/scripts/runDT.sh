#!/usr/bin/env bash
# Twenty-sixth session, after run115 (every bf16 Gluon kernel timed alone at each prefill bench
# row, kernel by kernel) disagreed with the bench by up to 11 % on one kernel: the tuner and
# bench/kernel_ab.py now time their candidates taking turns call by call. Here, with this tree's
# bf16 Gluon kernels (the tuning archive of the keys below: Gluon serves every prefill row):
# 1. `attnpack tune` (by turns) of the 38 forward keys behind the prefill rows of both bench
#    sets (keys_rows_fwd.json, no streams class: each is tuned in its own, which is the class
#    that serves its rows), into $OUT/rows_fwd.jsonl, not merged here;
# 2. bench/kernel_ab.py by turns over the same kernels at every prefill row, forward and then
#    backward, cuDNN taking its turns beside them (run115 again, by turns).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/ta \
  -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"; tail -n 1 "$L/build.log"
bash build_tools/tune_keys.sh rows_fwd .carry/keys_rows_fwd.json $((330 - SECONDS)) \
  $((350 - SECONDS))
cp /tmp/tune-logs/tune_rows_fwd.log "$L/" 2>/dev/null
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
for op in fwd bwd; do
  stop=585; [ $op = fwd ] && stop=470
  timeout $((stop - SECONDS)) python3 bench/kernel_ab.py --op $op \
    --archive all=$A --reps 10 --shapes bench/shapes.json --shapes bench/model_shapes.json \
    --json "$OUT/turns_$op.json" > "$OUT/turns_$op.txt" 2>&1
  echo "$op rc $? at $SECONDS s"; tail -n 1 "$OUT/turns_$op.txt"
done
