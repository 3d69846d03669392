#!/usr/bin/env bash
# Prepared in the thirty-fifth session. After runEO.sh on the same H200 (not an H100: the merge
# would be refused, docs/tuning.md "Entries of another GPU"): the persistent dqq kernels applied
# where runEO kept them (else the committed kernels: the keys are worth tuning in their rows'
# classes anyway, B16 H16 S1024's row being served by its class-512 entry), the 7 backward
# keys of the bench rows at head dim 128 without a mask, each in its rows' streams class
# (keys_rows_bwd_full128.json, build_tools/row_keys.py), tuned and merged at 1 % in the
# device's copy ($OUT/sm_90_merged.txt), then build_tools/bench_tree.sh
# (the bundle on it, `attnpack bench` bf16 fwd + fwdbwd over both sets, test_torch_sdpa.py).
# Then on the CPU: copy sm_90_merged.txt over aot/tuning_db/sm_90.jsonl and apply the patch if
# the bench holds, build_tools/regen_tuning_doc.py, docs/performance.md from results.json.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEP.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
bash build_tools/apply_kept.sh pdqq=docs/device-runs/2026-12-04/scripts/bwd_persistent_dqq.patch
bash build_tools/tune_merge.sh full128 .carry/keys_rows_bwd_full128.json 250 280
echo "tune and merge at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
