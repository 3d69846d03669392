#!/usr/bin/env bash
# Device call AH (eighth session): AG's steps 2-3 again, the tuning archive now with the forward
# too (`attnpack tune --op bwd` takes O and LSE from a forward of the archive). `attnpack tune`
# of the 11 bf16 head-dim-256 backward keys with the wide kernel beside the triton ones; merged;
# runtime/bundle/extension built; `attnpack bench --only Gemma` fwd and fwd+bwd; ncu of the
# Gemma-2 B2 S4096 forward+backward, attnpack and cuDNN.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --head-dim 256 --dtype bf16 -o /tmp/t_bwd -j 16 ) > $L/build_tuning.log 2>&1
tail -n 3 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
timeout 200 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_bwd/$A -o $OUT/bwd_tuned_d256.jsonl \
  --keys .carry/keys_bwd256.json --minutes 3 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_tuned_d256.jsonl; tail -n 2 $L/tune.log
tar czf $OUT/logsAH.tgz -C /tmp logs
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/bwd_tuned_d256.jsonl -o aot/tuning_db/sm_90.jsonl || exit 1
FILES="tests/gpu/test_bench.py" OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; grep -h "passed\|failed" $L/test_bench.log | tail -1
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 100 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --only Gemma --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "Gemma" $L/bench.txt | head -12 | cut -c1-330
cp $L/bench/results.json $OUT/results_gemma.json 2>/dev/null
tar czf $OUT/logsAH.tgz -C /tmp logs
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats"
for be in attnpack default; do
  timeout 60 ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape 2,16,8,4096,4096,256 --causal --op fwdbwd --backend $be > $L/ncu_gemma_b2_s4096_fwdbwd_$be.txt 2>&1
  echo "ncu $be rc $? at $SECONDS s"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per|Warp Cycles Per Issued|served" $L/ncu_gemma_b2_s4096_fwdbwd_$be.txt | head -16 | cut -c1-120
done
tar czf $OUT/logsAH.tgz -C /tmp logs
