#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run): the committed tree, with the
# patches runCC.sh and runCD.sh kept and the entries runCA.sh returned (copied into
# .carry/tuned/ before the call) merged over its database, benched: build_tools/bench_tree.sh
# (the build, `attnpack bench` fwd and fwdbwd over both sets, then test_torch_sdpa.py).
cd "$(dirname "$0")/.."
# after runCC.sh and runCD.sh on the same machine: with the patches they kept
bash build_tools/apply_kept.sh grid3=docs/device-runs/2026-12-02/scripts/bwd_grid3.patch \
  fgroup=docs/device-runs/2026-12-02/scripts/fwd_group.patch | tee $OUT/state.txt
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
if ls .carry/tuned/*.jsonl >/dev/null 2>&1; then
  . build_tools/runtime_env.sh /tmp/logs3
  python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl .carry/tuned/*.jsonl \
    -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.jsonl
fi
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
