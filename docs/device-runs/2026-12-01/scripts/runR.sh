#!/usr/bin/env bash
# Device call R (fifth session): the Gluon backward's dQ by TMA reduce-add (det0 tma1 configs)
# against the atomic det0 and the deterministic det1: correctness (tests/gpu/test_gluon_bwd.py,
# every declared backward kernel), speed (bench/gluon_bwd.py, every kernel timed per shape,
# --json keeps them all), and ncu of the tma1 dK/dV kernel at B4 H16 S4096 d128 bf16 full.
cd "$(dirname "$0")/.."
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
export PYTHONPATH=$PYTHONPATH:$PWD/tests/gpu
echo "git $ATTNPACK_COMMIT; runtime built at $SECONDS s: $(tail -1 $L/cmake.log)"
A=bench-archives
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd -j 16 -o $A/gluon-bwd > $L/build_bwd.log 2>&1
echo "gluon-bwd built rc $? at $SECONDS s: $(tail -1 $L/build_bwd.log)"
export ATTNPACK_GLUON_BWD_ARCHIVE=$(ls $PWD/$A/gluon-bwd/attnpack-*-sm_90.apk | head -1)
timeout 420 python3 -m pytest tests/gpu/test_gluon_bwd.py -q -rfE -p no:cacheprovider > $L/test_bwd.log 2>&1
echo "test rc $? at $SECONDS s"; tail -3 $L/test_bwd.log
grep -E "^FAILED|^ERROR" $L/test_bwd.log | head -20
timeout 360 python3 bench/gluon_bwd.py --archives $A --warmup 5 --reps 20 --json $L/bench.json > $L/bench.txt 2>&1
echo "bench rc $? at $SECONDS s"; grep "^#" $L/bench.txt
python3 - $L/bench.json <<'PY' || true
import json, sys, math
rows = json.load(open(sys.argv[1]))
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
for r in rows:
    b = r.get("bwd", {})
    best = lambda f: min(((ms, n) for n, ms in b.items() if f(n)), default=(None, None))
    a = best(lambda n: "det0" in n and "tma1" not in n)
    t = best(lambda n: "tma1" in n)
    d = best(lambda n: "det1" in n)
    c = r.get("bwd_ms", {}).get("cudnn")
    f = lambda x: "-" if x is None else f"{x:.3f}"
    print(f"{r['shape']:<34} atomic {f(a[0])} tma {f(t[0])} det1 {f(d[0])} cudnn {f(c)} "
          f"tma/atomic {f(a[0] / t[0] if a[0] and t[0] else None)} cudnn/best "
          f"{f(c / min(x for x in (a[0], t[0], d[0]) if x) if c else None)} wrong {list(r.get('wrong', {}))}")
PY
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
timeout 90 ncu --clock-control none -k regex:'^attn_bwd_dkdv_dq_tma$' --launch-skip 2 --launch-count 1 $S \
  python3 bench/profile_bwd.py $ATTNPACK_GLUON_BWD_ARCHIVE gluon/bwd/bf16-d128-full/M64_stages2_det0_tma1 > $L/ncu_tma.txt 2>&1
echo "ncu rc $? at $SECONDS s"
grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Warp Cycles Per Issued|CTA barrier|Registers Per" $L/ncu_tma.txt | head -12
tar czf $OUT/logsR.tgz -C /tmp logs
