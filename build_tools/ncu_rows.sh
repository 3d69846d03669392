# Sourced by device-run scripts (docs/device-runs/*/scripts/) after build_tools/bench_env.sh:
# Nsight Compute of the bench rows below a ratio, both sides, and the table of the two
# (bench/ncu_rows.py). Needs L (the log folder) and OUT set; defines
#   ncu_profile OP BACKEND STOP_S BELOW SETS...   the rows of the results (NCU_RESULTS)
#       below BELOW, worst first, under ncu until STOP_S; the default side profiles as many rows
#       as the attnpack side finished; the raw CSV goes to $L/raw_OP_BACKEND.csv
#   ncu_table OP                                   both sides' rows into $OUT/table_OP.md
# NCU_SECTIONS overrides the sections (default: SpeedOfLight, ComputeWorkloadAnalysis,
# WarpStateStats, LaunchStats, Occupancy); NCU_RESULTS the results.json whose rows are chosen
# (default docs/performance/results.json).
NCU_SECTIONS=${NCU_SECTIONS:-"--section SpeedOfLight --section ComputeWorkloadAnalysis \
--section WarpStateStats --section LaunchStats --section Occupancy"}
ncu_profile() {
  local op=$1 be=$2 stop=$3 below=$4; shift 4
  local rows=""; [ "$be" = default ] && rows="--max-rows $(wc -l < $L/rows_${op}_attnpack.jsonl)"
  timeout $((stop + 120)) ncu --profile-from-start off --clock-control none $NCU_SECTIONS \
    -o $L/ncu_${op}_$be -f python3 bench/ncu_rows.py run \
    --results "${NCU_RESULTS:-docs/performance/results.json}" \
    --backend $be --op $op --below $below --sets "$@" --stop-after $stop $rows \
    --manifest $L/rows_${op}_$be.jsonl > $L/ncu_${op}_$be.log 2>&1
  echo "ncu $op $be rc $? at $SECONDS s: $(wc -l < $L/rows_${op}_$be.jsonl) rows"
  ncu --import $L/ncu_${op}_$be.ncu-rep --page raw --csv --print-units base \
    > $L/raw_${op}_$be.csv 2>> $L/ncu_${op}_$be.log
}
ncu_table() {
  python3 bench/ncu_rows.py table --manifest $L/rows_$1_attnpack.jsonl \
    --ours $L/raw_$1_attnpack.csv --theirs $L/raw_$1_default.csv > "$OUT/table_$1.md" 2> $L/table_$1.err
  echo "table $1 rc $?: $(($(wc -l < "$OUT/table_$1.md") - 2)) lines"; tail -n 3 $L/table_$1.err
}
