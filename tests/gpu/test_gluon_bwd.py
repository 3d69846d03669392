"""The Gluon backward (aot/kernels/gluon_attn/bwd.py) on the GPU, every kernel forced by name.

Each backward kernel of `attnpack build --arch sm_90 --family gluon --op bwd --all` runs through
libattnpack (forced with `kernel=name`) on the forward's O and natural-log LSE, taken from the
fp32 math reference (O rounded to the input dtype), and dQ, dK, dV are compared with the fp32
math gradients. The bound is the triton family's (tests/gpu/test_triton_attn_jit.py): at most
2x the error of PyTorch's own flash backward (efficient where flash refuses the shape) against
the same reference, or a floor of one ulp of the largest reference value.

A deadlock (a barrier phase wrong) would hang the process, so every kernel first runs once in a
child process with a deadline: a hang fails the smoke test naming the kernel it hit.

The deterministic variants (config `det1`) must give bitwise-equal gradients over 4 runs.
Every launch gets a workspace filled with 0xff bytes (NaN), so no kernel passes by reading
memory it never wrote.

    ATTNPACK_RUNTIME_LIB=build-gpu/runtime/libattnpack.so \\
        python3 -m pytest tests/gpu/test_gluon_bwd.py -x -q
ATTNPACK_GLUON_BWD_ARCHIVE=<apk> uses an archive built beforehand (the same builder output).
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available() or torch.version.hip is not None:
    pytest.skip("needs a CUDA GPU (sm_90)", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the gluon family is built for sm_90 only", allow_module_level=True)

import test_triton_attn_jit as family_check

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.builder import BuildRequest, build_archives

SEQS = (1, 17, 128, 1000, 4096)
# (B, Hq, Hkv): GQA 1, 4 and 8; B = 3 runs on BSHD views (non-contiguous, as the runtime tests)
BATCH_HEADS = ((1, 8, 8), (1, 32, 8), (3, 8, 8), (3, 32, 8), (2, 16, 2))
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SMOKE_TIMEOUT_S = 60  # the child's start: torch, CUDA context, archive
# backward configs per key (family.BWD_CONFIGS): det0 with atomic or TMA dQ, 2 and 3 stages;
# det1 with qN 64 and 128; the persistent dK/dV ones (det0 tma1 at 2 and 3 stages, det1 qN64);
# at head dims 96 and 128 without a mask also TMA dQ queued behind dV and dK (`dqq`), 2 and 3
# stages; at head dims 96 and 128 the convert started early (`early`: tma1 and dqq, 2 and 3
# stages); at head dim 64 also two with 128 query rows a dK/dV step (tma1, and tma1
# persistent); at head dim 256 the two wide configs (bwd_wide.py), det0 and det1
CONFIGS_PER_KEY = 11
DQQ_CONFIGS_PER_KEY = 2
EARLY_CONFIGS_PER_KEY = 2  # and the dqq ones' two without a mask
M128_CONFIGS_PER_KEY = 2
WIDE_CONFIGS_PER_KEY = 2
HEAD_DIMS = (64, 96, 128, 256)  # 96 on 128-wide tiles, 256 on the wide kernel


def configs_per_key(head_dim, causal):
    if head_dim == 256:
        return WIDE_CONFIGS_PER_KEY
    queued = DQQ_CONFIGS_PER_KEY if head_dim in (96, 128) and not causal else 0
    early = EARLY_CONFIGS_PER_KEY * (1 + (queued > 0)) if head_dim in (96, 128) else 0
    rows128 = M128_CONFIGS_PER_KEY if head_dim == 64 else 0
    return CONFIGS_PER_KEY + queued + early + rows128


@pytest.fixture(scope="session")
def archive():
    """Every declared gluon backward variant for sm_90."""
    prebuilt = os.environ.get("ATTNPACK_GLUON_BWD_ARCHIVE")
    if prebuilt:
        return Path(prebuilt)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"gluon-bwd-{os.getpid()}"
    (path,) = build_archives(BuildRequest(archs=("sm_90",), out_dir=out, jobs=os.cpu_count() or 1,
                                          all_variants=True, families=("gluon",), ops=("bwd",)))
    return path


@pytest.fixture(autouse=True)
def poisoned_workspace(monkeypatch):
    """Every launch's workspace starts as 0xff bytes (NaN as float32), not as whatever the
    allocator held: a kernel that reads a workspace word before it or an earlier step of its
    call wrote it (a change that moves the accumulator's zeroing, docs/gluon-bwd.md, "The
    accumulator's zeroing moved into the dK/dV kernel") shows as NaN gradients or a wrong
    count instead of passing on memory that happened to be zero."""
    unpoisoned = rt._workspace

    def poisoned(bundle, problem, device):
        ws = unpoisoned(bundle, problem, device)
        if ws is not None:
            ws.fill_(0xFF)
        return ws
    monkeypatch.setattr(rt, "_workspace", poisoned)


def all_kernels():
    from attnpack.family import load_families
    return [v.name for v in load_families()["gluon"].all_variants("sm_90") if v.op == "bwd"]


def kernels_of(archive, dtype, head_dim, causal) -> list[str]:
    return [k["name"] for k in read_archive(archive).kernels
            if k["op"] == "bwd" and k["key"] == {"dtype": dtype, "head_dim": head_dim,
                                                  "causal": causal}]


def make_inputs(B, Hq, Hkv, Sq, Sk, D, dtype, seed):
    torch.manual_seed(seed)
    dt = DTYPES[dtype]

    def make(h, s):
        if B == 3:  # BSHD views
            return torch.randn(B, s, h, D, device="cuda", dtype=dt).transpose(1, 2)
        return torch.randn(B, h, s, D, device="cuda", dtype=dt)
    return make(Hq, Sq), make(Hkv, Sk), make(Hkv, Sk), make(Hq, Sq)


def run_kernel(bundle, name, q, k, v, do, o, lse, causal, scale):
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))  # poisoned
    rt.backward(bundle, do, q, k, v, o, lse, causal=causal, scale=scale, dq=dq, dk=dk, dv=dv,
                kernel=name)
    return dq, dk, dv


def test_every_declared_kernel_is_in_the_archive(archive):
    names = sorted(k["name"] for k in read_archive(archive).kernels if k["op"] == "bwd")
    # (fp16, bf16) x (64, 96, 128 | 256) x (full, causal); dqq at (96, 128) full; M128 at 64
    assert names == sorted(all_kernels())
    assert len(names) == (12 * CONFIGS_PER_KEY + 4 * DQQ_CONFIGS_PER_KEY
                          + 4 * WIDE_CONFIGS_PER_KEY + 4 * M128_CONFIGS_PER_KEY
                          + 4 * 3 * EARLY_CONFIGS_PER_KEY)


def test_smoke_every_kernel_finishes(archive):
    """One launch per kernel, all in one child process with a deadline: each finishes, no NaN,
    gradients roughly right. A hang (a wrong barrier phase) fails naming the kernel it hit."""
    script = textwrap.dedent(f"""
        import math, torch
        from attnpack import runtime as rt
        import test_triton_attn_jit as fc

        def run(b, name):
            dtype, d, causal = name.split("/")[2].split("-")
            dt, D = {{"bf16": torch.bfloat16, "fp16": torch.float16}}[dtype], int(d[1:])
            causal = causal == "causal"
            q, do = (torch.randn(2, 4, 300, D, device="cuda", dtype=dt) for _ in range(2))
            k, v = (torch.randn(2, 2, 333, D, device="cuda", dtype=dt) for _ in range(2))
            ref = fc.reference(q, k, v, do, causal, 1 / math.sqrt(D))
            grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
            rt.backward(b, do, q, k, v, ref[0].to(dt), ref[1], causal=causal,
                        dq=grads[0], dk=grads[1], dv=grads[2], kernel=name)
            torch.cuda.synchronize()
            for label, got, want in zip("qkv", grads, ref[2:]):
                err = (got.float() - want).abs().max().item()
                assert err < 5e-2 * max(1.0, want.abs().max().item()), f"d{{label}} {{err}}"

        with rt.Bundle({str(archive)!r}) as b:
            for name in {all_kernels()!r}:
                print("start", name, flush=True)
                try:
                    run(b, name)
                except AssertionError as e:  # the other kernels still run
                    print("FAIL", name, e, flush=True)
                    continue
                print("ok", name, flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    timeout = SMOKE_TIMEOUT_S + len(all_kernels())
    try:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        started = [line.split()[1] for line in out.splitlines() if line.startswith("start")]
        pytest.fail(f"no result after {timeout} s; last kernel started: "
                    f"{started[-1] if started else 'none'} (deadlock?)")
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL ")]
    assert not failed, "\n".join(failed)
    finished = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert len(finished) == len(all_kernels()), done.stdout[-2000:]


def _grid():
    """Every (Sq, Sk, head dim, causal) in both dtypes; (B, Hq, Hkv) rotates through its five
    settings so each dtype meets each of them."""
    cases, i = [], 0
    for sq in SEQS:
        for sk in SEQS:
            for d in HEAD_DIMS:
                for causal in (False, True):
                    for j, dtype in enumerate(DTYPES):
                        b, hq, hkv = BATCH_HEADS[(i + j) % len(BATCH_HEADS)]
                        cases.append(pytest.param(
                            b, hq, hkv, sq, sk, d, causal, dtype,
                            id=f"{dtype}-d{d}-{'causal' if causal else 'full'}"
                               f"-B{b}H{hq}/{hkv}-{sq}x{sk}"))
                    i += 1
    return cases


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype", _grid())
def test_gradients_match_math_sdpa(archive, B, Hq, Hkv, Sq, Sk, D, causal, dtype):
    q, k, v, do = make_inputs(B, Hq, Hkv, Sq, Sk, D, dtype, Sq * 7919 + Sk * 31 + D + Hq + B)
    scale = 1.0 / math.sqrt(D)
    ref = family_check.reference(q, k, v, do, causal, scale)
    backend, _, *theirs = family_check.pytorch_backend(q, k, v, do, causal, scale)
    o, lse = ref[0].to(q.dtype), ref[1].contiguous()
    names = kernels_of(archive, dtype, D, causal)
    assert len(names) == configs_per_key(D, causal)
    failures = []  # every kernel is checked, so one wrong config does not hide the others
    with rt.Bundle(archive) as bundle:
        for name in names:
            grads = run_kernel(bundle, name, q, k, v, do, o, lse, causal, scale)
            torch.cuda.synchronize()
            report = {"kernel": name, "yardstick": backend}
            for label, got, want, other in zip(("dq", "dk", "dv"), grads, ref[2:], theirs):
                if got.isnan().any():
                    failures.append(f"{label}: NaN (unwritten or bad masking); {report}")
                    continue
                err = (got.float() - want).abs().max().item()
                their_err = (other.float() - want).abs().max().item()
                bound = max(2 * their_err, family_check.FLOOR[dtype]
                            * max(want.abs().max().item(), family_check.MIN_SCALE))
                report[label] = f"{err:.2e} (theirs {their_err:.2e})"
                if not err <= bound:
                    failures.append(f"{label}: error {err:.3e} > bound {bound:.3e}; {report}")
            print(report)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("D", (64, 128, 256))
def test_deterministic_variants_are_bitwise_repeatable(archive, D, causal):
    """Every det1 kernel of the key, 4 runs on a GQA-4 problem: equal bits each time. (The
    fast variants' atomics make no such promise; their run-to-run spread is printed.)"""
    q, k, v, do = make_inputs(2, 32, 8, 2048, 2048, D, "bf16", 7)
    scale = 1.0 / math.sqrt(D)
    ref = family_check.reference(q, k, v, do, causal, scale)
    o, lse = ref[0].to(q.dtype), ref[1].contiguous()
    del ref
    names = kernels_of(archive, "bf16", D, causal)
    det = [n for n in names if "det1" in n]
    assert len(det) == (1 if D == 256 else 5)
    with rt.Bundle(archive) as bundle:
        for name in names:
            first = run_kernel(bundle, name, q, k, v, do, o, lse, causal, scale)
            spread = 0.0
            for _ in range(3):
                again = run_kernel(bundle, name, q, k, v, do, o, lse, causal, scale)
                torch.cuda.synchronize()
                for a, b in zip(first, again):
                    if name in det:
                        assert torch.equal(a, b), f"{name}: not bitwise repeatable"
                    spread = max(spread, (a.float() - b.float()).abs().max().item())
            print(f"{name}: largest run-to-run difference {spread:.3e}")


# Extreme values (docs/torch.md, "Large values"): queries at `value`, keys value·(1 − j/(2S)) so
# key 0 wins every row outright (and every key stays in the dtype's range), |q·k| up to ~1e37 in
# fp32. In bf16 the products and their sums are exact in fp32, so with a power-of-two scale (head
# dim 64) the LSE (float64 here) is exactly scale·max: P of the winner must come out exactly 1
# and every other P exactly 0, and dV is exact. fp16's 11-bit products sum past fp32's 24 bits,
# so there, as at head dim 128, only finiteness is asked: P is taken in natural units and
# clamped at 0 before the base change, so no row can overflow where the LSE rounded.
EXTREMES = [("bf16", 1e18, 64, 40), ("fp16", 65504.0, 64, 40), ("bf16", 133120.0, 128, 300),
            ("fp16", 65504.0, 128, 300), ("bf16", 133120.0, 256, 300)]


@pytest.mark.parametrize("dtype,value,D,S", EXTREMES, ids=[f"{c[0]}-{c[1]:g}-d{c[2]}-S{c[3]}"
                                                           for c in EXTREMES])
def test_extreme_values_give_exact_dv_and_finite_gradients(archive, dtype, value, D, S):
    dt = DTYPES[dtype]
    q = torch.full((1, 2, S, D), value, device="cuda", dtype=dt)
    keys = (value * (1 - torch.arange(S, device="cuda", dtype=torch.float64) / (2 * S))).to(dt)
    k = keys[None, None, :, None].expand(1, 2, S, D).contiguous()
    torch.manual_seed(11)
    v, do = (torch.randn(1, 2, S, D, device="cuda", dtype=dt) for _ in range(2))
    scale = 1.0 / math.sqrt(D)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1)
    o = (p @ v.double()).to(dt)
    want_dv = p.transpose(-1, -2) @ do.double()
    failures = []
    with rt.Bundle(archive) as bundle:
        for name in kernels_of(archive, dtype, D, False):
            dq, dk, dv = run_kernel(bundle, name, q, k, v, do, o, lse.float().contiguous(),
                                    False, scale)
            torch.cuda.synchronize()
            for label, got in (("dq", dq), ("dk", dk), ("dv", dv)):
                if not torch.isfinite(got).all():
                    failures.append(f"{name}: {label} not finite")
            if D == 64 and dtype == "bf16":
                err = (dv.double() - want_dv).abs().max().item()
                ulp = torch.finfo(dt).eps
                if not err <= ulp * max(1.0, want_dv.abs().max().item()):
                    failures.append(f"{name}: dv error {err:.3g}")
    assert not failures, "\n".join(failures)
