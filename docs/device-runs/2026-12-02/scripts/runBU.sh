#!/usr/bin/env bash
# Prepared in the thirteenth session (from runBP.sh, run64): the committed tree, with
# scripts/bwd_lpt.patch applied if runBT.sh kept it on this machine (/tmp/ab_state): the build,
# `attnpack bench` fwd and fwdbwd over both sets, then test_torch_sdpa.py; runBR.sh's entries
# merged first where it left them in /tmp/tuned.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs3; mkdir -p $L
state=$(cat /tmp/ab_state 2>/dev/null || echo none)
echo "runBT state: $state" | tee $OUT/state.txt
if [ "$state" = lpt ]; then
  grep -q "_block_and_head" aot/kernels/gluon_attn/bwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_lpt.patch
fi
# after runBR.sh on the same machine: its re-tuned entries over the committed database
if ls /tmp/tuned/*.jsonl >/dev/null 2>&1; then
  PYTHONPATH=/tmp/attnpack-site:$PWD/python python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl \
    /tmp/tuned/*.jsonl -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.jsonl
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
