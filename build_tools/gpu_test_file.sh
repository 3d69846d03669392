#!/usr/bin/env bash
# On a GPU machine, from a device-run script: one tests/gpu file (or a -k subset of it) through
# build_tools/run_gpu_tests.sh, stopped after TIMEOUT_S seconds, its log in $OUT/logs and its
# summary in $OUT/tests_NAME.txt; prints the return code, its own run time and the log's last
# line, then the first 20 failures: the step runCZ.sh and runDB.sh (docs/device-runs/2026-12-03/
# scripts) wrote out, for the scripts after them.
#   usage: build_tools/gpu_test_file.sh TEST_FILE TIMEOUT_S [pytest args...]    env: OUT
cd "$(dirname "$0")/.."
FILE=$1 LIMIT=$2; shift 2
NAME=$(basename "$FILE" .py)
mkdir -p "$OUT/logs"
FILES=$FILE OUT=$OUT/logs timeout "$LIMIT" bash build_tools/run_gpu_tests.sh "$@" \
  > "$OUT/tests_${NAME#test_}.txt" 2>&1
rc=$?
echo "$NAME rc $rc after $SECONDS s: $(tail -n 1 "$OUT/logs/$NAME.log")"
grep -h "FAILED\|Error" "$OUT/logs/$NAME.log" | head -n 20
exit $rc
