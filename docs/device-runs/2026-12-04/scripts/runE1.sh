#!/usr/bin/env bash
# Twenty-eighth session: the deterministic backward's preprocess folded into its dQ kernel
# (each dQ program computes Δ = rowsum(dO ⊙ O) of its 128 rows, O read from global memory while
# its Q and dO tiles land, stores it, and the dK/dV kernel runs after it: two launches, no
# separate pass over O and dO). On one H200:
# 1. this tree's bf16 Gluon archive (/tmp/ta: tuning and the bench), its whole Gluon backward
#    (/tmp/tb, fp16 and bf16: the tests), and the old backward (.carry/old-aot, bf16: /tmp/old);
# 2. tests/gpu/test_gluon_bwd.py whole (every kernel against the fp32 math reference over the
#    grid, both dtypes; the smoke test; det1 bitwise repeatability);
# 3. bench/kernel_ab.py, backward, every det1 kernel: old against this tree, both shape sets;
# 4. `attnpack tune` (by turns) of the 38 backward keys behind the bench rows into
#    $OUT/rows_bwd.jsonl (merged on the CPU, then benched by runE2.sh).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/ta \
  --cache-dir /tmp/cache-new -j 10 > "$L/build.log" 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
  --kernels .carry/old-aot/kernels --cache-dir /tmp/cache-old -o /tmp/old -j 6 \
  > "$L/build_old.log" 2>&1
wait
# the tests' archive: both dtypes' backward (its bf16 kernels from the cache /tmp/ta left)
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd \
  --cache-dir /tmp/cache-new -o /tmp/tb -j 16 > "$L/build_tb.log" 2>&1
echo "archives at $SECONDS s"; tail -qn 1 "$L"/build*.log
ATTNPACK_GLUON_BWD_ARCHIVE=/tmp/tb/attnpack-0.1.0-sm_90.apk timeout 200 python3 -m pytest \
  tests/gpu/test_gluon_bwd.py -q -rfE -p no:cacheprovider > "$L/test_bwd.txt" 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s"; tail -n 1 "$L/test_bwd.txt"
grep -E "^FAILED|^ERROR" "$L/test_bwd.txt" | cut -c1-300 | head -10
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout 110 python3 bench/kernel_ab.py --op bwd --kernel-filter "det1" \
  --archive old=/tmp/old/attnpack-0.1.0-sm_90.apk --archive dqdelta=$A --reps 10 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_det1.json" \
  > "$OUT/ab_det1.txt" 2>&1
echo "kernel_ab rc $? at $SECONDS s"; tail -n 1 "$OUT/ab_det1.txt"; grep -c WRONG "$OUT/ab_det1.txt"
bash build_tools/tune_keys.sh rows_bwd .carry/keys_rows_bwd.json \
  $((545 - SECONDS)) $((575 - SECONDS))
cp /tmp/tune-logs/tune_rows_bwd.log "$L/" 2>/dev/null
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
