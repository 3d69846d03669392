#!/usr/bin/env bash
# Thirty-ninth session, after run166 (bwd_lazy_zero3.patch 0.947x by cycles on an H100, its
# causal rows from S4096 0.75-0.89x): runFC.sh's timelines with a third side. The kernels of one
# backward call (bench/kernel_timeline.py: each kernel's duration and start, medians over 20
# calls) at three rows, on the committed tree's bundle, then with bwd_lazy_zero.patch, then with
# bwd_lazy_zero3.patch (the database's own kernel choice each time): did the preprocess get the
# ~45 % shorter its bytes say, and by how much did the dK/dV kernel grow on each patch?
# On one GPU; say which.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFE.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
D=docs/device-runs/2026-12-05/scripts
ROWS=("B16 H16 S1024 d128 full" "B2 H16 S8192 d128 causal" "B16 H32 S1024 d64 full")
prev=""
for side in old lazy lazy3; do
  if [ -n "$prev" ]; then patch -R -p1 < "$prev" > /dev/null || exit 1; fi
  case $side in
    lazy) prev=$D/bwd_lazy_zero.patch ;;
    lazy3) prev=$D/bwd_lazy_zero3.patch ;;
  esac
  if [ $side != old ]; then patch -p1 < "$prev" > /dev/null || exit 1; fi
  . build_tools/bench_env.sh "/tmp/tl-$side"
  for row in "${ROWS[@]}"; do
    f="$OUT/timeline_${side}_${row// /_}"
    timeout 120 python3 bench/kernel_timeline.py --row "$row" --op bwd --json "$f.json" > "$f.txt" 2>&1
    echo "$side $row rc $? at $SECONDS s"; cat "$f.txt"
  done
done
# the device tool returns a few files: the timelines in one archive
(cd "$OUT" && tar czf timelines.tgz timeline_* && rm -f timeline_*)
