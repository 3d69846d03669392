#!/usr/bin/env bash
# Prepared in the thirteenth session for the next one (not run): the Gluon backward's causal
# grids with the heads on x (scripts/bwd_lpt.patch), so every (batch, head)'s longest block
# starts before any shorter one across the whole grid (a list-scheduling model of 132 SMs:
# GQA-8 dK/dV grids of 256-1024 programs finish at 1.14-1.38x the ideal head by head, 1.01x
# longest first). Old and patched bf16 Gluon backward archives; test_gluon_bwd.py on the
# patched tree; bench/kernel_ab.py --op bwd --cycles over both shape sets. /tmp/bo_state says
# "lpt" if every test passed and the fastest kernel per row is >= 0.3 % faster.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
rm -rf /tmp/old-tree && mkdir -p /tmp/old-tree && cp -r aot /tmp/old-tree/
grep -q "_block_and_head" aot/kernels/gluon_attn/bwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_lpt.patch || { echo "patch failed"; exit 1; }
FILES="tests/gpu/test_gluon_bwd.py" OUT=$L timeout 320 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
trc=$?; echo "tests rc $trc at $SECONDS s"; tail -n 1 $L/summary.txt
grep -E "FAILED|^E  " $L/test_gluon_bwd.log | cut -c1-600 | head -200 > $OUT/tests_fail.txt
tail -n 3 $L/test_gluon_bwd.log >> $OUT/tests_fail.txt
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
  --kernels /tmp/old-tree/aot/kernels -o /tmp/old -j 16 > $L/build_old.log 2>&1 || echo "build old failed"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 -o /tmp/lpt -j 16 > $L/build_lpt.log 2>&1 || echo "build lpt failed"
echo "archives at $SECONDS s"
timeout $((570 - SECONDS)) python3 bench/kernel_ab.py --op bwd --archive old=/tmp/old/$A --archive lpt=/tmp/lpt/$A \
  --cycles --reps 10 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $OUT/ab_bwd_lpt.json > $OUT/ab_bwd_lpt.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 2 $OUT/ab_bwd_lpt.txt
# the geomean line, or (if the A/B ran out of time) the geomean of the rows it finished
g=$(python3 - $OUT/ab_bwd_lpt.txt <<'PY'
import math, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"lpt/old, best kernel per shape: geomean ([0-9.]+)", text)
rows = [float(x) for x in re.findall(r"\| lpt +[0-9.]+ \(([0-9.]+),", text)]
print(m.group(1) if m else (f"{math.exp(sum(map(math.log, rows)) / len(rows)):.3f}" if rows else 0))
PY
)
if [ $trc = 0 ] && grep -q " passed" $L/summary.txt && python3 -c "import sys; sys.exit(0 if float('${g:-0}') >= 1.003 else 1)"; then
  echo "lpt" > /tmp/bo_state
else
  echo "old" > /tmp/bo_state
fi
echo "state $(cat /tmp/bo_state) (geomean ${g:-none})" | tee $OUT/state.txt
