"""Device (eleventh session): do our kernels run at lower SM clocks than cuDNN's under load?
Each backend runs one F.sdpa op back to back (no L2 flush) for about SECS seconds while
nvidia-smi samples the SM clock, power and the clock-event reasons every 20 ms. Per window:
time per call (CUDA events over the whole window), mean SM clock and power over the samples
inside it, and cycles per call = time x clock. Order A B A B per row. One JSON line per window."""
import json, subprocess, sys, time
import torch
from pathlib import Path
from attnpack.bench.measure import backend, make_inputs, sdpa_call
from attnpack.bench.shapes import load_shape_file
import attnpack.torch as attnpack_torch

SECS = 1.5
FIELDS = ["timestamp", "clocks.sm", "power.draw.instant", "temperature.gpu",
          "clocks_event_reasons.sw_power_cap", "clocks_event_reasons.hw_slowdown",
          "clocks_event_reasons.sw_thermal_slowdown"]


def smi_fields():
    for fields in (FIELDS, FIELDS[:2] + ["power.draw"] + FIELDS[3:], FIELDS[:4]):
        r = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(fields),
                            "--format=csv,noheader,nounits"], capture_output=True, text=True)
        if r.returncode == 0 and "Field" not in r.stdout:
            return fields
    return FIELDS[:2]


FIELDS = smi_fields()


def window(fn, secs=SECS):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
    n = max(5, int(secs / max(time.perf_counter() - t0, 1e-5)))
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + ",".join(FIELDS),
                            "--format=csv,noheader,nounits", "-lms", "20"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    w0 = time.time()
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    w1 = time.time()
    time.sleep(0.1)
    smi.terminate()
    out, _ = smi.communicate()
    ms = a.elapsed_time(b) / n
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        rows.append(parts)
    # samples from the middle of the window (skip its first and last 15 %)
    k = len(rows)
    mid = rows[int(k * 0.15): max(int(k * 0.85), int(k * 0.15) + 1)]

    def mean(i):
        vals = []
        for r in mid:
            try:
                vals.append(float(r[i]))
            except ValueError:
                pass
        return round(sum(vals) / len(vals), 1) if vals else None
    res = {"calls": n, "ms": round(ms, 4), "samples": len(mid), "wall_s": round(w1 - w0, 2)}
    for i, f in enumerate(FIELDS[1:], 1):
        if f.startswith("clocks_event"):
            res[f.split(".")[-1]] = sum(1 for r in mid if r[i].lower().startswith("active"))
        else:
            res[f] = mean(i)
    if res.get("clocks.sm"):
        res["Mcycles"] = round(ms * 1e-3 * res["clocks.sm"], 4)
    return res


def main():
    print(json.dumps({"fields": FIELDS}), flush=True)
    sets = {s.label: s for f in ("bench/shapes.json", "bench/model_shapes.json")
            for s in load_shape_file(Path(f)) if s.dtype == "bf16"}
    want = [("Llama-3.3-70B prefill B1 S8192", "fwd"), ("B2 H16 S8192 d128 causal", "fwd"),
            ("B2 H16 S8192 d128 full", "fwd"), ("B32 H16 S512 d128 causal", "fwd"),
            ("B16 H32 S1024 d64 causal", "fwd"), ("B4 H16 S4096 d128 full", "fwdbwd"),
            ("Llama-3.3-70B prefill B1 S8192", "fwdbwd")]
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    r = window(lambda: x @ x)
    r["TFLOP/s"] = round(2 * 8192 ** 3 / (r["ms"] * 1e-3) / 1e12, 1)
    print(json.dumps({"row": "matmul 8192^3", **r}), flush=True)
    for label, op in want:
        s = sets.get(label)
        if s is None:
            print(json.dumps({"row": label, "missing": True}), flush=True)
            continue
        q, k, v, do = make_inputs(s)
        for rnd, name in enumerate(("attnpack", "default", "attnpack", "default")):
            with backend(name):
                if name == "attnpack":
                    attnpack_torch.reset_stats()
                fn = sdpa_call(op, q, k, v, do, s.causal)
                r = window(fn)
                served = None
                if name == "attnpack":
                    st = attnpack_torch.stats()
                    served = sorted(st["calls"]) + sorted(st["fallbacks"])
            print(json.dumps({"row": label, "op": op, "backend": name, "round": rnd, **r,
                              "served": served}), flush=True)
    r = window(lambda: x @ x)
    r["TFLOP/s"] = round(2 * 8192 ** 3 / (r["ms"] * 1e-3) / 1e12, 1)
    print(json.dumps({"row": "matmul 8192^3 end", **r}), flush=True)


if __name__ == "__main__":
    main()
