#!/usr/bin/env bash
# Prepared in the twenty-fourth session for the next one (not run). Nsight Compute of the rows
# that stay below 1x in run107 (docs/performance/results.json, the bench call by call), both
# sides: the forward + backward rows below 1.0 first (the short ones, B32 H16 S512 d128 at
# 0.94-0.95x, lead), then the forward rows below 1.0. The table now lists each side's kernels
# with their times (bench/ncu_rows.py table, "each kernel"), so it shows how a backward's time
# splits between its preprocess (Δ and dQ's fp32 accumulator zeroed), its main kernel and dQ's
# convert, against cuDNN's kernels for the same call. The steps are build_tools/ncu_rows.sh's
# (runCF.sh's, ../../2026-12-02/scripts/, made a helper).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/ncu-logs; mkdir -p $L "$OUT"
. build_tools/bench_env.sh $L
ncu --version > $L/ncu_version.txt 2>&1
. build_tools/ncu_rows.sh
ncu_profile fwdbwd attnpack 100 1.0 shapes model_shapes
ncu_profile fwdbwd default 100 1.0 shapes model_shapes
ncu_table fwdbwd
if [ $SECONDS -lt 380 ]; then
  ncu_profile fwd attnpack 60 1.0 shapes model_shapes
  ncu_profile fwd default 60 1.0 shapes model_shapes
  ncu_table fwd
fi
tar -czf "$OUT/ncu_csv.tar.gz" -C $L $(cd $L && ls raw_* rows_* ncu_*.log ncu_version.txt \
  summary.txt 2>/dev/null)
