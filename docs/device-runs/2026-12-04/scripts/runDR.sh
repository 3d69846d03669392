#!/usr/bin/env bash
# Twenty-fifth session, after run113 merged the persistent dK/dV kernels into the database: the
# F.sdpa suite (tests/gpu/test_torch_sdpa.py) on this tree's bundle with that database, then
# tests/gpu/test_gluon_bwd.py's fp16 cases (run111 ran the smoke test over every kernel, the
# repeatability and the bf16 gradient grid on them; not fp16).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
. build_tools/bench_env.sh $L
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$OUT/test_torch_sdpa.txt"
FILES=tests/gpu/test_gluon_bwd.py OUT=$L timeout $((330 - SECONDS)) \
  bash build_tools/run_gpu_tests.sh -k fp16 > "$L/summary_bwd.txt" 2>&1
echo "test_gluon_bwd fp16 rc $? at $SECONDS s"; tail -n 1 "$L/summary_bwd.txt"
grep -E "FAILED|^E  " "$L/test_gluon_bwd.log" | cut -c1-400 | head -40 > "$OUT/bwd_fp16.txt"
tail -n 3 "$L/test_gluon_bwd.log" >> "$OUT/bwd_fp16.txt"
