#!/usr/bin/env bash
# Device call C at 6cbadb9: tune the decode keys (Sq bucket 16), merge them into sm_90.jsonl here, then
# build everything with that database, run tests/gpu/test_gluon_bwd.py, bench the model shapes'
# forward, and one row of bench/gluon_bwd.py (Timer).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=6cbadb9 PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/tune_cmake.log 2>&1
ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so python3 -m attnpack.cli build --arch sm_90 --all --family triton --family gluon --dtype bf16 --op fwd -o /tmp/tuning -j 16 > $L/build_all.log 2>&1
ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so timeout 120 python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tuning/attnpack-*-sm_90.apk \
    -o $OUT/decode.jsonl --keys .carry/decode_keys.json > $L/tune.log 2>&1
grep -v "UserWarning\|o = F.scaled\|return Variable\|Triggered" $L/tune.log | grep "^fwd" | tail -20
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/decode.jsonl -o aot/tuning_db/sm_90.jsonl > $L/merge.log 2>&1; cat $L/merge.log
FILES=tests/gpu/test_gluon_bwd.py OUT=$L bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1; tail -3 $L/summary.txt
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 200 python3 -m attnpack.cli bench --shapes bench/model_shapes.json --ops fwd --dtype bf16 --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $?"
head -12 $L/bench.txt
timeout 120 python3 bench/gluon_bwd.py --select 0 --no-gqa --json $L/gluon_bwd.json > $L/gluon_bwd.txt 2>&1; echo "gluon_bwd rc $?"; tail -8 $L/gluon_bwd.txt
tar czf $OUT/logsC.tgz -C $OUT logs decode.jsonl
