#!/usr/bin/env bash
# Prepared in the twenty-ninth session, not run (its device time was spent). After run131 (112
# head-dim-64 backward keys tuned with the M128 configs and merged without a GPU run of the
# bundle on them). On one H200:
# 1. build_tools/bench_tree.sh: the default bundle on the committed database, `attnpack bench`
#    of both ops over both shape sets, tests/gpu/test_torch_sdpa.py through it (run127 found the
#    extreme-value contract broken by one re-tuned fp16 key; the held entry covers that key, the
#    other merged ones are unchecked through F.sdpa);
# 2. tests/gpu/test_torch_contracts.py;
# 3. the 5 head-dim-64 backward keys run131 did not reach (`keys_bwd_d64_left.json`, S16384,
#    13-19 s each), into $OUT/bwd_d64_left.jsonl, merged on the CPU at 1 %, if time is left
#    (the tuning archive takes about 110 s).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
DEADLINE_S=260 bash build_tools/bench_tree.sh
timeout $((300 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_contracts.py > "$OUT/test_contracts.txt" 2>&1
echo "test_torch_contracts rc $? at $SECONDS s"; tail -n 1 "$OUT/test_contracts.txt"
grep -hE "FAILED|^E  " "$OUT"/test_*.txt | cut -c1-400 | head -60 > "$OUT/failures.txt"
bash build_tools/tune_keys.sh bwd_d64_left .carry/keys_bwd_d64_left.json \
  $((540 - SECONDS)) $((575 - SECONDS))
