#!/usr/bin/env bash
# Twentieth session: runCR.sh again, shortened to the device time left (about 440 s of call), with
# keys_fwd_bf16_causal.json fixed (each key's streams class from its database entry; run93 stopped
# at the first key, whose file entry said 128). Re-tune the bf16 causal prefill forward keys on
# this tree's tuning archive for at most 150 s (the rest next time: copy fwd_bf16_causal.jsonl into
# .carry/tuned/ and the tuner skips them), merge where a new winner is 1 % faster in this run,
# then build_tools/bench_tree.sh on the merged database.
STOP_S=150 KILL_S=180 CALL_S=425 exec bash "$(dirname "$0")/runCR.sh"
