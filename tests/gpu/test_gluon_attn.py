"""The Gluon ping-pong forward (aot/kernels/gluon_attn) on the GPU, every kernel forced by name.

Each kernel of `attnpack build --arch sm_90 --family gluon --all` runs through libattnpack (forced with
`kernel=name`) and is compared, O and LSE, against fp32 math SDPA over the runtime test grid;
the Triton family's backward (a second archive, through the runtime too) is then given the
Gluon forward's O and LSE and its gradients are checked, so the LSE contract holds across
families. Bounds are the triton family's (tests/gpu/test_triton_attn_jit.py).

A deadlock (a barrier phase wrong) would hang the process, so every kernel first runs once in a
child process with a deadline: a hang fails the smoke test naming the kernel it hit.

    ATTNPACK_RUNTIME_LIB=build-gpu/runtime/libattnpack.so \\
        python3 -m pytest tests/gpu/test_gluon_attn.py -x -q
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

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
# 96 runs on 128-wide tiles whose columns past the tensor's 96 TMA zero-fills (family.tile_dim)
HEAD_DIMS = (64, 96, 128, 256)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SMOKE_TIMEOUT_S = 60  # the child's start: torch, CUDA context, archive


@pytest.fixture(scope="session")
def archives(tmp_path_factory):
    """(gluon archive: every declared variant; triton archive: the default backward)."""
    jobs = os.cpu_count() or 1
    gluon_dir, triton_dir = tmp_path_factory.mktemp("gluon"), tmp_path_factory.mktemp("triton")
    (gluon,) = build_archives(BuildRequest(archs=("sm_90",), out_dir=gluon_dir, jobs=jobs,
                                           all_variants=True, families=("gluon",),
                                           ops=("fwd",)))
    (triton,) = build_archives(BuildRequest(archs=("sm_90",), out_dir=triton_dir, jobs=jobs,
                                            families=("triton",), ops=("bwd",),
                                            head_dims=HEAD_DIMS))
    return gluon, triton


def gluon_kernels(archive, dtype, head_dim, causal) -> list[str]:
    return [k["name"] for k in read_archive(archive).kernels
            if k["key"] == {"dtype": dtype, "head_dim": head_dim, "causal": causal}]


def all_kernels():
    from attnpack.family import load_families
    # the forwards (the family's backward has tests/gpu/test_gluon_bwd.py)
    return [v.name for v in load_families()["gluon"].all_variants("sm_90") if v.op == "fwd"]


def test_smoke_every_kernel_finishes(archives):
    """One launch per kernel, all in one child process with a deadline: each finishes, no NaN,
    O and LSE roughly right. A hang (a wrong barrier phase) fails naming the kernel it hit; a
    wrong result is reported and the child goes on to the next kernel, so one run names every
    kernel that is off (after a CUDA fault the ones behind it fail too: the first is the one)."""
    gluon, _ = archives
    script = textwrap.dedent(f"""
        import math, torch
        from attnpack import runtime as rt
        import test_triton_attn_jit as fc
        with rt.Bundle({str(gluon)!r}) as b:
            for name in {all_kernels()!r}:
                print("start", name, flush=True)
                dtype, d, causal = name.split("/")[2].split("-")
                dt, D = {{"bf16": torch.bfloat16, "fp16": torch.float16}}[dtype], int(d[1:])
                causal = causal == "causal"
                q, k, v = (torch.randn(2, 4, 300, D, device="cuda", dtype=dt) for _ in range(3))
                o = torch.full_like(q, float("nan"))
                lse = torch.full(q.shape[:3], float("nan"), device="cuda")
                rt.forward(b, q, k, v, causal=causal, out=o, lse=lse, kernel=name)
                torch.cuda.synchronize()
                ref = fc.reference(q, k, v, torch.zeros_like(q), causal, 1 / math.sqrt(D))
                eo, el = (o.float() - ref[0]).abs().max().item(), (lse - ref[1]).abs().max().item()
                if eo < 2e-2 and el < 1e-3:  # NaN compares False: reported
                    print("ok", name, flush=True)
                else:
                    print("bad", name, f"|O err| {{eo}}, |LSE err| {{el}}", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    timeout = SMOKE_TIMEOUT_S + 5 * len(all_kernels())
    try:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        started = [line.split()[1] for line in out.splitlines() if line.startswith("start")]
        pytest.fail(f"no result after {timeout} s; last kernel started: "
                    f"{started[-1] if started else 'none'} (deadlock?)")
    bad = [line for line in done.stdout.splitlines() if line.startswith("bad ")]
    assert not bad, "\n".join(bad)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    finished = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert len(finished) == len(all_kernels()), done.stdout[-2000:]


def _grid():
    cases = []
    for B in (1, 3):
        for Hq, Hkv in ((8, 8), (32, 8)):
            for sq in SEQS:
                for sk in SEQS:
                    for d in HEAD_DIMS:
                        for causal in (False, True):
                            for dtype in ("bf16", "fp16"):
                                cases.append((B, Hq, Hkv, sq, sk, d, causal, dtype))
    return cases


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype", _grid())
def test_forward_and_triton_backward_match_math_sdpa(archives, B, Hq, Hkv, Sq, Sk, D, causal,
                                                     dtype):
    gluon, triton = archives
    torch.manual_seed(Sq * 7919 + Sk * 31 + D + Hq + B)
    dt, scale = DTYPES[dtype], 1.0 / math.sqrt(D)

    def make(h, s):  # B=3: BSHD views (non-contiguous), as the runtime tests do
        if B == 3:
            return torch.randn(B, s, h, D, device="cuda", dtype=dt).transpose(1, 2)
        return torch.randn(B, h, s, D, device="cuda", dtype=dt)

    q, k, v, do = make(Hq, Sq), make(Hkv, Sk), make(Hkv, Sk), make(Hq, Sq)
    ref = family_check.reference(q, k, v, do, causal, scale)
    backend, *theirs = family_check.pytorch_backend(q, k, v, do, causal, scale)
    names = gluon_kernels(gluon, dtype, D, causal)
    assert len(names) == len([n for n in all_kernels()
                              if n.split("/")[2] == f"{dtype}-d{D}-{'causal' if causal else 'full'}"])
    with rt.Bundle(gluon) as fwd_bundle, rt.Bundle(triton) as bwd_bundle:
        for name in names:
            o = torch.full_like(q, float("nan"))  # poisoned: unwritten elements fail
            lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
            rt.forward(fwd_bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse,
                       kernel=name)
            dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
            rt.backward(bwd_bundle, do, q, k, v, o, lse, causal=causal, scale=scale,
                        dq=dq, dk=dk, dv=dv)
            torch.cuda.synchronize()
            report = {"kernel": name, "yardstick": backend}
            for label, got in zip(("o", "lse", "dq", "dk", "dv"), (o, lse, dq, dk, dv)):
                assert not got.isnan().any(), f"{label}: NaN (unwritten or bad masking); {report}"
            lse_err = (lse - ref[1]).abs().max().item()
            report["lse"] = lse_err
            assert lse_err <= family_check.LSE_TOL * max(1.0, ref[1].abs().max().item()), report
            for label, got, want, other in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv),
                                               (ref[0], *ref[2:]), theirs):
                err = (got.float() - want).abs().max().item()
                their_err = (other.float() - want).abs().max().item()
                bound = max(2 * their_err, family_check.FLOOR[dtype]
                            * max(want.abs().max().item(), family_check.MIN_SCALE))
                report[label] = f"{err:.2e} (theirs {their_err:.2e})"
                assert err <= bound, f"{label}: error {err:.3e} > bound {bound:.3e}; {report}"


