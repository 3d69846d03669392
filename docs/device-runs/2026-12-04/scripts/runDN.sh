#!/usr/bin/env bash
# Prepared in the twenty-fourth session for the next one (not run). The backward keys of
# streams class 64 that run109 did not reach (85 of ../2026-12-03/scripts/keys_bwd_class64_rest.json),
# resumed from run109's output (tracked in this tree), each timed at its batch and at
# B·Hkv = 64, merged at 1 % over the tree's database. A key takes 2-66 s (run109); this call
# reaches perhaps a third of them, and the next resumes from its output in the same way.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p .carry/tuned
cp docs/device-runs/2026-12-04/run109_bwd_class64/bwd_class64_rest.jsonl .carry/tuned/
bash build_tools/tune_merge.sh bwd_class64_rest .carry/keys_bwd_class64_rest.json 540 570
