#!/usr/bin/env bash
# Device call Y (sixth session): the final tree (causal-only unit pairing, run28's forward tune
# merged): tests/gpu/test_gluon_attn.py's smoke and persistent-unit tests in the background beside
# the F.sdpa and runtime GPU files, then `attnpack bench` of both sets, fwd and fwd+bwd, bf16.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
# the runtime for the gluon test, built beside run_gpu_tests once its wheel install is done
( while [ ! -d /tmp/attnpack-site/zstandard -o ! -d /tmp/attnpack-site/msgpack_cxx ]; do sleep 1; done; sleep 3
  export PYTHONPATH=/tmp/attnpack-site:$PWD/python
  MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
  { cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
      -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/cmake_tune.log 2>&1
  export ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so
  timeout 300 python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE \
    -k "smoke or persistent_units" -p no:cacheprovider > $L/test_gluon_attn.log 2>&1; echo "gluon test rc $? at $SECONDS s" >> $L/test_gluon_attn.log ) &
FILES="tests/gpu/test_torch_sdpa.py tests/gpu/test_runtime_attention.py" \
  OUT=$L timeout 300 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
wait
grep -h "passed\|failed\|rc " $L/test_*.log | tail -4; echo "tests done at $SECONDS s"
tar czf $OUT/logsY.tgz -C /tmp logs
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((588 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsY.tgz -C /tmp logs
