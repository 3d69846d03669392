#!/usr/bin/env bash
# Twenty-sixth session: Nsight Compute of the rows below 1.0x in run118 (docs/performance/
# results.json), both sides, on today's kernels and database: the forward rows first (the
# model set's decode rows and the public head-dim-128 rows without a mask: issue 16 asks for an
# ncu-backed reason for each model row that stays below 1.0x), then the forward + backward rows
# while time is left. build_tools/ncu_rows.sh's steps, as runDO.sh (prepared, not run) has them
# in the other order.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/ncu-logs; mkdir -p $L "$OUT"
. build_tools/bench_env.sh $L
ncu --version > $L/ncu_version.txt 2>&1
. build_tools/ncu_rows.sh
ncu_profile fwd attnpack 90 1.0 shapes model_shapes
ncu_profile fwd default 90 1.0 shapes model_shapes
ncu_table fwd
if [ $SECONDS -lt 360 ]; then
  ncu_profile fwdbwd attnpack 40 1.0 shapes model_shapes
  ncu_profile fwdbwd default 40 1.0 shapes model_shapes
  ncu_table fwdbwd
fi
tar -czf "$OUT/ncu_csv.tar.gz" -C $L $(cd $L && ls raw_* rows_* ncu_*.log ncu_version.txt \
  summary.txt 2>/dev/null)
