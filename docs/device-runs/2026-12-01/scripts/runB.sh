#!/usr/bin/env bash
# Device call B at e891076 (after A on the same warm machine): runtime + torch overhead, attnpack bench.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=e891076
mkdir -p $OUT/logs
timeout 560 bash build_tools/gpu_bench_run.sh $OUT/logs --ops fwd,fwdbwd --dtype bf16 > $OUT/logs/summary.txt 2>&1
echo "rc $?" >> $OUT/logs/summary.txt
tail -40 $OUT/logs/summary.txt
tar czf $OUT/logsB.tgz -C $OUT logs