# Persistent programs take work units round-robin; a unit pairs row block i of a head with
# row block R-1-i (fwd._unit_tiles), and the middle one of an odd R is a unit alone. These
# shapes have odd and even R above 1 (S 384, 640: R 3, 5; S 1024: R 8; with three consumers'
# 192-row tiles R 2, 4, 6, and the last tile's later consumers idle at S 640 and 1024; with
# four consumers' 256-row tiles R 2, 3, 4, and consumers 2 and 3 idle at S 384 and 640) and more
# units than an H200 has programs, so every program serves several units across heads and
# batches.
@pytest.mark.parametrize("B,Hq,Hkv,S", [(5, 7, 7, 640), (3, 8, 2, 384), (9, 16, 4, 1024)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_persistent_units_cover_every_row_block(archives, B, Hq, Hkv, S, causal, D):
    gluon, _ = archives
    torch.manual_seed(B * S + Hq + D)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = 1.0 / math.sqrt(D)
    ref = family_check.reference(q, k, v, torch.zeros_like(q), causal, scale)
    names = [n for n in gluon_kernels(gluon, "bf16", D, causal) if "_persistent1" in n]
    assert names, "no persistent kernel for this key"
    with rt.Bundle(gluon) as bundle:
        for name in names:
            o = torch.full_like(q, float("nan"))  # poisoned: a row block no unit covered fails
            lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
            rt.forward(bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse, kernel=name)
            torch.cuda.synchronize()
            o_err = (o.float() - ref[0]).abs().max().item()  # NaN compares False: fails
            lse_err = (lse - ref[1]).abs().max().item()
            bound = family_check.FLOOR["bf16"] * max(ref[0].abs().max().item(),
                                                     family_check.MIN_SCALE)
            assert o_err <= bound, f"{name}: |O err| {o_err:.3e} > {bound:.3e}"
            assert lse_err <= family_check.LSE_TOL * max(1.0, ref[1].abs().max().item()), \
                f"{name}: |LSE err| {lse_err:.3e}"


# Keys scaled up along the sequence make every row's max grow from key tile to key tile, by a
# few units of the exponent (ramps 0.02 and 0.1) and by hundreds, into scores of thousands (ramp
# 3.0): O's rescale by alpha on each tile, and p against the newest max, carry the result.
# (A forward that rescaled O only where a row's max grew by more than 2^8 in p failed here and
# in the grid above: docs/gluon-family.md, item 10.)
@pytest.mark.parametrize("ramp", [0.02, 0.1, 3.0])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_row_maxima_growing_along_the_keys(archives, ramp, causal, D):
    gluon, _ = archives
    torch.manual_seed(D + int(ramp * 100))
    B, H, S = 2, 4, 1000
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    growth = 1 + ramp * torch.arange(S, device="cuda", dtype=torch.float32)
    k = (torch.randn(B, H, S, D, device="cuda") * growth[:, None]).to(torch.bfloat16)
    v = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(D)
    ref = family_check.reference(q, k, v, torch.zeros_like(q), causal, scale)
    names = gluon_kernels(gluon, "bf16", D, causal)
    with rt.Bundle(gluon) as bundle:
        for name in names:
            o = torch.full_like(q, float("nan"))
            lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
            rt.forward(bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse, kernel=name)
            torch.cuda.synchronize()
            o_err = (o.float() - ref[0]).abs().max().item()  # NaN compares False: fails
            lse_err = ((lse - ref[1]).abs() / ref[1].abs().clamp(min=1.0)).max().item()
            bound = family_check.FLOOR["bf16"] * max(ref[0].abs().max().item(),
                                                     family_check.MIN_SCALE)
            assert o_err <= bound, f"{name}: |O err| {o_err:.3e} > {bound:.3e}"
            assert lse_err <= family_check.LSE_TOL, f"{name}: relative |LSE err| {lse_err:.3e}"


def _tail_pieces(tiles, programs, n_kv):
    """fwd._tail_split's count of pieces: the shortest last round, the fewest pieces of
    those, each at least a key tile, at most two per program."""
    rest = tiles % programs
    fits = [k for k in range(1, 5) if k == 1 or (k <= n_kv and rest * k <= 2 * programs)]
    return min(fits, key=lambda k: (-(-rest * k // programs) / k, k)) if rest else 1


# The split tail (fwd.py, TAIL): work tiles past the last whole round of this GPU's programs are
# cut along their keys into 2-4 pieces that different programs compute side by side and merge
# through the workspace (a counter per warp says which warp merges). These tile counts leave
# last rounds of every kind against the device's SM count: a few tiles (quarters), half the
# programs and a bit (thirds or halves), and fewer tiles than programs with no whole round.
# Each kernel runs five times: the merge reads the pieces in a fixed order, so O and the LSE
# are bitwise the same whichever warp merged (a race in the counters would show here first).
@pytest.mark.parametrize("extra", ["few", "half", "below"])
@pytest.mark.parametrize("D", [64, 96, 128])
def test_split_tail_pieces_merge_to_one_result(archives, D, extra):
    gluon, _ = archives
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    Hq, Hkv, S = 4, 2, 1000
    names = [n for n in gluon_kernels(gluon, "bf16", D, False) if n.endswith("_tail1")]
    assert names, "no split-tail kernel for this key"
    scale = 1.0 / math.sqrt(D)
    with rt.Bundle(gluon) as bundle:
        for name in names:
            consumers = int(name.split("_consumers")[1][0]) if "_consumers" in name else 2
            row_blocks = -(-S // (64 * consumers))
            n_kv = -(-S // int(name.split("_N")[1].split("_")[0]))
            least = {"few": programs + 1, "half": 2 * programs + programs // 2,
                     "below": 1}[extra]
            B = next(b for b in range(1, 200) if b * Hq * row_blocks >= least
                     and _tail_pieces(b * Hq * row_blocks, programs, n_kv) > 1)
            torch.manual_seed(D + B)
            q = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            ref = family_check.reference(q, k, v, torch.zeros_like(q), False, scale)
            runs = []
            for _ in range(5):
                o = torch.full_like(q, float("nan"))  # poisoned: a row no warp merged fails
                lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
                rt.forward(bundle, q, k, v, causal=False, scale=scale, out=o, lse=lse,
                           kernel=name)
                torch.cuda.synchronize()
                runs.append((o, lse))
            o, lse = runs[0]
            o_err = (o.float() - ref[0]).abs().max().item()  # NaN compares False: fails
            lse_err = (lse - ref[1]).abs().max().item()
            bound = family_check.FLOOR["bf16"] * max(ref[0].abs().max().item(),
                                                     family_check.MIN_SCALE)
            report = f"{name}, B={B} ({B * Hq * row_blocks} tiles on {programs} programs)"
            assert o_err <= bound, f"{report}: |O err| {o_err:.3e} > {bound:.3e}"
            assert lse_err <= family_check.LSE_TOL * max(1.0, ref[1].abs().max().item()), \
                f"{report}: |LSE err| {lse_err:.3e}"
            for o_again, lse_again in runs[1:]:
                assert torch.equal(o_again, o) and torch.equal(lse_again, lse), \
                    f"{report}: a second run differs"
