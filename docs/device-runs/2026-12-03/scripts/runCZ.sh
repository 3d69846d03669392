#!/usr/bin/env bash
# Twenty-first session: the four-consumer forward at head dim 64 (`consumers4`, 64-key tiles,
# built and checked on the CPU), then the bench of the tree with everything this session merged.
#   1. tests/gpu/test_gluon_attn.py: the smoke test (every forward kernel finishes), the
#      growing-maxima test and every head-dim-64 case (the consumers4 kernels among all d64
#      kernels) against the math reference;
#   2. attnpack tune of the 90 bf16 head-dim-64 prefill forward keys (keys_fwd_bf16_d64.json)
#      on this tree's tuning archive, merged over the database at 1 %;
#   3. build_tools/bench_tree.sh on the merged database (its test_torch_sdpa stops at the call's
#      end). Returns fwd_bf16_d64.jsonl, sm_90_merged.txt, bench.txt, results.json.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
FILES=tests/gpu/test_gluon_attn.py OUT=$OUT/logs timeout 170 bash build_tools/run_gpu_tests.sh \
  -k "smoke or row_maxima or 64-True or 64-False" > $OUT/tests_attn.txt 2>&1
echo "test_gluon_attn rc $? at $SECONDS s: $(tail -n 1 $OUT/logs/test_gluon_attn.log)"
grep -h "FAILED\|Error" $OUT/logs/test_gluon_attn.log | head -n 20
# tune_keys.sh counts its limits from its own start (its archive build included)
bash build_tools/tune_keys.sh fwd_bf16_d64 .carry/keys_fwd_bf16_d64.json 190 220
. build_tools/runtime_env.sh /tmp/logs-cz
python3 -m attnpack.cli db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl \
  $OUT/fwd_bf16_d64.jsonl -o aot/tuning_db/sm_90.jsonl \
  && cp aot/tuning_db/sm_90.jsonl $OUT/sm_90_merged.txt
git diff --stat aot/tuning_db/ | tail -n 1
DEADLINE_S=$((585 - SECONDS)) OUT=$OUT bash build_tools/bench_tree.sh
