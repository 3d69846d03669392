#!/usr/bin/env bash
# Device call U (fifth session): the Gluon backward at head dim 96 (128-wide tiles).
# tests/gpu/test_gluon_bwd.py over all 96 gluon backward kernels (head dims 64, 96, 128); a
# `--all` bf16 head-dim-96 archive (gluon + triton, both ops) and `attnpack tune` of the 11
# head-dim-96 backward keys of the database, merged here; then the build with that database
# (run_gpu_tests.sh, contracts file) and `attnpack bench` of the model set, fwd+bwd, bf16.
cd "$(dirname "$0")/.."
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
export PYTHONPATH=$PYTHONPATH:$PWD/tests/gpu
echo "git $ATTNPACK_COMMIT; runtime built at $SECONDS s: $(tail -1 $L/cmake.log)"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd -j 16 -o /tmp/gluon-bwd > $L/build_bwd.log 2>&1
python3 -m attnpack.cli build --arch sm_90 --all --head-dim 96 --dtype bf16 -j 16 -o /tmp/t96 > $L/build_t96.log 2>&1
echo "built at $SECONDS s: $(tail -1 $L/build_bwd.log); $(tail -1 $L/build_t96.log)"
export ATTNPACK_GLUON_BWD_ARCHIVE=$(ls /tmp/gluon-bwd/attnpack-*-sm_90.apk)
timeout 200 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -p no:cacheprovider > $L/test_bwd.log 2>&1
echo "test rc $? at $SECONDS s"; tail -2 $L/test_bwd.log; grep -E "^FAILED|^ERROR" $L/test_bwd.log | head -10
python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/t96/attnpack-*-sm_90.apk -o $OUT/bwd96.jsonl \
  --keys .carry/keys_bwd96.json --minutes 1.5 > $L/tune.log 2>&1
echo "tune rc $? at $SECONDS s"; grep -v "UserWarning\|o = F.scaled\|return Variable" $L/tune.log | grep -v "^  " | tail -13
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/bwd96.jsonl -o aot/tuning_db/sm_90.jsonl > $L/merge.log 2>&1
tail -1 $L/merge.log; cp aot/tuning_db/sm_90.jsonl $OUT/sm_90.jsonl
FILES="tests/gpu/test_torch_contracts.py" OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
grep -h "passed\|failed" $L/test_*.log | tail -2; echo "build + contracts done at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((535 - SECONDS)) python3 -m attnpack.cli bench --shapes bench/model_shapes.json --ops fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| model_shapes" $L/bench.txt; grep "Phi-3\|Gemma" $L/bench.txt | cut -c1-200
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsU.tgz -C /tmp logs
