#!/usr/bin/env bash
# Prepared in the thirty-seventh session, for an H100 80GB HBM3: a GPU model's own tuning entries
# (aot/tuning_db/sm_90/nvidia-h100-80gb-hbm3.jsonl, the archive's tuning.by_gpu) on the GPU they
# serve. The tree's bundle built (build_tools/bench_env.sh); tests/gpu/test_torch_sdpa.py's
# by_gpu test (each entry's kernel serves its timing shape here, within the parity bound of an
# fp32 reference) with the bundle_info and explain tests; then `attnpack bench --ops fwdbwd`
# over the five model rows those entries serve (rows_h100_by_gpu.json), with the bundle as built
# and with the same archive re-packed without by_gpu (strip_by_gpu.py: what an H100 got before),
# and `attnpack bench --compare` of the two.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEW.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
. build_tools/bench_env.sh /tmp/ew-logs
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  -k "gpu_models_own or bundle_info or explain_matches" > "$OUT/test_by_gpu.txt" 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 3 "$OUT/test_by_gpu.txt"
python3 .carry/strip_by_gpu.py "$ATTNPACK_BUNDLE_DIR"/attnpack-*-sm_90.apk /tmp/arch-wide
for which in by_gpu arch_wide; do
  dir=$ATTNPACK_BUNDLE_DIR; [ "$which" = arch_wide ] && dir=/tmp/arch-wide
  ATTNPACK_BUNDLE_DIR=$dir timeout 170 python3 -m attnpack.cli bench --ops fwdbwd --dtype bf16 \
    --shapes .carry/rows_h100_by_gpu.json --no-cold --no-dynamic --no-plots --out "/tmp/bench-$which" \
    > "$OUT/bench_$which.txt" 2>&1
  echo "bench $which rc $? at $SECONDS s"; grep -A 8 "^## Summary" "/tmp/bench-$which/report.md" | head -10
  cp "/tmp/bench-$which/results.json" "$OUT/results_$which.json" 2>/dev/null
done
python3 -m attnpack.cli bench --compare "$OUT/results_arch_wide.json" "$OUT/results_by_gpu.json" \
  > "$OUT/compare.txt" 2>&1
echo "compare rc $? at $SECONDS s"; cat "$OUT/compare.txt"
