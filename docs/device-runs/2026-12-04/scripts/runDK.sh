#!/usr/bin/env bash
# Twenty-fourth session. run105 (runDJ.sh, two rounds of 15 calls a backend) showed attnpack's
# calls on the long forward rows up to 12 % slower in the round it ran last, right after
# cuDNN's forward + backward. The bench now takes turns call by call (measure.TURN_CALLS = 1),
# one op after the other. This run: the host's cost of switching attnpack on and off (what a
# call-by-call turn adds on the host), then the bench with turns of one call, then with turns
# of 15 calls (two rounds, op by op) in the same process order, both sets, fwd and fwdbwd, bf16.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=/tmp/bench-tree-logs; mkdir -p $L
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle \
  ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so \
  ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
python3 - <<'PY' 2>&1 | tee "$OUT/switch.txt"
import time, statistics, torch, torch.nn.functional as F
import attnpack.torch as at
q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
at.enable(); F.scaled_dot_product_attention(q, q, q); at.disable(); torch.cuda.synchronize()
def forced():
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        pass
for what, fn in (("enable+disable", lambda: (at.enable(), at.disable())),
                 ("sdpa_kernel(flash) enter+exit", forced)):
    ts = []
    for _ in range(200):
        t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e6)
    print(f"{what}: median {statistics.median(ts):.1f} us, max {max(ts):.1f} us")
PY
for n in 1 15; do
  timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic \
    --no-plots --turn-calls $n --out /tmp/bench$n > "$OUT/bench_turn$n.txt" 2>&1
  echo "bench --turn-calls $n rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench$n/report.md | head -12
  sed -n '/^## The halves apart/,/^## Shapes/p' /tmp/bench$n/report.md | head -n 12
  cp /tmp/bench$n/results.json "$OUT/results_turn$n.json"; cp /tmp/bench$n/report.md "$OUT/report_turn$n.md"
done
