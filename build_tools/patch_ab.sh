#!/usr/bin/env bash
# A kernel change given as a patch, weighed on a GPU machine in one call: the patched tree's GPU
# tests, then the old and the patched kernels of one family, op and dtype compared by cycles
# (bench/kernel_ab.py --cycles, both shape sets, each kernel checked against cuDNN first), and
# a verdict: NAME if every test passed and the fastest kernel per row is MIN_GAIN faster by
# geomean (over the rows finished, if the time ran out), else "old". The verdict goes to $OUT,
# to /tmp/ab_state and to /tmp/ab_state_NAME: a later call on the same machine applies the
# patch again where that reads NAME, to tune or bench the kept change
# (docs/device-runs/2026-12-02/scripts/runCA.sh).
#   usage: build_tools/patch_ab.sh PATCH OP NAME TEST_FILE [pytest args...]
#   env: OUT (default ./gpu-logs/ab-NAME), FAMILY (gluon), DTYPE (bf16), REPS (10),
#        MIN_GAIN (1.003), BUDGET_S (570: the A/B stops there, seconds from the start),
#        KERNEL_FILTER (a regular expression, re.search: only kernel names it matches, e.g.
#        "causal" for a causal-only change), STOP_ON_TEST_FAIL (1: no A/B after a failed test,
#        for a change whose broken kernel could hang the timing)
# The patch is applied to this tree in place (the old side is built from a copy made first).
cd "$(dirname "$0")/.."
PATCH=$1 OP=$2 NAME=$3 TESTS=$4; shift 4
OUT=${OUT:-$PWD/gpu-logs/ab-$NAME}; L=$OUT/logs; mkdir -p "$L"
export PYTHONUNBUFFERED=1
rm -rf /tmp/ab-old && mkdir -p /tmp/ab-old && cp -r aot /tmp/ab-old/
if ! patch -p1 -R -f --dry-run < "$PATCH" >/dev/null 2>&1; then
  patch -p1 < "$PATCH" || { echo "$PATCH does not apply"; exit 1; }
fi
FILES="$TESTS" OUT=$L timeout 320 bash build_tools/run_gpu_tests.sh "$@" > "$L/summary.txt" 2>&1
trc=$?; echo "tests rc $trc at $SECONDS s"; tail -n 1 "$L/summary.txt"
log=$L/$(basename "$TESTS" .py).log
{ grep -E "FAILED|^E  " "$log" | cut -c1-600 | head -200; tail -n 3 "$log"; } > "$OUT/tests.txt"
if [ $trc != 0 ] && [ "${STOP_ON_TEST_FAIL:-0}" = 1 ]; then
  echo old > /tmp/ab_state; cp /tmp/ab_state "/tmp/ab_state_$NAME"
  echo "old $PATCH (tests rc $trc, no A/B: STOP_ON_TEST_FAIL)" | tee "$OUT/verdict.txt"; exit 0
fi
. build_tools/runtime_env.sh "$L"
A=attnpack-0.1.0-sm_90.apk
for side in old "$NAME"; do
  kernels=(); [ "$side" = old ] && kernels=(--kernels /tmp/ab-old/aot/kernels)
  python3 -m attnpack.cli build --arch sm_90 --all --family "${FAMILY:-gluon}" --op "$OP" \
    --dtype "${DTYPE:-bf16}" "${kernels[@]}" -o "/tmp/ab-$side-apk" -j "$(nproc)" \
    > "$L/build_$side.log" 2>&1 || echo "build $side failed"
done
echo "archives at $SECONDS s"
timeout $((${BUDGET_S:-570} - SECONDS)) python3 bench/kernel_ab.py --op "$OP" \
  --kernel-filter "${KERNEL_FILTER:-}" \
  --archive old=/tmp/ab-old-apk/$A --archive "$NAME=/tmp/ab-$NAME-apk/$A" --cycles \
  --reps "${REPS:-10}" --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json "$OUT/ab_$NAME.json" > "$OUT/ab_$NAME.txt" 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 2 "$OUT/ab_$NAME.txt"
g=$(python3 - "$OUT/ab_$NAME.txt" "$NAME" <<'PY'
import math, re, sys
text, name = open(sys.argv[1]).read(), re.escape(sys.argv[2])
m = re.search(name + r"/old, best kernel per shape: geomean ([0-9.]+)", text)
rows = [float(x) for x in re.findall(r"\| " + name + r" +[0-9.]+ \(([0-9.]+),", text)]
print(m.group(1) if m else f"{math.exp(sum(map(math.log, rows)) / len(rows)):.3f}" if rows else 0)
PY
)
if [ $trc = 0 ] && grep -q " passed" "$L/summary.txt" && \
   python3 -c "import sys; sys.exit(float('${g:-0}') < float('${MIN_GAIN:-1.003}'))"; then
  echo "$NAME" > /tmp/ab_state
else
  echo old > /tmp/ab_state
fi
cp /tmp/ab_state "/tmp/ab_state_$NAME"
echo "$(cat /tmp/ab_state) $PATCH (tests rc $trc, geomean ${g:-none})" | tee "$OUT/verdict.txt"
