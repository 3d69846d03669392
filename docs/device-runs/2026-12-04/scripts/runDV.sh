#!/usr/bin/env bash
# Twenty-sixth session, on the database run117 merged, with one key held at its earlier kernel
# by hand (bwd bf16 d128 causal GQA 8 S4096: run117's pick, the persistent tma1 kernel, served
# Qwen2-7B B4 S3000 at 0.88x cuDNN, 192 equal causal units on 132 SMs): this tree's bundle,
# `attnpack bench` of both ops over both shape sets, then tests/gpu/test_torch_sdpa.py (the F.sdpa
# suite on that bundle) and tests/gpu/test_tune.py (the tuner by turns, a class-512 key at its
# two shapes).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/bench_env.sh "$L"
timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$OUT/test_torch_sdpa.txt"
timeout $((560 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_tune.py \
  > "$OUT/test_tune.txt" 2>&1
echo "test_tune rc $? at $SECONDS s"; tail -n 3 "$OUT/test_tune.txt"
