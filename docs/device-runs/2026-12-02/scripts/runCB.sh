#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run): the committed tree with the
# entries runCA.sh returned (copied into .carry/tuned/ before the call) merged over its
# database: the build, `attnpack bench` fwd and fwdbwd over both sets, then test_torch_sdpa.py.
cd "$(dirname "$0")/.."
# after runCC.sh and runCD.sh on the same machine: with the patches they kept
if [ "$(cat /tmp/ab_state_grid3 2>/dev/null)" = grid3 ]; then
  grep -q "def _bwd_grid" aot/kernels/gluon_attn/family.py || patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_grid3.patch
fi
if [ "$(cat /tmp/ab_state_fgroup 2>/dev/null)" = fgroup ]; then
  grep -q "def _one_tile_unit" aot/kernels/gluon_attn/fwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/fwd_group.patch
fi
echo "runCC: $(cat /tmp/ab_state_grid3 2>/dev/null || echo none), runCD: $(cat /tmp/ab_state_fgroup 2>/dev/null || echo none)" | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs3; mkdir -p $L
if ls .carry/tuned/*.jsonl >/dev/null 2>&1; then
  . build_tools/runtime_env.sh $L
  python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl .carry/tuned/*.jsonl \
    -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.jsonl
fi
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 220 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --no-plots \
  --out /tmp/bench > $OUT/bench.txt 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json $OUT/results.json 2>/dev/null
timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py > $OUT/test_torch_sdpa.txt 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 $OUT/test_torch_sdpa.txt
