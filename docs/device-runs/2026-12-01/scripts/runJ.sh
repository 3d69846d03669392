#!/usr/bin/env bash
# Device call J (third session): the 17 decode keys tuned in streams class 64 (timed at Sq = 1 x 4
# sequences x 8 KV heads = 32 (batch, KV head) pairs; class 128 is the committed 16-sequence
# timing) over the triton forwards, merged into sm_90.jsonl on the machine; then the build with
# it, the GPU files the change touches (contracts, tune, runtime), and `attnpack bench` of both
# shape sets, fwd and fwd+bwd, bf16, without cold starts.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/tune_cmake.log 2>&1
ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so python3 -m attnpack.cli build --arch sm_90 --all --family triton --op fwd --dtype bf16 -o /tmp/t_dec -j 16 > $L/build_dec.log 2>&1
ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so timeout 120 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t_dec/attnpack-*-sm_90.apk \
    -o $OUT/decode64.jsonl --keys .carry/keys_decode64.json > $L/tune_decode64.log 2>&1
grep "^fwd" $L/tune_decode64.log | cut -c1-180
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode64.jsonl -o aot/tuning_db/sm_90.jsonl > $L/merge.log 2>&1; cat $L/merge.log
FILES="tests/gpu/test_torch_contracts.py tests/gpu/test_tune.py tests/gpu/test_runtime_attention.py" \
  OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
grep -h "passed\|failed" $L/test_*.log | tail -4
tar czf $OUT/logsJ.tgz -C /tmp logs
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((585 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsJ.tgz -C /tmp logs
