"""Device (tenth session): does the order of the backends within a bench row move attnpack's
ratio? Forward rows of both sets, measured with the bench's own measure_shape and Timer:
(a) one round, attnpack first (the bench before 45bd380); (b) one round, attnpack last;
(c) two rounds ABBA (the bench now). Two passes of a, b, c. Prints one JSON line per row and
pass: attnpack and default ms and their ratio under each order."""
import json, sys
import torch
from attnpack.bench.measure import measure_shape
from pathlib import Path
from attnpack.bench.shapes import load_shape_file
from attnpack.bench.timing import Timer, matmul_tflops

WANT = ["B32 H16 S512 d128 full", "B2 H16 S8192 d128 full", "B4 H16 S4096 d128 full",
        "B1 H16 S16384 d128 full", "B2 H16 S8192 d128 causal", "B4 H32/8 S4096 d128 causal",
        "B16 H32 S1024 d64 causal", "B8 H32 S2048 d64 full"]
BACKENDS = ("attnpack", "default", "flash", "efficient")
shapes = {s.label: s for s in load_shape_file(Path("bench/shapes.json")) if s.dtype == "bf16"}
timer = Timer(reps=30, warmup=5)
print(json.dumps({"matmul": matmul_tflops(timer)}), flush=True)
measure_shape(shapes[WANT[0]], ["fwd"], BACKENDS, timer, 1)  # settle
for p in range(2):
    for label in WANT:
        s = shapes[label]
        row = {"pass": p, "row": label}
        for tag, backends, rounds in (("first", BACKENDS, 1), ("last", BACKENDS[::-1], 1),
                                      ("abba", BACKENDS, 2)):
            b = measure_shape(s, ["fwd"], backends, timer, rounds)["fwd"]["backends"]
            a, d = b["attnpack"]["ms"], b["default"]["ms"]
            row[tag] = [round(a * 1e3, 1), round(d * 1e3, 1), round(d / a, 3)]
        print(json.dumps(row), flush=True)
print(json.dumps({"matmul_end": matmul_tflops(timer)}), flush=True)
