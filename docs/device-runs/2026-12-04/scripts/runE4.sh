#!/usr/bin/env bash
# Twenty-eighth session, the end of it: the default bundle on the database after run126's merge
# (116 short backward keys re-tuned, 37 of them to det1), and through it
# tests/gpu/test_torch_sdpa.py and test_torch_contracts.py (deterministic mode) on one H200.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
. build_tools/bench_env.sh "$L"
timeout $((280 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  tests/gpu/test_torch_contracts.py > "$OUT/tests.txt" 2>&1
echo "test_torch_sdpa + test_torch_contracts rc $? at $SECONDS s"; tail -n 2 "$OUT/tests.txt"
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
