#!/usr/bin/env bash
# Prepared in the thirty-eighth session (docs/gluon-bwd.md, "The accumulator's zeroing moved
# into the dK/dV kernel"): run164 timed bwd_lazy_zero.patch's whole calls at 0.999x the
# committed kernels, though its preprocess writes 134 MB less. Where did the time go? The
# kernels of one backward call (bench/kernel_timeline.py: each kernel's duration and start,
# medians over 20 calls) at three rows, on the committed tree's bundle and then on the patched
# one (the database's own kernel choice both times). On one GPU; say which.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFC.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
P=docs/device-runs/2026-12-05/scripts/bwd_lazy_zero.patch
ROWS=("B16 H16 S1024 d128 full" "B2 H16 S8192 d128 causal" "B16 H32 S1024 d64 full")
for side in old lazy; do
  if [ $side = lazy ]; then patch -p1 < "$P" || exit 1; fi
  . build_tools/bench_env.sh "/tmp/tl-$side"
  for row in "${ROWS[@]}"; do
    timeout 120 python3 bench/kernel_timeline.py --row "$row" --op bwd \
      --json "$OUT/timeline_${side}_${row// /_}.json" > "$OUT/timeline_${side}_${row// /_}.txt" 2>&1
    echo "$side $row rc $? at $SECONDS s"; cat "$OUT/timeline_${side}_${row// /_}.txt"
  done
done
# the device tool returns a few files: the timelines' JSON in one archive
(cd "$OUT" && tar czf timelines.tgz timeline_*.json && rm -f timeline_*.json)
