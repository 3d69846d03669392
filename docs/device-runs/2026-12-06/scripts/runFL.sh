#!/usr/bin/env bash
# Prepared in the forty-second session, for an H200: the four backward keys run178 did not reach
# (keys_rows_bwd_left4.json: GQA-8 causal S512 class 128 and the head-dim-96 causal keys at S512
# class 512, S2048 and S4096 class 128, each in its rows' streams class), tuned and merged at 1 %
# into the tree's database (build_tools/tune_merge.sh; $OUT/sm_90_merged.txt), then the bench of
# both shape sets on the merged database (build_tools/bench_tree.sh, test_torch_sdpa.py to the
# deadline). Compare the rows whose kernel changed with the bench of the database before
# (`attnpack bench --compare`), and commit only entries whose rows did not lose (run178 kept one
# back that won at the tuner's shapes and lost 3 % at the rows'). On any other GPU: nothing.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFL.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == *H200* ]] || { echo "not an H200: nothing done"; exit 0; }
bash build_tools/tune_merge.sh rows_left4 .carry/keys_rows_bwd_left4.json 280 330
echo "tune and merge at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
