#!/usr/bin/env bash
# Device call AJ (eighth session): fp16 at head dim 256 gets tuning entries (the 29 keys bf16
# has: 18 forward, 11 backward), with every gluon and triton candidate; merged; then
# build_tools/run_gpu_tests.sh over F.sdpa (its parity grid now with head dims 96 and 256), the
# runtime's attention tests and the bench test, on the merged database.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
A=attnpack-0.1.0-sm_90.apk
( time python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --head-dim 256 --dtype fp16 -o /tmp/t16 -j 16 ) > $L/build_tuning.log 2>&1
tail -n 3 $L/build_tuning.log; echo "tuning archive at $SECONDS s"
timeout 200 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t16/$A -o $OUT/fp16_d256.jsonl \
  --keys .carry/keys_fp16_d256.json --minutes 2.5 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -c '"op"' $OUT/fp16_d256.jsonl; tail -n 1 $L/tune.log
tar czf $OUT/logsAJ.tgz -C /tmp logs
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/fp16_d256.jsonl -o aot/tuning_db/sm_90.jsonl
FILES="tests/gpu/test_torch_sdpa.py tests/gpu/test_runtime_attention.py tests/gpu/test_bench.py" OUT=$L timeout $((585 - SECONDS)) bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; for f in $L/test_*.log; do echo "$(basename $f): $(tail -n 1 $f)"; done
grep -h "FAILED\|Error" $L/test_torch_sdpa.log | head -5
tar czf $OUT/logsAJ.tgz -C /tmp logs
