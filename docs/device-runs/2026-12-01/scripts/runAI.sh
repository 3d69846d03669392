#!/usr/bin/env bash
# Device call AI (eighth session): the deterministic wide backward at head dim 256 (a dK/dV
# kernel without dQ and a dQ kernel, both splitting the head dim across the consumers).
# (1) tests/gpu/test_gluon_bwd.py: smoke over every backward kernel, then the head-dim-256 grid
#     and extreme cases, and the bitwise-repeatability test (every det1 kernel, 4 runs);
# (2) `attnpack tune` of the 11 bf16 head-dim-256 backward keys (both wide configs, triton);
# (3) merged (only if (1) passed), runtime/bundle/extension built, `attnpack bench` of both sets,
#     fwd and fwd+bwd, bf16; ncu of the Gemma-2 B2 S4096 forward+backward through attnpack.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --head-dim 256 --dtype bf16 -o /tmp/t_bwd -j 8 ) > $L/build_tuning.log 2>&1 &
export ATTNPACK_GLUON_BWD_ARCHIVE=$PWD/.carry/bwd_all/$A
timeout 220 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -x -k "smoke or in_the_archive" -p no:cacheprovider > $L/test_smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 2 $L/test_smoke.log
wait; tail -n 3 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
if [ $rc != 0 ]; then tar czf $OUT/logsAI.tgz -C /tmp logs; exit 1; fi
timeout 150 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -k "d256 or repeatable" -p no:cacheprovider > $L/test_d256.log 2>&1
trc=$?; echo "d256 tests rc $trc at $SECONDS s"; tail -n 3 $L/test_d256.log
tar czf $OUT/logsAI.tgz -C /tmp logs
timeout 150 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_bwd/$A -o $OUT/bwd_tuned_d256.jsonl \
  --keys .carry/keys_bwd256.json --minutes 2 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_tuned_d256.jsonl; tail -n 1 $L/tune.log
tar czf $OUT/logsAI.tgz -C /tmp logs
if [ $trc == 0 ]; then
  python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/bwd_tuned_d256.jsonl -o aot/tuning_db/sm_90.jsonl
fi
FILES="tests/gpu/test_bench.py" OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; grep -h "passed\|failed" $L/test_bench.log | tail -1
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((575 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
grep "Gemma" $L/bench.txt | head -8 | cut -c1-300
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsAI.tgz -C /tmp logs
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats"
timeout $((590 - SECONDS)) ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape 2,16,8,4096,4096,256 --causal --op fwdbwd --backend attnpack > $L/ncu_gemma_b2_s4096_fwdbwd_attnpack.txt 2>&1
echo "ncu rc $? at $SECONDS s"; grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|L2 Cache Throughput" $L/ncu_gemma_b2_s4096_fwdbwd_attnpack.txt | cut -c1-100 | tail -12
tar czf $OUT/logsAI.tgz -C /tmp logs
