#!/usr/bin/env bash
# Device call AF (seventh session): the build at the final database (run34 merged);
# `attnpack bench` of both sets, fwd and fwd+bwd, bf16 (a second sample of run33's rows, and the
# keys run34 changed); then ncu of two head-dim-64 rows, attnpack's kernel and cuDNN's:
# B2 H32 S8192 full (a three-consumer kernel) and B16 H32 S1024 causal (two consumers).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_bench.py" OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; grep -h "passed\|failed" $L/test_*.log | tail -2
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsAF.tgz -C /tmp logs
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats"
for row in "d64_b2_s8192_full 2,32,32,8192,8192,64" "d64_b16_s1024_causal 16,32,32,1024,1024,64 --causal"; do
  set -- $row; name=$1; shift
  for be in attnpack default; do
    timeout 45 ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape "$@" --backend $be > $L/ncu_${name}_$be.txt 2>&1
    echo "ncu $name $be rc $? at $SECONDS s"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per|Warp Cycles Per Issued|served" $L/ncu_${name}_$be.txt | head -7 | cut -c1-120
  done
done
tar czf $OUT/logsAF.tgz -C /tmp logs
