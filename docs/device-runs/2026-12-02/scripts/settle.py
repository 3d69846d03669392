"""Device diagnostic (ninth session): is the first bench row slow because it comes right after
the matmul ceiling? run_bench over the first two public rows (forward, bf16; attnpack and the
default), twice without the settling round and twice with it, in one process."""
import json
from attnpack.bench.command import DEFAULT_SHAPE_FILES
from attnpack.bench.run import run_bench
from attnpack.bench.shapes import plan_rows

planned = plan_rows([DEFAULT_SHAPE_FILES[0]], None, 2, None)
for settle in (False, False, True, True):
    r = run_bench(planned, ("fwd",), ("attnpack", "default"), 30, 5, [], None, settle=settle)
    for row in r["rows"]:
        a, d = row["backends"]["attnpack"]["ms"], row["backends"]["default"]["ms"]
        print(json.dumps({"settle": settle, "row": row["name"], "attnpack_us": round(a * 1e3, 1),
                          "default_us": round(d * 1e3, 1), "x_default": round(d / a, 3),
                          "matmul": round(r["matmul"]["tflops"])}), flush=True)
