#!/usr/bin/env bash
# Twenty-sixth session, after run116: `attnpack tune` (candidates by turns) of the 10 forward
# keys of streams class 512 behind the bench rows (now timed at their own batch and at 512
# (batch, KV head) pairs, runner.timing_shapes) and of all 38 backward keys behind the prefill
# rows (keys_rows_c512fwd_bwd.json); then this tree's database merged at 1 % with run116's
# forward keys below class 512 (rows_fwd_run116_below512.jsonl, timed by turns at one shape,
# as they still are) and with this run's output, the bundle built on it, and `attnpack bench`
# of both ops over both shape sets. The merged database comes back as $OUT/sm_90_merged.txt.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/ta \
  -j "$(nproc)" > "$L/build.log" 2>&1 || echo "build failed"
echo "archive at $SECONDS s"; tail -n 1 "$L/build.log"
bash build_tools/tune_keys.sh rows_c512 .carry/keys_rows_c512fwd_bwd.json $((380 - SECONDS)) \
  $((400 - SECONDS))
cp /tmp/tune-logs/tune_rows_c512.log "$L/" 2>/dev/null
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  .carry/rows_fwd_run116_below512.jsonl "$OUT/rows_c512.jsonl" -o aot/tuning_db/sm_90.jsonl \
  > "$OUT/merge.txt" 2>&1 && cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_merged.txt"
echo "merge rc $? at $SECONDS s"; tail -n 3 "$OUT/merge.txt"
. build_tools/bench_env.sh "$L"
timeout $((588 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
