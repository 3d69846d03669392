#!/usr/bin/env bash
# Device call BB (eleventh session), the committed tree: the build (no tests); power.py (SM clock
# and power while each backend runs a row back to back: do our kernels clock lower than
# cuDNN's?); then runAZ's ncu: per-instruction stall sampling of the B32 H16 S512 d128 causal
# forward and the summary sections for attnpack and cuDNN.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
nvidia-smi -q -d POWER,CLOCK > $L/smi_q.txt 2>&1
FILES=" " OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 170 python3 .carry/power.py > $OUT/power.jsonl 2> $L/power.err
echo "power rc $? at $SECONDS s"; cat $OUT/power.jsonl | cut -c1-400; tail -n 5 $L/power.err
SHAPE="--shape 32,16,16,512,512,128 --causal"
timeout $((480 - SECONDS)) ncu --profile-from-start off --clock-control none --section SourceCounters \
  --section WarpStateStats --page source --print-source sass --csv \
  python3 bench/profile_sdpa.py $SHAPE --backend attnpack > $L/ncu_src_attnpack.csv 2> $L/ncu_src.err
echo "ncu source rc $? at $SECONDS s: $(wc -c < $L/ncu_src_attnpack.csv) bytes"; tail -n 3 $L/ncu_src.err
S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy"
for be in attnpack default; do
  timeout $((570 - SECONDS)) ncu --profile-from-start off --clock-control none $S \
    python3 bench/profile_sdpa.py $SHAPE --backend $be > $L/ncu_b32_s512_d128_causal_$be.txt 2>&1
  echo "ncu $be rc $? at $SECONDS s"
done
gzip -k $L/ncu_src_attnpack.csv 2>/dev/null
cp $L/ncu_src_attnpack.csv.gz $L/ncu_src.err $L/ncu_b32_*.txt $L/summary.txt $L/power.err $L/smi_q.txt $OUT/ 2>/dev/null
