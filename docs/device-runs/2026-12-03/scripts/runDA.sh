#!/usr/bin/env bash
# Prepared in the twenty-first session for the next one (not run). run97 (runCZ.sh) cut the
# four-consumer forward's GPU tests short at its 170 s limit (311 passed, none failed) and its
# tune of the bf16 head-dim-64 prefill keys at 79 of 90. This finishes both:
#   1. tests/gpu/test_gluon_attn.py: the cases run97 did not reach (the B3 H32/8 grid at head
#      dim 64, the persistent-unit cases, which idle consumers 2 and 3 of four at S 384 and
#      640, and the growing-maxima test);
#   2. the last 11 keys of keys_fwd_bf16_d64.json (the tuner skips the 79 in run97's output),
#      merged over the database at 1 % (build_tools/tune_merge.sh). Returns fwd_bf16_d64.jsonl and
#      sm_90_merged.txt.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p $OUT/logs .carry/tuned
cp docs/device-runs/2026-12-03/run97_c4_bench/fwd_bf16_d64.jsonl .carry/tuned/
FILES=tests/gpu/test_gluon_attn.py OUT=$OUT/logs timeout 300 bash build_tools/run_gpu_tests.sh \
  -k "test_persistent_units or row_maxima or (match_math_sdpa and 3-32-8 and 64-)" \
  > $OUT/tests_attn.txt 2>&1
echo "test_gluon_attn rc $? at $SECONDS s: $(tail -n 1 $OUT/logs/test_gluon_attn.log)"
grep -h "FAILED\|Error" $OUT/logs/test_gluon_attn.log | head -n 20
bash build_tools/tune_merge.sh fwd_bf16_d64 .carry/keys_fwd_bf16_d64.json 200 240
