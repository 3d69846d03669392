#!/usr/bin/env bash
# Device call K, on the machine call J left warm (its build-gpu/ kept): ncu of two model rows
# below 1x, attnpack's kernels and cuDNN's: Gemma-2-9B prefill B2 S4096 (hd256, GQA 2, causal)
# and Llama-3.3-70B decode B8 Sk32768.
cd "$(dirname "$0")/.."
L=/tmp/ncu; mkdir -p $L
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:/tmp/attnpack-site
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
for row in "gemma 2,16,8,4096,4096,256 --causal" "decode70b 8,64,8,1,32768,128"; do
  set -- $row; name=$1; shift
  for be in attnpack default; do
    timeout 60 ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape "$@" --backend $be > $L/ncu_${name}_$be.txt 2>&1
    echo "ncu $name $be rc $?"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|served" $L/ncu_${name}_$be.txt | head -8
  done
done
tar czf $OUT/ncuK.tgz -C /tmp ncu
