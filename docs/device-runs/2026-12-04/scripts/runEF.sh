#!/usr/bin/env bash
# Prepared in the thirty-first session, to run right after runEE.sh on the same machine (its
# verdict in /tmp/ab_state_block; since the thirty-second session also whether the split
# tail's GPU tests passed there, /tmp/tail_state): with the overlapped schedule really
# overlapped, an overlapped kernel may now win forward keys a plain one holds, and a split-tail
# one (`tail1`) those where its last round pays. The patch applied if runEE kept it
# (build_tools/apply_kept.sh), `attnpack tune` of the 38 forward keys behind the bench rows
# (keys_rows_fwd.json) into $OUT/rows_fwd.jsonl, that merged at 1 % over the committed database
# in this (disposable) copy of the tree, then build_tools/bench_tree.sh: the bundle, `attnpack
# bench`, test_torch_sdpa.py. Afterwards, on the CPU: the patch and the merge committed if the
# bench agrees (the merge is $OUT/sm_90_merged.txt).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEF.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/apply_kept.sh block=docs/device-runs/2026-12-04/scripts/fwd_overlap_block.patch
bash build_tools/tune_keys.sh rows_fwd .carry/keys_rows_fwd.json 280 300
# (thirty-second session) The tuning archive holds the split tail's kernels (`tail1`): their
# winners are merged only if runEE.sh's GPU tests (the smoke test and `split_tail`) passed on
# this machine.
if [ "$(cat /tmp/tail_state 2>/dev/null)" != ok ]; then
  python3 - "$OUT/rows_fwd.jsonl" <<'PY'
import json, sys
path = sys.argv[1]
lines = open(path).read().splitlines()
kept = [line for line in lines if "_tail1" not in json.loads(line).get("kernel", "")]
open(path, "w").write("\n".join(kept) + "\n")
print(f"split tail not tested here or failed: {len(lines) - len(kept)} entries left out")
PY
fi
PYTHONPATH=/tmp/attnpack-site:$PWD/python python3 -m attnpack.cli db merge --min-gain 1.01 \
  aot/tuning_db/sm_90.jsonl "$OUT/rows_fwd.jsonl" -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_merged.txt"
echo "merge rc $? at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
