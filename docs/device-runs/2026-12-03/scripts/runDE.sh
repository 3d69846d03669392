#!/usr/bin/env bash
# Twenty-second session, last call (about 360 s of wall time left in the session's budget).
# 1. The bf16 forward keys of streams class 64 that serve rows of the two bench sets
#    (keys_fwd_class64.json, 13 keys, the public rows' first: head dim 64 at S8192, head dim
#    128 at S4096/8192 with GQA 1, 4 and 8, head dim 256 at S4096/8192), tuned with the tuner's second timing shape for
#    that class (attnpack.tune.runner.timing_shapes: the key's batch and B·Hkv = 64, the winner
#    by the geometric mean of each candidate's time over the fastest at either) and merged at
#    1 % (by those scores; build_tools/tune_merge.sh).
# 2. build_tools/bench_tree.sh on the merged database, cut to the bench (test_torch_sdpa gets
#    what is left of the call's 360 s).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_merge.sh fwd_class64 .carry/keys_fwd_class64.json 185 210
echo "tune_merge done at $SECONDS s"
OUT=$OUT/bench DEADLINE_S=$((360 - SECONDS)) bash build_tools/bench_tree.sh
