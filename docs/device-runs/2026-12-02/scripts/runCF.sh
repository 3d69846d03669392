#!/usr/bin/env bash
# Prepared in the fifteenth session for the next one (not run): Nsight Compute of the bench rows
# below 1x, attnpack and PyTorch's default side by side (issue 16 asks an ncu-backed reason for
# every model row that stays below 1x; docs/performance.md's profiles predate most kernels).
# bench/ncu_rows.py runs the rows of docs/performance/results.json (run76) worst first, one
# profiler range a row opened by a marker kernel; the default side profiles the rows the
# attnpack side finished. Forward: the 43 rows of both sets below 1.0 (`bench/ncu_rows.py run
# --list` prints them), as many as 110 s under ncu take; then, if time is left, the 11 forward +
# backward rows below 0.97. Returns the tables (bench/ncu_rows.py table) and the raw and details
# CSVs.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/ncu-logs; mkdir -p $L "$OUT"
FILES=" " OUT=$L timeout 220 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle \
  ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so \
  ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
ncu --version > $L/ncu_version.txt 2>&1
ncu --query-metrics --chip gh100 > $L/metrics.txt 2>&1
# metrics beyond the sections', each only where this ncu knows its base name
EXTRA=""
for m in sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
    l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum; do
  grep -qw "${m%%.*}" $L/metrics.txt && EXTRA="$EXTRA${EXTRA:+,}$m"
done
echo "extra metrics: ${EXTRA:-none}"
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats"
S="$S --section LaunchStats --section Occupancy ${EXTRA:+--metrics $EXTRA}"
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
  ncu --import $L/ncu_${op}_$be.ncu-rep --page details --csv > $L/details_${op}_$be.csv \
    2>> $L/ncu_${op}_$be.log
}
table() {
  python3 bench/ncu_rows.py table --manifest $L/rows_$1_attnpack.jsonl \
    --ours $L/raw_$1_attnpack.csv --theirs $L/raw_$1_default.csv > "$OUT/table_$1.md" 2> $L/table_$1.err
  echo "table $1 rc $?: $(($(wc -l < "$OUT/table_$1.md") - 2)) lines"; tail -n 3 $L/table_$1.err
}
profile fwd attnpack 110 1.0 model_shapes shapes
profile fwd default 110 1.0 model_shapes shapes
table fwd
if [ $SECONDS -lt 300 ]; then
  profile fwdbwd attnpack 60 0.97 model_shapes shapes
  profile fwdbwd default 60 0.97 model_shapes shapes
  table fwdbwd
fi
# then, with what time is left: every triton decode kernel at each decode row's own batch against
# the database's pick and cuDNN (bench/decode_rows.py: does the winner follow the streams count
# beyond the two classes?), from the tuning archive an earlier call on this machine built
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
if [ ! -f $A ] && [ $SECONDS -lt 420 ]; then
  python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon --op fwd \
    -o /tmp/ta -j "$(nproc)" > $L/build_ta.log 2>&1; echo "tuning archive rc $? at $SECONDS s"
fi
if [ -f $A ] && [ $SECONDS -lt 500 ]; then
  timeout $((585 - SECONDS)) python3 bench/decode_rows.py --archive $A --kernel-filter decode1 \
    --json $L/decode_rows.json > "$OUT/decode_rows.txt" 2>&1
  echo "decode_rows rc $? at $SECONDS s"; tail -n 3 "$OUT/decode_rows.txt"
fi
tar -czf "$OUT/ncu_csv.tar.gz" -C $L $(cd $L && ls raw_* details_* rows_* ncu_*.log ncu_version.txt \
  summary.txt decode_rows.json 2>/dev/null)
gzip -c $L/metrics.txt > "$OUT/metrics.txt.gz"
