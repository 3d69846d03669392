#!/usr/bin/env bash
# Twenty-fourth session. run106 (runDK.sh) moved the bench from 0.99-1.00x to 1.03-1.04x on the
# forward by taking turns call by call and op by op, every timed call behind a GPU spin of
# 200,000 cycles. Does the spin itself move the ratios? The bench with turns of one call and no
# spin (--lead-cycles 0), then again with the spin (run106's settings: how far a repeat moves).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=/tmp/bench-tree-logs; mkdir -p $L
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle \
  ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so \
  ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
for lead in 0 200000; do
  timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic \
    --no-plots --turn-calls 1 --lead-cycles $lead --out /tmp/bench$lead > "$OUT/bench_lead$lead.txt" 2>&1
  echo "bench --lead-cycles $lead rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench$lead/report.md | head -12
  cp /tmp/bench$lead/results.json "$OUT/results_lead$lead.json"; cp /tmp/bench$lead/report.md "$OUT/report_lead$lead.md"
done
