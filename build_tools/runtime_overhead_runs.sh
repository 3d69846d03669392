#!/usr/bin/env bash
# bench/runtime_overhead on every kernel family the archive in $ATTNPACK_BUNDLE_DIR serves for
# the bench's problem (B1 H8 S128 d128 bf16 causal), forward and backward: per op, three
# processes with the default selection, then three with one kernel of each family forced
# (each family's first by name). One JSON line per process, errors included, in
# LOGDIR/runtime_overhead.json. Called by run_gpu_tests.sh (BENCH=1) and gpu_bench_run.sh, whose
# environment it needs (ATTNPACK_BUNDLE_DIR, PYTHONPATH with attnpack, and PY).
#   usage: build_tools/runtime_overhead_runs.sh LOGDIR       exit 1 if any run failed
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
LOG=$1/runtime_overhead.json
BENCH=build-gpu/runtime/runtime_overhead
archives=("$ATTNPACK_BUNDLE_DIR"/attnpack-*.apk)
if [ ${#archives[@]} != 1 ] || [ ! -f "${archives[0]}" ]; then
  echo "runtime_overhead_runs: want one archive in $ATTNPACK_BUNDLE_DIR, found: ${archives[*]}" | tee "$LOG"
  exit 1
fi
ARCHIVE=${archives[0]}
: > "$LOG"
status=0
for op in fwd bwd; do
  # One kernel per family for this op and problem, from the archive's own kernel list.
  forced=$($PY -m attnpack.cli inspect "$ARCHIVE" --json | $PY -c '
import json, sys
first = {}
for kernel in json.load(sys.stdin)["kernels"]:
    if (kernel["op"], kernel["dtype"], kernel["head_dim"], kernel["causal"]) == (sys.argv[1], "bf16", 128, True):
        first.setdefault(kernel["family"], kernel["name"])
print("\n".join(first.values()))' "$op") || { echo "attnpack inspect $ARCHIVE failed" >> "$LOG"; status=1; }
  for kernel in "" $forced; do
    for i in 1 2 3; do
      $BENCH "$ARCHIVE" --json --op "$op" ${kernel:+--kernel "$kernel"} >> "$LOG" 2>&1 || status=1
    done
  done
done
cat "$LOG"
exit $status
