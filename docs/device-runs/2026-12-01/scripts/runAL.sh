#!/usr/bin/env bash
# Device call AL (eighth session): the build at the final database; tests/gpu/test_torch_sdpa.py
# parity cases at head dims 96 and 256 (the wide backward through F.sdpa; -k "d96 or d256");
# `attnpack bench --ops fwd,fwdbwd --dtype bf16 --no-cold` of both sets.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_torch_sdpa.py" OUT=$L timeout 300 bash build_tools/run_gpu_tests.sh -k "d96 or d256" > $L/summary.txt 2>&1
echo "build+tests rc $? at $SECONDS s"; tail -n 1 $L/test_torch_sdpa.log; grep -h "FAILED" $L/test_torch_sdpa.log | head -5
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
tar czf $OUT/logsAL.tgz -C /tmp logs
timeout $((400 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsAL.tgz -C /tmp logs
