#!/usr/bin/env bash
# Twenty-seventh session, after run122: the forward's persistent causal kernels with the order
# rule (fwd._snake_order) read 1-2 % slower than before at rows that keep the pairs, where the
# consumers computed both orders' divisions between tiles and selected one (gl.where); the
# forward now branches on the order (fwd._tile). run122's forward merge is not kept. On one H200:
# 1. this tree's bf16 Gluon archive (/tmp/ta), the bf16 forward of the tree before the rule
#    (.carry/old-aot, pairs) and of run122's (.carry/where-aot, the select);
# 2. bench/kernel_ab.py, forward, the persistent causal kernels: pairs, select and branch;
# 3. `attnpack tune` (by turns) of the causal forward keys behind the bench rows, merged at
#    1 % into this tree's database, returned as $OUT/sm_90_merged.txt;
# 4. the bundle on it, `attnpack bench` of both ops over both shape sets, and
#    tests/gpu/test_torch_sdpa.py on it;
# 5. tests/gpu/test_gluon_attn.py -k persistent_units, last: its fixture builds both dtypes'
#    forwards.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --dtype bf16 -o /tmp/ta \
  --cache-dir /tmp/cache-new -j 10 > "$L/build.log" 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  --kernels .carry/old-aot/kernels --cache-dir /tmp/cache-old -o /tmp/old -j 4 \
  > "$L/build_old.log" 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  --kernels .carry/where-aot/kernels --cache-dir /tmp/cache-where -o /tmp/where -j 4 \
  > "$L/build_where.log" 2>&1
wait
echo "archives at $SECONDS s"; tail -n 1 "$L/build.log" "$L/build_old.log" "$L/build_where.log"
A=/tmp/ta/attnpack-0.1.0-sm_90.apk
timeout 90 python3 bench/kernel_ab.py --op fwd --kernel-filter "causal.*persistent1" \
  --archive pairs=/tmp/old/attnpack-0.1.0-sm_90.apk \
  --archive select=/tmp/where/attnpack-0.1.0-sm_90.apk --archive branch=$A --reps 10 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json "$OUT/ab_fwd.json" \
  > "$OUT/ab_fwd.txt" 2>&1
echo "kernel_ab rc $? at $SECONDS s"; tail -n 1 "$OUT/ab_fwd.txt"; grep -c WRONG "$OUT/ab_fwd.txt"
bash build_tools/tune_keys.sh rows_fwd_causal .carry/keys_rows_fwd_causal.json \
  $((215 - SECONDS)) $((230 - SECONDS))
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  "$OUT/rows_fwd_causal.jsonl" -o aot/tuning_db/sm_90.jsonl \
  > "$L/merge.txt" 2>&1 && cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_merged.txt"
echo "merge rc $? at $SECONDS s"; tail -n 3 "$L/merge.txt"
. build_tools/bench_env.sh "$L"
timeout $((400 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$L/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json "$OUT/" 2>/dev/null
timeout $((490 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$L/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 1 "$L/test_torch_sdpa.txt"
timeout $((590 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -rfE \
  -p no:cacheprovider -k persistent_units > "$L/test_fwd.txt" 2>&1
echo "test_gluon_attn rc $? at $SECONDS s"; tail -n 1 "$L/test_fwd.txt"
grep -E "^FAILED|^ERROR" "$L/test_fwd.txt" | cut -c1-300 | head -10
# at most 8 files come back: ab_fwd.json/.txt, rows_fwd_causal.jsonl, sm_90_merged.txt,
# results.json, run.log and the rest in logs.tgz
mv "$OUT/tune_rows_fwd_causal.txt" /tmp/tune-logs/tune_rows_fwd_causal.log "$L/" 2>/dev/null
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs
