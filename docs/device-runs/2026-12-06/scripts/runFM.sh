#!/usr/bin/env bash
# Prepared in the forty-third session, for an H200: every det0 tma1 backward kernel of the bf16
# head-dim-128 keys timed at the public rows' own shapes (rows_d128_long.json: bench/shapes.json's
# head-dim-128 rows at S2048 and longer, 16 to 128 (batch, KV head) pairs), by turns in ms as the
# bench and the tuner time (bench/kernel_ab.py without --cycles), with cuDNN's backward beside
# them. run176's A/B by cycles put the served kernel 1.8-4.5 % behind another one at five of these
# rows, while the tuner, in ms at the same work (B8 x 8 KV heads for B4 x 16 heads), read a tie:
# this says which reading the bench's milliseconds follow. Kernel times only; nothing is merged.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFM.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == *H200* ]] || { echo "not an H200: nothing done"; exit 0; }
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 --head-dim 128 \
  -o /tmp/fm-apk -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"
timeout $((${DEADLINE_S:-330} - SECONDS)) python3 bench/kernel_ab.py --op bwd --reps 20 \
  --archive all=/tmp/fm-apk/attnpack-0.1.0-sm_90.apk "--kernel-filter=bf16-d128-.*det0_tma1" \
  --shapes .carry/rows_d128_long.json --json "$OUT/ab_rows_ms.json" > "$OUT/ab_rows_ms.txt" 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 12 "$OUT/ab_rows_ms.txt"
