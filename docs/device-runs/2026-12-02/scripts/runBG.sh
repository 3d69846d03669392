#!/usr/bin/env bash
# Device call BG (eleventh session): the build; test_bench.py -k clocks (the probe now in
# attnpack.bench.timing); bench/kernel_ab.py A/A (the default bundle against itself) over four
# rows, by time and by cycles, twice each: how far apart do identical kernels read either way?
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_bench.py -k clocks > $L/test_clocks.txt 2>&1
echo "clocks test rc $? at $SECONDS s"; tail -n 1 $L/test_clocks.txt
A=build-gpu/bundle/attnpack-0.1.0-sm_90.apk
for i in 1 2; do for m in time cycles; do
  X=""; [ $m = cycles ] && X="--cycles"
  timeout 60 python3 bench/kernel_ab.py --archive a=$A --archive b=$A --shapes .carry/aa_shapes.json $X \
    --json $OUT/aa_${m}_$i.json > $L/aa_${m}_$i.txt 2>&1
  echo "aa $m $i rc $? at $SECONDS s"; tail -n 1 $L/aa_${m}_$i.txt
done; done
cat $L/aa_*.txt > $OUT/aa.txt; cp $L/summary.txt $L/test_clocks.txt $OUT/ 2>/dev/null
