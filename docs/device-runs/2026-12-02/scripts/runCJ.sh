#!/usr/bin/env bash
# Sixteenth session: the deterministic dQ kernel no longer serializes its wgmmas (run79 kept
# scripts/bwd_dq_unserial.patch, now committed: det1 kernels 1.070x by cycles over 44 rows), so
# re-tune the backward keys where a det1 candidate was within 12 % of the winner or won
# (keys_bwd_det1_bf16.json 80, keys_bwd_det1_fp16.json 46, nearest to a tie first), merge the
# entries over the database, then build_tools/bench_tree.sh (bf16 forward and forward +
# backward over both sets, test_torch_sdpa.py). sm_90_merged.txt is the merged database.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh bwd_det1_bf16 .carry/keys_bwd_det1_bf16.json 250 290
bash build_tools/tune_keys.sh bwd_det1_fp16 .carry/keys_bwd_det1_fp16.json \
  $((330 - SECONDS)) $((360 - SECONDS))
. build_tools/runtime_env.sh /tmp/logs-cj
python3 -m attnpack.cli db merge aot/tuning_db/sm_90.jsonl $OUT/*.jsonl \
  -o aot/tuning_db/sm_90.jsonl && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
