#!/usr/bin/env bash
# Prepared in the thirty-second session (2026-12-05; no device was lent, built and checked on the
# CPU only). The split tail (docs/gluon-family.md, item 22): 14 forward kernels (`tail1`, the
# persistent configs without a mask) that cut the tiles of the last, partial round along the
# keys and merge the pieces through the workspace, after a step that zeroes their counters. Run
# after runEE.sh on the same machine: the overlap patch applied first if runEE kept it
# (build_tools/apply_kept.sh), so these kernels are run as they will be tuned. Then
# 1. tests/gpu/test_gluon_attn.py: the smoke test (every forward kernel once, in a child with a
#    deadline: a hang names its kernel), the split tail's own test (tile counts that leave 3-4
#    pieces a tile against this GPU's SM count, each tail kernel five times, bitwise equal),
#    and without a mask the persistent units, the growing maxima and the B1 H8 bf16 grid cases
#    (tile counts below the SM count: every tile in pieces where it has 2+ key tiles). Its verdict goes to
#    /tmp/tail_state (ok or fail), which runEF.sh reads: it merges no tail kernel on "fail".
# 2. bench/kernel_ab.py over one archive, the bf16 persistent kernels without a mask by cycles at
#    every prefill row without a mask of both shape sets: each tail kernel beside its twin
#    (the same name without `_tail1`), in $OUT/ab_tail.json; the rows' key tiles and rounds are
#    in the shape labels (2048 tiles: 15.75 rounds instead of 16 expected, docs/gluon-family.md).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEH.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
bash build_tools/apply_kept.sh block=docs/device-runs/2026-12-04/scripts/fwd_overlap_block.patch
FILES=tests/gpu/test_gluon_attn.py OUT=$L timeout 330 bash build_tools/run_gpu_tests.sh \
  -k "smoke or split_tail or (False and (test_persistent_units or row_maxima)) or (1-8-8 and False-bf16)" \
  > "$L/summary.txt" 2>&1
trc=$?; echo "tests rc $trc at $SECONDS s"; tail -n 1 "$L/summary.txt"
{ grep -E "FAILED|^E  " "$L/test_gluon_attn.log" | cut -c1-600 | head -200
  tail -n 3 "$L/test_gluon_attn.log"; } > "$OUT/tests.txt"
if [ $trc = 0 ] && grep -q " passed" "$L/summary.txt"; then echo ok; else echo fail; fi \
  | tee /tmp/tail_state "$OUT/tail_state.txt"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  -o /tmp/tail-apk -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"
timeout $((575 - SECONDS)) python3 bench/kernel_ab.py --op fwd --cycles --reps 8 \
  --archive all=/tmp/tail-apk/attnpack-0.1.0-sm_90.apk --kernel-filter "-full/.*persistent1" \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_tail.json" \
  > "$OUT/ab_tail.txt" 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 3 "$OUT/ab_tail.txt"
