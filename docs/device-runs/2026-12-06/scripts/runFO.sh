#!/usr/bin/env bash
# Prepared in the forty-third session, for an H200: runFM.sh (each det0 tma1 head-dim-128 backward
# kernel timed in ms by turns at the public rows' own shapes), then the same kernels and rows by
# cycles (bench/kernel_ab.py --cycles) on the same archive, so the two readings come from one
# machine a minute apart. On an H100 (runs 182-183) the two agreed within 0.7 % at every row, and
# at B8 H16 S2048 and B4 H16 S4096 without a mask `det0_tma1_dqq1_early1` led the served kernel
# by 2.7 % and 2.3 %; run176 read 1.8 % at both on an H200 by cycles.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFO.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
DEADLINE_S=200 bash .carry/runFM.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
[[ "$gpu" == *H200* ]] || exit 0
. build_tools/runtime_env.sh "$OUT/logs"
timeout $((380 - SECONDS)) python3 bench/kernel_ab.py --op bwd --reps 20 --cycles \
  --archive all=/tmp/fm-apk/attnpack-0.1.0-sm_90.apk "--kernel-filter=bf16-d128-.*det0_tma1" \
  --shapes .carry/rows_d128_long.json --json "$OUT/ab_rows_cycles.json" > "$OUT/ab_rows_cycles.txt" 2>&1
echo "ab cycles rc $? at $SECONDS s"
