#!/usr/bin/env bash
# Prepared in the thirty-fourth session (checked on the CPU: `attnpack tune --rows` lists these
# keys for the five rows). Whether the GPU model changes which backward kernel wins at the
# GQA head-dim-128 causal model rows of fewest (batch, kv head) pairs: on an H100 four of them
# read 0.85-0.93x cuDNN with the H200's picks (docs/gluon-bwd.md, "The H100, and the causal walk
# from the last rows"). Their three backward keys, class 64 (GQA 4 S8192: Llama-3.1-8B B2;
# GQA 8 S8192: Llama-3.3-70B B1, Qwen2-7B B2; GQA 8 S4096: Qwen2.5-72B B4, Qwen2-7B B4 S3000),
# are tuned on this GPU into $OUT/gqa_c64.jsonl, not merged, and compared with the shipped
# entries (`attnpack db diff`). After runEL.sh on the same machine the descending walk is applied
# where runEL kept it, so the tuned candidates are the kernels runEL weighed (its archive is
# built apart from one of the committed kernels: tune_keys.sh names it by the sources' digest).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEM.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
bash build_tools/apply_kept.sh descend=docs/device-runs/2026-12-04/scripts/bwd_causal_descend.patch
bash build_tools/tune_keys.sh gqa_c64 .carry/keys_bwd_gqa_causal_c64.json 480 560
. build_tools/runtime_env.sh /tmp/tune-logs  # PYTHONPATH for attnpack.cli (run153 lacked it)
python3 -m attnpack.cli db diff aot/tuning_db/sm_90.jsonl "$OUT/gqa_c64.jsonl" > "$OUT/diff.txt" 2>&1
echo "diff rc $? at $SECONDS s"; cat "$OUT/diff.txt"
python3 -m attnpack.cli db show "$OUT/gqa_c64.jsonl" > "$OUT/show.txt" 2>&1; cat "$OUT/show.txt"
