#!/usr/bin/env bash
# Prepared in the thirty-seventh session, for an H100 80GB HBM3: the H100's own tuning entries for
# every key behind the bench rows (keys_rows_h100.json: build_tools/row_keys.py --dtype bf16 over
# both shape sets, the 39 backward keys first, then the 50 forward ones), tuned on the H100 into
# $OUT/rows_h100.jsonl, merged at 1 % into the H100's file
# (aot/tuning_db/sm_90/nvidia-h100-80gb-hbm3.jsonl) and pruned against the arch-wide database at
# 1 % (`attnpack db prune`: only entries that change what the H100 gets stay): $OUT/h100_merged.txt.
# A call that runs out of time leaves keys not reached; the next call resumes from
# .carry/tuned/rows_h100.jsonl (the returned rows_h100.jsonl copied there). Then, on the same
# machine, with h100_merged.txt copied over the H100's file in the tree sent: runET.sh (the
# bench over both shape sets, test_torch_sdpa.py, the host time). On any other GPU: nothing.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEX.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == "NVIDIA H100 80GB HBM3" ]] || { echo "not an H100 80GB HBM3: nothing done"; exit 0; }
F=aot/tuning_db/sm_90/nvidia-h100-80gb-hbm3.jsonl
bash build_tools/tune_keys.sh rows_h100 .carry/keys_rows_h100.json 520 575
. build_tools/runtime_env.sh /tmp/tune-logs  # PYTHONPATH for attnpack.cli
python3 -m attnpack.cli db merge --min-gain 1.01 "$F" "$OUT/rows_h100.jsonl" -o "$F" &&
  python3 -m attnpack.cli db prune "$F" --against aot/tuning_db/sm_90.jsonl --min-gain 1.01 -o "$F" &&
  cp "$F" "$OUT/h100_merged.txt"
echo "merge and prune rc $? at $SECONDS s"
