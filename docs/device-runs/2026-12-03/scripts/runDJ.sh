#!/usr/bin/env bash
# Prepared in the twenty-third session for the next one (not run). The bench on this tree
# (build_tools/bench_tree.sh: both shape sets, fwd and fwdbwd in bf16, then test_torch_sdpa.py),
# the first with each backend's round medians kept (results.json `round_ms`; the report's "The
# rounds apart"): does attnpack's ratio to cuDNN differ between the round where it is timed
# first and the one where it is timed last? If it does, the order, not the kernel, moves rows
# by that much (docs/performance.md, "Clocks and cycles").
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/bench_tree.sh
cp /tmp/bench/report.md "$OUT/report.md" 2>/dev/null
sed -n '/^## The rounds apart/,/^## Shapes/p' /tmp/bench/report.md | head -n 12
