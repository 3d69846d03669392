#!/usr/bin/env bash
# Prepared in the twenty-ninth session, not run (its device time was spent). After run131 (112
# head-dim-64 backward keys tuned with the M128 configs and merged without a GPU run of the
# bundle on them). On one H200:
# 1. the default bundle on the committed database; tests/gpu/test_torch_sdpa.py and
#    test_torch_contracts.py through it (run127 found the extreme-value contract broken by one
#    re-tuned fp16 key; the held entry covers that key, the other merged ones are unchecked
#    through F.sdpa);
# 2. `attnpack bench` of both ops over both shape sets;
# 3. the 5 head-dim-64 backward keys run131 did not reach (`keys_bwd_d64_left.json`, S16384,
#    13-19 s each), into $OUT/bwd_d64_left.jsonl, merged on the CPU at 1 %, if time is left
#    (the tuning archive takes about 110 s).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
. build_tools/bench_env.sh "$L"
timeout $((190 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  tests/gpu/test_torch_contracts.py > "$L/test_torch.txt" 2>&1
echo "test_torch_sdpa + contracts rc $? at $SECONDS s"; tail -n 1 "$L/test_torch.txt"
grep -E "FAILED|^E  " "$L/test_torch.txt" | cut -c1-400 | head -60 > "$OUT/failures.txt"
timeout $((300 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
bash build_tools/tune_keys.sh bwd_d64_left .carry/keys_bwd_d64_left.json \
  $((540 - SECONDS)) $((575 - SECONDS))
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
