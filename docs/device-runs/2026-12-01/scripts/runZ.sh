#!/usr/bin/env bash
# Device call Z (sixth session): consumer 0 of the Gluon forward skips its fully masked last key
# tile under causal (N64 configs). A/B against a852123's kernel (same names, N64 causal kernels),
# then tests/gpu/test_gluon_attn.py (causal cases, smoke, persistent units) beside the F.sdpa GPU
# file, then `attnpack bench` of both sets, fwd and fwd+bwd, bf16.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs
. build_tools/runtime_env.sh $L
F="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -j 8"
rm -rf /tmp/ab_pair && mkdir /tmp/ab_pair && cp -r aot python /tmp/ab_pair/
cp .carry/ab/fwd_pair.py /tmp/ab_pair/aot/kernels/gluon_attn/fwd.py
( cd /tmp/ab_pair && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_pair/python python3 -m attnpack.cli $F -o /tmp/f_pair ) > $L/build_f_pair.log 2>&1 &
python3 -m attnpack.cli $F -o /tmp/f_skip > $L/build_f_skip.log 2>&1
wait; tail -qn1 $L/build_f_*.log; echo "ab builds done at $SECONDS s"
A=attnpack-0.1.0-sm_90.apk
timeout 100 python3 bench/kernel_ab.py --archive pair=/tmp/f_pair/$A --archive skip=/tmp/f_skip/$A \
  --kernel-filter causal/M64_N64 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $L/ab_fwd.json > $L/ab_fwd.txt 2>&1
echo "ab fwd rc $? at $SECONDS s"; cut -c1-150 $L/ab_fwd.txt | tail -n 32
tar czf $OUT/logsZ.tgz -C /tmp logs
( while [ ! -s $L/build.log ]; do sleep 1; done  # run_gpu_tests has installed its wheels
  timeout 260 python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE -k "True or smoke or persistent_units" \
    -p no:cacheprovider > $L/test_gluon_attn.log 2>&1; echo "gluon test rc $? at $SECONDS s" >> $L/test_gluon_attn.log ) &
FILES="tests/gpu/test_torch_sdpa.py" OUT=$L timeout 260 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
wait
grep -h "passed\|failed\|rc " $L/test_*.log | tail -4; echo "tests done at $SECONDS s"
tar czf $OUT/logsZ.tgz -C /tmp logs
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((455 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null
tar czf $OUT/logsZ.tgz -C /tmp logs
