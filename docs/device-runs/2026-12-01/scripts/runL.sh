#!/usr/bin/env bash
# Device call L (third session): the build at the final tree (the merged database with the
# class-64 decode entries, batch slices), tests/gpu/test_torch_sdpa.py, then ncu of the two
# weakest prefill rows of the model set, attnpack's kernel and cuDNN's: Llama-3.1-8B B64 S256
# and Llama-3.3-70B B32 S512 (causal, GQA 4 and 8, hd128).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_torch_sdpa.py" OUT=$L timeout 300 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
grep -h "passed\|failed" $L/test_*.log | tail -2
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:/tmp/attnpack-site
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
for row in "llama8b_b64_s256 64,32,8,256,256,128 --causal" "llama70b_b32_s512 32,64,8,512,512,128 --causal"; do
  set -- $row; name=$1; shift
  for be in attnpack default; do
    timeout 60 ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape "$@" --backend $be > $L/ncu_${name}_$be.txt 2>&1
    echo "ncu $name $be rc $?"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per|Achieved Occ|Warp Cycles Per Issued|served" $L/ncu_${name}_$be.txt | head -9
  done
done
tar czf $OUT/logsL.tgz -C /tmp logs
