#!/usr/bin/env bash
# Device call E at 49301fa: a tuning archive of the forwards (the triton family with its decode and split-KV decode kernels),
# tune the decode keys (Sq bucket 16, timed at Sq=1 x 16 sequences), merge them into sm_90.jsonl
# here, then build everything with it: tests/gpu/test_triton_decode.py (every decode kernel
# forced) and test_runtime_attention.py, and bench the model shapes' forward.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=49301fa PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/tune_cmake.log 2>&1
export ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --op fwd -o /tmp/tuning -j 16 ) > $L/build_all.log 2>&1; tail -2 $L/build_all.log
timeout 100 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tuning/attnpack-*-sm_90.apk \
    -o $OUT/decode.jsonl --keys .carry/decode_keys.json > $L/tune.log 2>&1
grep "^fwd" $L/tune.log | cut -c1-200
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode.jsonl -o aot/tuning_db/sm_90.jsonl > $L/merge.log 2>&1; cat $L/merge.log
tar czf $OUT/logsE.tgz -C $OUT logs decode.jsonl
unset ATTNPACK_RUNTIME_LIB
ATTNPACK_DECODE_ARCHIVE=$(ls /tmp/tuning/attnpack-*-sm_90.apk) FILES="tests/gpu/test_triton_decode.py tests/gpu/test_runtime_attention.py" OUT=$L \
  timeout 330 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1; tail -3 $L/summary.txt
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 120 python3 -m attnpack.cli bench --shapes bench/model_shapes.json --ops fwd --dtype bf16 --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $?"
grep -i "decode\|model_shapes | fwd" $L/bench.txt | cut -d'|' -f2,8,10 | head -14
tar czf $OUT/logsE.tgz -C $OUT logs decode.jsonl
