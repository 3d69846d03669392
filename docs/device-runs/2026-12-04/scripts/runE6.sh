#!/usr/bin/env bash
# Twenty-ninth session, after run128 (runE5.sh: five head-dim-64 backward configs with 128
# query rows a dK/dV step, A/B by cycles; the tma1 and tma1 persistent ones won every row and
# are declared in family.py). On one H200: a tuning archive of every triton and Gluon kernel
# (both dtypes; the tuner runs forwards for the backward keys, and the old winners must be
# among the candidates for the 1 % merge), then `attnpack tune` of the 132 head-dim-64
# backward keys of the database (`keys_bwd_d64.json`: the 9 behind bench rows first, then bf16,
# then fp16, longest first) into $OUT/bwd_d64.jsonl, merged on the CPU.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
bash build_tools/tune_keys.sh bwd_d64 .carry/keys_bwd_d64.json \
  $((550 - SECONDS)) $((580 - SECONDS))
cp /tmp/tune-logs/tune_bwd_d64.log /tmp/tune-logs/build_tuning.log "$L/" 2>/dev/null
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
