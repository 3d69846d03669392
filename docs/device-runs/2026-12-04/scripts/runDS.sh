#!/usr/bin/env bash
# Twenty-sixth session: how much of the gap to cuDNN is the selection's? Every bf16 Gluon
# forward and backward kernel of this tree timed alone at every prefill row of both bench sets
# (bench/kernel_ab.py with one archive: each kernel's O or gradients checked against cuDNN's
# first, then its median time; cuDNN timed in the same run), so each row's fastest kernel can be
# set beside the one the database picks (run113's bench, "served by") and beside cuDNN.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/all-apk \
  -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"; tail -n 2 "$L/build.log"
A=/tmp/all-apk/attnpack-0.1.0-sm_90.apk
for op in fwd bwd; do
  stop=585; [ $op = fwd ] && stop=300
  timeout $((stop - SECONDS)) python3 bench/kernel_ab.py --op $op \
    --archive all=$A --reps 10 --shapes bench/shapes.json --shapes bench/model_shapes.json \
    --json "$OUT/oracle_$op.json" > "$OUT/oracle_$op.txt" 2>&1
  echo "$op rc $? at $SECONDS s"; tail -n 1 "$OUT/oracle_$op.txt"
done
