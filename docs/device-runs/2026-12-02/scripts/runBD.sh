#!/usr/bin/env bash
# Device call BD (eleventh session): (1) the build (no tests) and test_bench.py's new clocks
# test; (2) bench/clocks.py: clock and cycles per call of attnpack and cuDNN in the bench's
# regime and back to back, five rows; (3) the decode keys re-tuned twice with the tuner's
# reps queued (one wait per candidate) and a settling second first: do two runs agree now?
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_bench.py -k clocks > $L/test_clocks.txt 2>&1
echo "clocks test rc $? at $SECONDS s"; tail -n 2 $L/test_clocks.txt
timeout 150 python3 bench/clocks.py --json --only "Llama-3.3-70B prefill B1 S8192" --only "B2 H16 S8192 d128 full" \
  --only "B32 H16 S512 d128 causal" --only "B16 H32 S1024 d64 causal" --only "B4 H16 S4096 d128 full" \
  --ops fwd > $OUT/clocks_fwd.jsonl 2> $L/clocks.err
echo "clocks fwd rc $? at $SECONDS s"
timeout 60 python3 bench/clocks.py --json --only "Llama-3.3-70B prefill B1 S8192" --only "B4 H16 S4096 d128 full" \
  --ops fwdbwd > $OUT/clocks_fwdbwd.jsonl 2>> $L/clocks.err
echo "clocks fwdbwd rc $? at $SECONDS s"; tail -n 3 $L/clocks.err
( time python3 -m attnpack.cli build --arch sm_90 --all --family triton --op fwd -o /tmp/tri -j 16 ) > $L/build_tri.log 2>&1
echo "archive at $SECONDS s"
for r in 1 2; do
  timeout $((570 - SECONDS)) python3 -m attnpack.cli tune --arch sm_90 --archive /tmp/tri/attnpack-0.1.0-sm_90.apk \
    -o $OUT/decode_tuned_$r.jsonl --keys .carry/keys_decode_all.json > $L/tune_$r.log 2>&1
  echo "tune $r rc $? at $SECONDS s"; grep -c '"op": "fwd"' $OUT/decode_tuned_$r.jsonl
done
cp $L/summary.txt $L/test_clocks.txt $L/clocks.err $L/tune_*.log $L/build_tri.log $OUT/ 2>/dev/null
