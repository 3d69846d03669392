"""Device diagnostic (ninth session): why short forward rows time slower in `attnpack bench`
(L2 flush before every rep) than under ncu. For a few rows, the median of 30 reps of:
F.sdpa through attnpack and through cuDNN, each with the bench's flush and without; the
runtime alone (libattnpack, preallocated O and LSE, the same kernel); and the host time of one
call (200 calls queued without a sync on a tiny shape, wall clock)."""
import json, os, sys, time
import torch
import torch.nn.functional as F
import attnpack.torch as at
from attnpack import runtime as rt
from attnpack.bench.timing import Timer

ROWS = [(32, 16, 16, 512, 128, False), (32, 16, 16, 512, 128, True), (16, 16, 16, 1024, 128, False),
        (64, 32, 8, 256, 128, True), (2, 16, 8, 4096, 256, True)]
flush = Timer(reps=30, warmup=5)
noflush = Timer(reps=30, warmup=5)
noflush.flush = torch.empty(1 << 10, dtype=torch.uint8, device="cuda")
bundle = rt.Bundle(directory=os.environ["ATTNPACK_BUNDLE_DIR"])
out = []
for B, Hq, Hkv, S, D, causal in ROWS:
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kw = {"is_causal": causal, "enable_gqa": Hq != Hkv}
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
    r = {"row": f"B{B} H{Hq}/{Hkv} S{S} d{D} {'causal' if causal else 'full'}"}
    for name, t in (("flush", flush), ("noflush", noflush)):
        r[f"cudnn_{name}_us"] = round(t.median_ms(sdpa) * 1e3, 1)
        at.enable(); at.reset_stats()
        r[f"attnpack_{name}_us"] = round(t.median_ms(sdpa) * 1e3, 1)
        st = at.stats(); at.disable()
    r["served"] = str(st)[:300]
    o = torch.empty_like(q); lse = torch.empty((B, Hq, S), device="cuda", dtype=torch.float32)
    call = lambda: rt.forward(bundle, q, k, v, causal=causal, out=o, lse=lse)
    r["runtime_flush_us"] = round(flush.median_ms(call) * 1e3, 1)
    r["runtime_noflush_us"] = round(noflush.median_ms(call) * 1e3, 1)
    print(json.dumps(r), flush=True); out.append(r)
# host time per call: a tiny shape, 200 calls queued, wall clock
q = torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16)
for name in ("cudnn", "attnpack"):
    if name == "attnpack": at.enable()
    for _ in range(20): F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(200): F.scaled_dot_product_attention(q, q, q, is_causal=True)
    host = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    print(json.dumps({"host_us_per_call": name, "us": round(host, 1)}), flush=True)
    at.disable()
