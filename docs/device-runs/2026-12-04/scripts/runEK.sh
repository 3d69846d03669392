#!/usr/bin/env bash
# Prepared in the thirty-third session, after runEJ.sh on the same machine: where runEJ kept
# fwd_causal_noblock.patch (/tmp/ab_state_noblock), apply it, re-tune the 27 causal forward keys
# behind the bench rows (keys_rows_fwd_causal.json), merge at 1 % in the device's copy
# ($OUT/sm_90_merged.txt), then build_tools/bench_tree.sh. Where runEJ did not keep it, the
# committed kernels are tuned and benched as they are (a second reading of run141's tree).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEK.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/apply_kept.sh noblock=docs/device-runs/2026-12-04/scripts/fwd_causal_noblock.patch
bash build_tools/tune_merge.sh rows_fwd_causal .carry/keys_rows_fwd_causal.json 280 300
echo "tune and merge at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
