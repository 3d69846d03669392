#!/usr/bin/env bash
# Twenty-second session, first call. The twenty-first session's runDA.sh (prepared, not run;
# folded in here) plus one measurement:
#   1. tests/gpu/test_gluon_attn.py: the four-consumer cases run97 did not reach (the B3 H32/8
#      grid at head dim 64, the persistent-unit cases, the growing-maxima test);
#   2. the last 11 keys of keys_fwd_bf16_d64.json (the tuner skips run97's 79), merged at 1 %;
#   3. bench/kernel_ab.py with the tuning archive alone over timing_rows.json: every bf16
#      forward kernel of the keys that serve the public rows below 0.95x, at each row and at its
#      key's timing shape (does the timing shape's winner win the row?).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p $OUT/logs .carry/tuned
cp docs/device-runs/2026-12-03/run97_c4_bench/fwd_bf16_d64.jsonl .carry/tuned/
FILES=tests/gpu/test_gluon_attn.py OUT=$OUT/logs timeout 260 bash build_tools/run_gpu_tests.sh \
  -k "test_persistent_units or row_maxima or (match_math_sdpa and 3-32-8 and 64-)" \
  > $OUT/tests_attn.txt 2>&1
echo "test_gluon_attn rc $? at $SECONDS s: $(tail -n 1 $OUT/logs/test_gluon_attn.log)"
grep -h "FAILED\|Error" $OUT/logs/test_gluon_attn.log | head -n 20
bash build_tools/tune_merge.sh fwd_bf16_d64 .carry/keys_fwd_bf16_d64.json 150 190
echo "tune_merge done at $SECONDS s"
. build_tools/runtime_env.sh /tmp/ab-logs
timeout $((585 - SECONDS)) python3 bench/kernel_ab.py --archive tuning=/tmp/ta/attnpack-0.1.0-sm_90.apk \
  --shapes .carry/timing_rows.json --json $OUT/timing_rows.json > $OUT/timing_rows.txt 2>&1
echo "kernel_ab rc $? at $SECONDS s"; grep -v Warning $OUT/timing_rows.txt | tail -n 12
