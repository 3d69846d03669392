#!/usr/bin/env bash
# Prepared in the thirty-second session (2026-12-05; no device was lent, built and checked on the
# CPU only). The split tail (docs/gluon-family.md, item 22): 14 forward kernels (`tail1`, the
# persistent configs without a mask) that cut the tiles of the last, partial round along the
# keys and merge the pieces through the workspace, after a step that zeroes their counters.
# Their GPU tests run in runEE.sh (the smoke test and `split_tail`, verdict in /tmp/tail_state);
# runEF.sh's tune weighs them against every other candidate. This run, optional (after runEF if
# device time is left, on the same machine), shows the split on its own: the overlap patch
# applied if runEE kept it (build_tools/apply_kept.sh), then bench/kernel_ab.py over one
# archive, the bf16 persistent kernels without a mask by cycles at every prefill row without a
# mask of both shape sets, each tail kernel beside its twin (the same name without `_tail1`:
# kernel_ab's --twin prints the ratios), in $OUT/ab_tail.json. On 132 SMs a bench row's 2048 tiles of 16 key tiles should end at 15.69
# rounds instead of 16 (1.9 % sooner), less the merge and the zeroing step.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEH.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
bash build_tools/apply_kept.sh block=docs/device-runs/2026-12-04/scripts/fwd_overlap_block.patch
echo "tail tests (runEE): $(cat /tmp/tail_state 2>/dev/null || echo 'not run here')"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  -o /tmp/tail-apk -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"
timeout $((575 - SECONDS)) python3 bench/kernel_ab.py --op fwd --cycles --reps 8 --twin _tail1 \
  --archive all=/tmp/tail-apk/attnpack-0.1.0-sm_90.apk "--kernel-filter=-full/.*persistent1" \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_tail.json" \
  > "$OUT/ab_tail.txt" 2>&1
echo "ab rc $? at $SECONDS s"; grep "over its twin" "$OUT/ab_tail.txt"
