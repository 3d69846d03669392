"""Device smoke (ninth session): every gluon forward kernel of an archive, forced by name
through libattnpack, on five problems (MHA S300; GQA 4 S1000; Sq 300 != Sk 700; and two where a
persistent program serves several work tiles: B3 H16/4 S777, B8 H32/8 S512), O and LSE against fp32 math. Prints "ok <name>" per kernel.
    python3 smoke_archive.py ARCHIVE [SUBSTRING]"""
import math, sys, torch
from attnpack import runtime as rt
from attnpack.archive import read_archive

path, sub = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
names = [k["name"] for k in read_archive(path).kernels
         if k["name"].startswith("gluon/fwd") and sub in k["name"]]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}

def ref(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    s = q.float() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)

bad = 0
with rt.Bundle(path) as b:
    for name in names:
        print("start", name, flush=True)
        dtype, d, causal = name.split("/")[2].split("-")
        dt, D, causal = DT[dtype], int(d[1:]), causal == "causal"
        for (B, Hq, Hkv, Sq, Sk) in ((2, 4, 4, 300, 300), (1, 8, 2, 1000, 1000), (1, 4, 4, 300, 700),
                                 (3, 16, 4, 777, 777), (8, 32, 8, 512, 512)):
            q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dt)
            k, v = (torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dt) for _ in range(2))
            o = torch.full_like(q, float("nan"))
            lse = torch.full(q.shape[:3], float("nan"), device="cuda")
            rt.forward(b, q, k, v, causal=causal, out=o, lse=lse, kernel=name)
            torch.cuda.synchronize()
            ro, rl = ref(q, k, v, causal)
            eo, el = (o.float() - ro).abs().max().item(), (lse - rl).abs().max().item()
            if not (eo < 2e-2 and el < 1e-3):
                bad += 1
                print(f"BAD {name} {(B, Hq, Hkv, Sq, Sk)}: |O err| {eo}, |LSE err| {el}", flush=True)
        print("ok", name, flush=True)
print(f"{len(names)} kernels, {bad} bad problems")
sys.exit(1 if bad else 0)
