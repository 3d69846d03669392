#!/usr/bin/env bash
# Twenty-ninth session, after run130 (runE7.sh): the rest of the head-dim-64 backward keys
# (`keys_bwd_d64_rest.json`: the 117 run129 did not reach, shortest first) with the M128
# configs, into $OUT/bwd_d64_rest.jsonl; the tuning archive is run129's where the machine kept
# /tmp/ta, else built again.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh bwd_d64_rest .carry/keys_bwd_d64_rest.json \
  $((${STOP_S:-520} - SECONDS)) $((${KILL_S:-570} - SECONDS))
