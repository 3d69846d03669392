#!/usr/bin/env bash
# Prepared in the twenty-fourth session for the next one (not run). Nsight Compute of the rows
# that stay below 1x in run107 (docs/performance/results.json, the bench call by call), both
# sides: the forward + backward rows below 1.0 first (the short ones, B32 H16 S512 d128 at
# 0.94-0.95x, lead), then the forward rows below 1.0. The table now lists each side's kernels
# with their times (bench/ncu_rows.py table, "each kernel"), so it shows how a backward's time
# splits between its preprocess (Δ and dQ's fp32 accumulator zeroed), its main kernel and dQ's
# convert, against cuDNN's kernels for the same call. The profile() and table() steps are
# runCF.sh's (../../2026-12-02/scripts/).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/ncu-logs; mkdir -p $L "$OUT"
. build_tools/bench_env.sh $L
ncu --version > $L/ncu_version.txt 2>&1
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats"
S="$S --section LaunchStats --section Occupancy"
profile() {  # op backend stop_after_s below sets... ; the default side takes as many rows as ours
  local op=$1 be=$2 stop=$3 below=$4; shift 4
  local rows=""; [ "$be" = default ] && rows="--max-rows $(wc -l < $L/rows_${op}_attnpack.jsonl)"
  timeout $((stop + 120)) ncu --profile-from-start off --clock-control none $S \
    -o $L/ncu_${op}_$be -f python3 bench/ncu_rows.py run --results docs/performance/results.json \
    --backend $be --op $op --below $below --sets "$@" --stop-after $stop $rows \
    --manifest $L/rows_${op}_$be.jsonl > $L/ncu_${op}_$be.log 2>&1
  echo "ncu $op $be rc $? at $SECONDS s: $(wc -l < $L/rows_${op}_$be.jsonl) rows"
  ncu --import $L/ncu_${op}_$be.ncu-rep --page raw --csv --print-units base \
    > $L/raw_${op}_$be.csv 2>> $L/ncu_${op}_$be.log
}
table() {
  python3 bench/ncu_rows.py table --manifest $L/rows_$1_attnpack.jsonl \
    --ours $L/raw_$1_attnpack.csv --theirs $L/raw_$1_default.csv > "$OUT/table_$1.md" 2> $L/table_$1.err
  echo "table $1 rc $?: $(($(wc -l < "$OUT/table_$1.md") - 2)) lines"; tail -n 3 $L/table_$1.err
}
profile fwdbwd attnpack 100 1.0 shapes model_shapes
profile fwdbwd default 100 1.0 shapes model_shapes
table fwdbwd
if [ $SECONDS -lt 380 ]; then
  profile fwd attnpack 60 1.0 shapes model_shapes
  profile fwd default 60 1.0 shapes model_shapes
  table fwd
fi
tar -czf "$OUT/ncu_csv.tar.gz" -C $L $(cd $L && ls raw_* rows_* ncu_*.log ncu_version.txt \
  summary.txt 2>/dev/null)
