#!/usr/bin/env bash
# Device call AG (eighth session): the wide Gluon backward at head dim 256 (bwd_wide.py).
# (1) tests/gpu/test_gluon_bwd.py: smoke over every backward kernel (the 4 wide ones are new),
#     then the head-dim-256 grid and extreme-value cases; (2) `attnpack tune` of the 11 bf16
#     head-dim-256 backward keys (Gemma-2's GQA 2, causal) with the wide kernel beside the
#     triton ones; (3) that merged into the database, runtime/bundle/extension built
#     (run_gpu_tests.sh with test_bench), `attnpack bench --only Gemma`, fwd and fwd+bwd.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --op bwd --head-dim 256 --dtype bf16 -o /tmp/t_bwd -j 8 ) > $L/build_tuning.log 2>&1 &
export ATTNPACK_GLUON_BWD_ARCHIVE=$PWD/.carry/bwd_all/$A
timeout 220 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -x -k "smoke or in_the_archive" -p no:cacheprovider > $L/test_smoke.log 2>&1
rc=$?; echo "smoke rc $rc at $SECONDS s"; tail -n 3 $L/test_smoke.log
wait; tail -n 4 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
if [ $rc != 0 ]; then tar czf $OUT/logsAG.tgz -C /tmp logs; exit 1; fi
timeout 150 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -k "d256" -p no:cacheprovider > $L/test_d256.log 2>&1
rc=$?; echo "d256 tests rc $rc at $SECONDS s"; tail -n 3 $L/test_d256.log
tar czf $OUT/logsAG.tgz -C /tmp logs
timeout 150 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_bwd/$A -o $OUT/bwd_tuned_d256.jsonl \
  --keys .carry/keys_bwd256.json --minutes 2 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op": "bwd"' $OUT/bwd_tuned_d256.jsonl; tail -n 2 $L/tune.log
tar czf $OUT/logsAG.tgz -C /tmp logs
if [ $rc != 0 ]; then exit 1; fi
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/bwd_tuned_d256.jsonl -o aot/tuning_db/sm_90.jsonl
FILES="tests/gpu/test_bench.py" OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; grep -h "passed\|failed" $L/test_bench.log | tail -1
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((590 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --only Gemma --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "Gemma" $L/bench.txt | head -12 | cut -c1-250
cp $L/bench/results.json $OUT/results_gemma.json 2>/dev/null
tar czf $OUT/logsAG.tgz -C /tmp logs
