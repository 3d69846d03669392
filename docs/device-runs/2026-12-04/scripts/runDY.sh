#!/usr/bin/env bash
# Twenty-seventh session, after run120 (the snake for every persistent causal launch: up to
# 1.21x where few heads left the pairs' last round ragged, down to 0.72x at 64 and more (batch,
# kv head) pairs, their Q and dO no longer shared in L2): the persistent causal dK/dV kernels
# now take the snake only where B·Hkv <= 16 or the pairs would fill less than 0.9 of their
# rounds (bwd._snake_order). On one H200:
# 1. this tree's bf16 Gluon archive (/tmp/ta) and the pairs-only backward (.carry/old-aot);
# 2. tests/gpu/test_gluon_bwd.py, bf16 causal gradient grid at 4096 x 4096 and repeatability;
# 3. bench/kernel_ab.py, backward, the persistent causal kernels: pairs against this tree;
# 4. `attnpack tune` (by turns) of the 27 causal backward keys behind the bench rows, merged at
#    1 % into this tree's database (the held GQA-8 S4096 key included: the snake serves
#    Qwen2-7B B4 S3000 now), returned as $OUT/sm_90_merged.txt;
# 5. the bundle on that database, `attnpack bench` of both ops over both shape sets, and
#    tests/gpu/test_torch_sdpa.py on it.
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
echo "archives at $SECONDS s"; tail -n 1 "$L/build.log" "$L/build_old.log"
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
ATTNPACK_GLUON_BWD_ARCHIVE=$A timeout 120 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE \
  -p no:cacheprovider -k "(bf16 and causal and 4096x4096) or repeatable" > "$L/test_bwd.txt" 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s"; tail -n 1 "$L/test_bwd.txt"
grep -E "^FAILED|^ERROR" "$L/test_bwd.txt" | cut -c1-300 | head -10
timeout 90 python3 bench/kernel_ab.py --op bwd --kernel-filter "causal.*persistent1" \
  --archive pairs=/tmp/old/attnpack-0.1.0-sm_90.apk --archive rule=$A --reps 10 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_bwd.json" \
  > "$OUT/ab_bwd.txt" 2>&1
echo "kernel_ab rc $? at $SECONDS s"; tail -n 1 "$OUT/ab_bwd.txt"; grep -c WRONG "$OUT/ab_bwd.txt"
bash build_tools/tune_keys.sh rows_bwd_causal .carry/keys_rows_bwd_causal.json \
  $((250 - SECONDS)) $((270 - SECONDS))
cp /tmp/tune-logs/tune_rows_bwd_causal.log "$L/" 2>/dev/null
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  "$OUT/rows_bwd_causal.jsonl" -o aot/tuning_db/sm_90.jsonl \
  > "$OUT/merge.txt" 2>&1 && cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_merged.txt"
echo "merge rc $? at $SECONDS s"; tail -n 3 "$OUT/merge.txt"
. build_tools/bench_env.sh "$L"
timeout $((470 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$OUT/test_torch_sdpa.txt"
