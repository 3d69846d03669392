#!/usr/bin/env bash
# Twenty-first session: the fast backward's dQ share queued behind dV and dK as a tunable knob
# (`dqq1`: bwd.py DQ_QUEUE, head dims 96 and 128 without a mask; run94 measured it as a patch,
# scripts/bwd_dq_early2.patch), built and checked on the CPU.
#   1. tests/gpu/test_gluon_bwd.py whole on this machine's build: every backward kernel, the
#      eight dqq ones included, against the fp32 reference (run_gpu_tests.sh);
#   2. attnpack tune of the 66 head-dim-128 backward keys without a mask (bf16 and fp16,
#      keys_bwd_d128_full.json, from the database's entries) on this tree's tuning archive,
#      merged over the database at 1 %. Returns bwd_d128_full.jsonl and sm_90_merged.txt.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
FILES=tests/gpu/test_gluon_bwd.py OUT=$OUT/logs timeout 220 bash build_tools/run_gpu_tests.sh \
  > $OUT/tests_bwd.txt 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s: $(tail -n 1 $OUT/logs/test_gluon_bwd.log)"
grep -h "FAILED\|Error" $OUT/logs/test_gluon_bwd.log | head -n 20
# tune_keys.sh counts its limits from its own start (its archive build included)
bash build_tools/tune_keys.sh bwd_d128_full .carry/keys_bwd_d128_full.json 300 340
. build_tools/runtime_env.sh /tmp/logs-cy
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  $OUT/bwd_d128_full.jsonl -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
git diff --stat aot/tuning_db/ | tail -n 1
