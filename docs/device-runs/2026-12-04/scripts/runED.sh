#!/usr/bin/env bash
# Prepared in the thirtieth session, not run (its device time was spent). run132 found rows whose
# forward + backward moved 1.5-5 % with programmatic launches, both ways (docs/performance.md,
# "Programmatic launch"). bench/kernel_timeline.py --compare-pdl prints each kernel of one call
# (start, time, gap after the kernel before) with ATTNPACK_PDL=1 and =0, so it shows whether the
# dK/dV kernel itself runs faster or slower, or only starts earlier. On one H200: this tree's
# runtime, extension and bundle, then the timelines of the rows that moved most and of a short one;
# last, bench/torch_overhead.py with programmatic launches on and off: issue 15's host time of one
# F.sdpa forward + backward (<= +5 us over flash) was last measured (run33) before the Gluon steps
# went through cuLaunchKernelEx.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runED.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-logs/runED}; mkdir -p "$OUT"
. build_tools/bench_env.sh /tmp/runED-build
for row in "Llama-3.3-70B prefill B1 S8192" "Qwen2-7B prefill B2 S8192" \
           "B1 H16 S16384 d128 causal" "Llama-3.1-8B prefill B2 S8192" "B32 H16 S512 d128 causal"; do
  timeout $((580 - SECONDS)) python3 bench/kernel_timeline.py --row "$row" --op fwdbwd \
    --compare-pdl --json "$OUT/timeline_${row// /_}.json" > "$OUT/timeline_${row// /_}.txt" 2>&1
  echo "$row rc $? at $SECONDS s"; cat "$OUT/timeline_${row// /_}.txt" | tail -n 14
done
for pdl in 1 0; do
  ATTNPACK_PDL=$pdl timeout $((590 - SECONDS)) python3 bench/torch_overhead.py \
    > "$OUT/torch_overhead_pdl$pdl.txt" 2>&1
  echo "torch_overhead ATTNPACK_PDL=$pdl rc $? at $SECONDS s"; cat "$OUT/torch_overhead_pdl$pdl.txt"
done
