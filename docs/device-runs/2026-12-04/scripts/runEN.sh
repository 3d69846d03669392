#!/usr/bin/env bash
# Prepared in the thirty-fourth session (the ncu table's new columns CPU-tested on a real CSV).
# Tests docs/gluon-bwd.md's reading of the H100's GQA-7/8 causal rows ("The H100, and the causal
# walk from the last rows"): that the dK/dV kernel's fp32 dQ adds leave L2. Nsight Compute with
# the MemoryWorkloadAnalysis section (L2 hit rate, DRAM bytes) over the four model rows run142
# read below 1.0x forward + backward on the H100 (its results.json chooses them, on any GPU),
# both sides (attnpack, then cuDNN), on the committed kernels; the table of the two to
# $OUT/table_fwdbwd.md, the raw CSVs in $OUT/ncu_csv.tar.gz. Say which GPU ran it.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEN.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/ncu-mem-logs; mkdir -p $L "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
. build_tools/bench_env.sh $L
export NCU_RESULTS=docs/device-runs/2026-12-05/run142_rows_class_tune_bench/results.json
export NCU_SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis \
--section WarpStateStats --section LaunchStats"
. build_tools/ncu_rows.sh
ncu_profile fwdbwd attnpack 200 1.0 model_shapes
ncu_profile fwdbwd default 200 1.0 model_shapes
ncu_table fwdbwd
tar -czf "$OUT/ncu_csv.tar.gz" -C $L $(cd $L && ls raw_* rows_* ncu_*.log 2>/dev/null)
cat "$OUT/table_fwdbwd.md" | cut -c1-400
