"""attnpack.torch on a GPU: plain F.scaled_dot_product_attention, forward and backward, served
by the bundle built for this GPU (build_tools/run_gpu_tests.sh sets ATTNPACK_BUNDLE_DIR).

- parity of output and all three gradients with an fp32 reference over the issue's grid, within
  2x the error of PyTorch's own kernel (flash, or efficient where flash refuses) plus one ulp;
- every fallback reason, each giving PyTorch's own answer;
- routing past cuDNN, torch.compile, CUDA-graph capture/replay, autocast, streams, devices,
  deterministic mode, ATTNPACK_LOG, a missing bundle, and a small transformers Llama;
- a GPU model's own tuning entries (tuning.by_gpu) serving on that GPU only.
Skipped without CUDA. About 2-3 minutes on an H200.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attnpack.torch as attnpack_torch  # noqa: E402
from attnpack.torch import _build, _extension  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEV = "cuda"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ULP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}  # relative, of the reference's max


@pytest.fixture(scope="module", autouse=True)
def extension():
    """The built extension (run_gpu_tests.sh builds it); built here if it is missing."""
    try:
        ext = _extension.load()
    except _extension.ExtensionError:
        lib = _build.build(REPO / "build-gpu" / "torch-tests")
        os.environ["ATTNPACK_TORCH_LIB"] = str(lib)
        ext = _extension.load()
    info = ext.bundle_info(torch.cuda.current_device())
    assert info["ok"], f"no bundle for this GPU: {info} (ATTNPACK_BUNDLE_DIR={os.environ.get('ATTNPACK_BUNDLE_DIR')})"
    attnpack_torch.enable()
    attnpack_torch.preload()
    yield ext
    attnpack_torch.disable()


@contextlib.contextmanager
def native():
    """PyTorch without attnpack, for the answers to compare against."""
    attnpack_torch.disable()
    try:
        yield
    finally:
        attnpack_torch.enable()


@contextlib.contextmanager
def counted():
    """Yields a dict filled, on exit, with the attnpack stats of the block."""
    attnpack_torch.reset_stats()
    result = {}
    yield result
    torch.cuda.synchronize()
    result.update(attnpack_torch.stats())


def served(stats, op):
    return stats["ops"][op]["served"]


def make(b, hq, hkv, sq, sk, d, dtype, seed=0, grad=True):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(b, hq, sq, d, device=DEV, dtype=dtype, generator=g)
    k = torch.randn(b, hkv, sk, d, device=DEV, dtype=dtype, generator=g)
    v = torch.randn(b, hkv, sk, d, device=DEV, dtype=dtype, generator=g)
    do = torch.randn(b, hq, sq, d, device=DEV, dtype=dtype, generator=g)
    return [t.requires_grad_(grad) for t in (q, k, v)] + [do]


def layout(t):
    """Strides that matter: a size-1 dim's stride is never stepped, and kernels set it freely."""
    return tuple(stride for stride, size in zip(t.stride(), t.shape) if size != 1)


def fwd_bwd(q, k, v, do, **kw):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    out.backward(do)
    return out.detach(), q.grad, k.grad, v.grad


def reference(q, k, v, do, causal):
    """fp32 math, K/V repeated per group, causal aligned top-left (F.sdpa's meaning)."""
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    ke, ve = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    s = (qf @ ke.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=DEV).tril()
        s = s.masked_fill(~keep, float("-inf"))
    out = s.softmax(-1) @ ve
    out.backward(do.float())
    return out.detach(), qf.grad, kf.grad, vf.grad


def reference_by_kv_head(q, k, v, do, causal):
    """reference() one KV head and its query heads at a time: the same numbers in the memory of
    one group's fp32 scores (a whole S8192 problem's would not fit an 80 GB GPU)."""
    group = q.shape[1] // k.shape[1]
    parts = [reference(q[:, h * group:(h + 1) * group], k[:, h:h + 1], v[:, h:h + 1],
                       do[:, h * group:(h + 1) * group], causal) for h in range(k.shape[1])]
    return tuple(torch.cat([part[i] for part in parts], dim=1) for i in range(4))


# ---- parity over the grid -------------------------------------------------------------------

GRID = list(itertools.product((1, 3), ((8, 8), (32, 8)), (1, 17, 128, 1000, 4096),
                              (1, 17, 128, 1000, 4096), (64, 128), (False, True), ("bf16", "fp16")))
# head dims 96 (128-wide tiles) and 256 (the wide backward kernels), on Gemma-2's 16 / 8 heads
GRID += list(itertools.product((1,), ((16, 8),), (17, 1000, 2048), (17, 1000, 2048), (96, 256),
                               (False, True), ("bf16", "fp16")))


SERVED_BY_PARITY = collections.Counter()  # kernel -> calls made by test_parity in this session
PARITY_CASES_RUN = []                      # the grid cases test_parity served, in this session


def _id(case):
    b, (hq, hkv), sq, sk, d, causal, dt = case
    return f"B{b}-H{hq}x{hkv}-S{sq}x{sk}-d{d}-{'causal' if causal else 'full'}-{dt}"


@pytest.mark.parametrize("case", GRID, ids=[_id(c) for c in GRID])
def test_parity(case):
    b, (hq, hkv), sq, sk, d, causal, dt = case
    dtype = DTYPES[dt]
    q, k, v, do = make(b, hq, hkv, sq, sk, d, dtype, seed=sq * 7 + sk)
    kw = dict(is_causal=causal, enable_gqa=hq != hkv)
    entry = attnpack_torch.sdpa_entry(dt, hq, hkv, sq, sk, d, causal)
    if entry is None:  # causal Sq != Sk with GQA: neither op is reached, attnpack stays out
        with counted() as stats:
            fwd_bwd(q, k, v, do, **kw)
        assert stats["calls"] == {} and stats["fallbacks"] == {}
        return
    with counted() as stats:
        mine = fwd_bwd(q, k, v, do, **kw)
    SERVED_BY_PARITY.update(stats["calls"])
    PARITY_CASES_RUN.append(case)
    assert stats["fallbacks"] == {}, stats
    assert (served(stats, f"{entry}_fwd"), served(stats, f"{entry}_bwd")) == (1, 1), stats
    with native(), sdpa_kernel(SDPBackend.FLASH_ATTENTION if entry == "flash" else SDPBackend.EFFICIENT_ATTENTION):
        theirs = fwd_bwd(q, k, v, do, **kw)
    ref = reference(q, k, v, do, causal)
    for name, a, n, r in zip(("out", "dq", "dk", "dv"), mine, theirs, ref):
        assert (a.shape, a.dtype, layout(a)) == (n.shape, n.dtype, layout(n)), name
        err = (a.float() - r).abs().max().item()
        err_native = (n.float() - r).abs().max().item()
        # 1e-5: gradients that are exactly 0 in the reference (Sk=1, or one visible key)
        bound = max(2 * err_native, ULP[dtype] * r.abs().max().item() + 1e-5)
        assert err <= bound, f"{name}: error {err:.3g} > {bound:.3g} (PyTorch {entry}: {err_native:.3g})"


def test_parity_ran_every_kernel_the_bundle_selects_for_the_grid():
    """test_parity went through every kernel (hence every family: Gluon forwards on sm_90
    where the tuning db picks them) that explain() predicts for the cases it ran, and no other."""
    if not PARITY_CASES_RUN:
        pytest.skip("test_parity did not run in this session")
    predicted = set()
    for b, (hq, hkv), sq, sk, d, causal, dt in PARITY_CASES_RUN:
        for op in ("fwd", "bwd"):
            result = attnpack_torch.explain((b, hq, hkv, sq, sk, d), dt, causal=causal, op=op)
            if result["served"]:
                predicted.add(result["kernel"])
    assert set(SERVED_BY_PARITY) == predicted
    families = collections.Counter(name.split("/")[0] + "/" + name.split("/")[1]
                                   for name in SERVED_BY_PARITY.elements())
    print("calls per family/op over the parity grid:", dict(sorted(families.items())))


def test_bundle_info_names_the_gpu_the_database_was_tuned_on():
    """bundle_info's `tuned_on` is the header of the database the bundle was built from
    (aot/tuning_db/<arch>.jsonl), "" where that is untuned; its `gpu_entries` counts the
    archive's by_gpu lists as the Python reader sees them."""
    from attnpack.archive import read_archive
    from attnpack.archive.format import tuning_tables
    from attnpack.tune.db import load_db
    bundle = attnpack_torch.bundle_info()["bundle"]
    db = load_db(REPO / "aot" / "tuning_db" / f"{bundle['arch']}.jsonl")
    measured = db.provenance.get("status") != "untuned"
    assert bundle["tuned_on"] == (db.provenance.get("gpu", "") if measured else "")
    tables = tuning_tables(read_archive(bundle["path"]).index.get("tuning", {}))
    assert bundle["gpu_entries"] == {gpu: len(entries) for gpu, entries in tables[1:]}


def test_a_gpu_models_own_entries_serve_it_first():
    """Where a GPU model has entries of its own (aot/tuning_db/<arch>/<gpu>.jsonl, the archive's
    `tuning.by_gpu`), each one's kernel serves its timing shape on a device of that name, explain
    says so, and the call's answer is within the parity bound of an fp32 reference; on any other
    device the arch-wide pick serves that shape (select_on_gpu's rule, as the runtime's)."""
    from attnpack.tune.db import load_db, load_gpu_dbs, select_on_gpu
    arch = attnpack_torch.bundle_info()["bundle"]["arch"]
    here = torch.cuda.get_device_properties(0).name
    base = load_db(REPO / "aot" / "tuning_db" / f"{arch}.jsonl")
    gpu_dbs = load_gpu_dbs(REPO / "aot" / "tuning_db", arch)
    if not gpu_dbs:
        pytest.skip(f"no GPU model has entries of its own for {arch}")
    for gpu, db in sorted(gpu_dbs.items()):
        for key, entry in sorted(db.entries.items()):
            s = entry["shape"]
            shape = (s["B"], s["Hq"], s["Hkv"], s["Sq"], s["Sk"], key.head_dim)
            want, rule = select_on_gpu(base, gpu_dbs.get(here), key.op, key.dtype, key.head_dim,
                                       key.causal, *shape[:5])
            assert (rule == f"tuned for {gpu}") == (gpu == here), (gpu, key.text, rule)
            result = attnpack_torch.explain(shape, key.dtype, causal=key.causal, op=key.op)
            assert result["served"] and result["kernel"] == want["kernel"], (key.text, result)
            assert (f"tuned entry for {here}" in result["runtime"]) == (gpu == here), result
            if gpu != here:
                continue
            dtype = DTYPES[key.dtype]
            q, k, v, do = make(*shape, dtype)
            kw = dict(is_causal=key.causal, enable_gqa=key.gqa > 1)
            with counted() as stats:
                mine = fwd_bwd(q, k, v, do, **kw)
            assert stats["calls"].get(entry["kernel"]) == 1, (key.text, stats["calls"])
            with native(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                theirs = fwd_bwd(q, k, v, do, **kw)
            ref = reference_by_kv_head(q, k, v, do, key.causal)
            for name, a, n, r in zip(("out", "dq", "dk", "dv"), mine, theirs, ref):
                err, err_native = ((x.float() - r).abs().max().item() for x in (a, n))
                bound = max(2 * err_native, ULP[dtype] * r.abs().max().item() + 1e-5)
                assert err <= bound, f"{key.text} {name}: error {err:.3g} > {bound:.3g}"
            del q, k, v, do, mine, theirs, ref
            torch.cuda.empty_cache()


def test_outputs_match_the_ops_contract():
    """Shapes, dtypes, strides and the extra outputs exactly as PyTorch's flash op returns them."""
    q, k, v, _ = make(2, 8, 2, 100, 100, 64, torch.bfloat16, grad=False)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # a BSHD layout, as attention layers make
    with counted() as stats:
        mine = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=0.11)
    assert served(stats, "flash_fwd") == 1
    with native():
        theirs = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=0.11)
    for a, b in zip(mine, theirs):
        if isinstance(a, torch.Tensor):
            assert (a.shape, a.dtype, a.device, layout(a)) == (b.shape, b.dtype, b.device, layout(b))
        else:
            assert a == b  # cum_seq_q/k None, max_q, max_k
    assert mine[1].shape == (2, 8, 100) and mine[1].dtype == torch.float32
    torch.testing.assert_close(mine[1], theirs[1], atol=2e-3, rtol=0)  # the same LSE, natural log


# ---- routing ------------------------------------------------------------------------------------

def test_plain_sdpa_reaches_flash_past_cudnn():
    q, k, v, _ = make(1, 8, 8, 256, 256, 128, torch.bfloat16, grad=False)
    with native():
        before = torch._fused_sdp_choice(q, k, v, is_causal=True)
        order_before = list(torch._C._get_sdp_priority_order())
    assert torch._fused_sdp_choice(q, k, v, is_causal=True) == int(SDPBackend.FLASH_ATTENTION)
    with native():  # disabling gives PyTorch's own choice back (cuDNN on an H200 with torch 2.11)
        assert torch._fused_sdp_choice(q, k, v, is_causal=True) == before
        assert list(torch._C._get_sdp_priority_order()) == order_before


# ---- fallbacks: each reason, each giving PyTorch's answer ------------------------------------

def both(fn, backend=None):
    """fn() with attnpack (and its stats), then natively, both restricted to `backend` (so that
    PyTorch's answer comes from the op attnpack fell back to, not cuDNN); each result or error."""
    def run():
        torch.manual_seed(1234)
        try:
            with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
                return fn()
        except RuntimeError as e:
            return e
    with counted() as stats:
        mine = run()
    with native():
        theirs = run()
    return mine, theirs, stats


def assert_same(mine, theirs, exact, written=None):
    """Equal results (or the same error). exact=False: the first tensor (the output) bitwise,
    gradients closely (PyTorch's own backward kernels may accumulate with atomics). Integer
    outputs are RNG bookkeeping, which PyTorch leaves uninitialized without dropout: compared by
    shape, dtype and device only. `written`: (Sq, Sk) of a flash debug mask (output 8)."""
    if isinstance(theirs, Exception):
        assert type(mine) is type(theirs) and str(mine) == str(theirs)
        return
    assert not isinstance(mine, Exception), mine
    assert len(mine) == len(theirs)
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if not isinstance(a, torch.Tensor):
            assert a == b
            continue
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), i
        if not (a.is_floating_point() or a.dtype == torch.bool):
            continue
        if i == 8 and written is not None:
            # the flash op's debug mask is allocated with Sq/Sk rounded up to its block size and
            # only the [Sq, Sk] corner is written; the rest is whatever the allocator held
            a, b = a[:, :, :written[0], :written[1]], b[:, :, :written[0], :written[1]]
        if exact or i == 0:
            # bitwise, NaN included: scale=0 makes PyTorch's own answer NaN, and ours must be too
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=f"output {i}")
        else:
            torch.testing.assert_close(a, b, equal_nan=True)


def _bf16(b, hq, hkv, sq, sk, d, dtype=torch.bfloat16, grad=True):
    return make(b, hq, hkv, sq, sk, d, dtype, grad=grad)


FLASH, EFFICIENT = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION
# reason -> (call, backend it runs on, whether every output must be bitwise equal)
FALLBACKS = {
    "dtype fp32 not built": (lambda: fwd_bwd(*_bf16(2, 4, 4, 64, 64, 64, torch.float32)), EFFICIENT, False),
    "dropout_p > 0": (lambda: fwd_bwd(*_bf16(2, 4, 4, 64, 64, 64), dropout_p=0.3), FLASH, False),
    "return_debug_mask": (lambda: torch.ops.aten._scaled_dot_product_flash_attention(
        *_bf16(1, 4, 4, 64, 64, 64, torch.float16, grad=False)[:3], 0.3, False, True), None, True),
    "head_dim 80 not built": (lambda: fwd_bwd(*_bf16(2, 4, 4, 64, 64, 80)), FLASH, False),
    "attn_bias": (lambda: fwd_bwd(*_bf16(2, 4, 4, 64, 96, 64),
                                  attn_mask=torch.ones(64, 96, dtype=torch.bool, device=DEV).tril()),
                  EFFICIENT, False),
    "scale is not positive and finite": (lambda: fwd_bwd(*_bf16(2, 4, 4, 64, 64, 64), scale=0.0), FLASH, False),
    "causal with Sq != Sk on the flash op (its mask is bottom-right aligned)":
        (lambda: torch.ops.aten._scaled_dot_product_flash_attention(
            *_bf16(1, 4, 4, 40, 64, 64, grad=False)[:3], 0.0, True), None, True),
    "Hq != Hkv on the efficient op": (lambda: torch.ops.aten._scaled_dot_product_efficient_attention(
        *_bf16(1, 8, 2, 64, 64, 64, grad=False)[:3], None, True), None, True),
}


@pytest.mark.parametrize("reason", list(FALLBACKS))
def test_fallback(reason):
    fn, backend, exact = FALLBACKS[reason]
    mine, theirs, stats = both(fn, backend)
    assert reason in stats["fallbacks"], stats
    assert stats["calls"] == {}, stats  # nothing of the call ran on the bundle
    assert_same(mine, theirs, exact, written=(64, 64) if reason == "return_debug_mask" else None)


def test_no_bundle_for_this_gpu_warns_once_and_falls_back(tmp_path):
    """A bundle folder without this GPU's archive: one warning, every call PyTorch's."""
    code = (
        "import json, warnings, torch, torch.nn.functional as F, attnpack.torch as T\n"
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        "warnings.simplefilter('always')\n"
        "q = torch.randn(1, 4, 64, 64, device='cuda', dtype=torch.bfloat16)\n"
        "with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n"
        "    ref = F.scaled_dot_product_attention(q, q, q, is_causal=True)\n"
        "T.enable()\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    outs = [F.scaled_dot_product_attention(q, q, q, is_causal=True) for _ in range(3)]\n"
        "print(json.dumps({'equal': all(torch.equal(o, ref) for o in outs),\n"
        "  'warnings': [str(x.message) for x in w if 'attnpack' in str(x.message)],\n"
        "  'stats': T.stats(), 'info': T.bundle_info()}))\n")
    env = {**os.environ, "ATTNPACK_BUNDLE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["equal"]
    assert len(result["warnings"]) == 1 and "ATTNPACK_BUNDLE_DIR" in result["warnings"][0]
    assert result["stats"]["fallbacks"] == {"no bundle for this GPU (archive_not_found)": 3}
    assert result["info"]["ok"] is False


# ---- determinism -------------------------------------------------------------------------------

def test_deterministic_backward_is_served_and_reproducible():
    q, k, v, do = make(2, 16, 4, 1000, 1000, 128, torch.bfloat16)
    torch.use_deterministic_algorithms(True)
    try:
        with counted() as stats:
            first = fwd_bwd(q, k, v, do, is_causal=True, enable_gqa=True)
            second = fwd_bwd(q, k, v, do, is_causal=True, enable_gqa=True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert stats["deterministic_backward"] == 2 and served(stats, "flash_bwd") == 2, stats
    for a, b in zip(first, second):
        assert torch.equal(a, b)


# ---- torch.compile, CUDA graphs, autocast, streams, devices -------------------------------------

class Attention(torch.nn.Module):
    def __init__(self, dim=256, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q = torch.nn.Linear(dim, dim, bias=False)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def test_torch_compile():
    torch.manual_seed(0)
    model = Attention().to(DEV, torch.bfloat16)
    x = torch.randn(2, 200, 256, device=DEV, dtype=torch.bfloat16)

    def step(m):
        model.zero_grad(set_to_none=True)
        out = m(x)
        out.float().square().mean().backward()
        return out.detach(), [p.grad for p in model.parameters()]

    eager_out, eager_grads = step(model)
    compiled = torch.compile(model, fullgraph=True)
    with counted() as stats:
        out, grads = step(compiled)
    # >= 1: the partitioner may recompute the forward in the backward graph
    assert served(stats, "flash_fwd") >= 1 and served(stats, "flash_bwd") == 1, stats
    assert stats["fallbacks"] == {}, stats
    torch.testing.assert_close(out, eager_out, atol=2e-2, rtol=2e-2)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, atol=2e-2, rtol=5e-2)


def test_cuda_graph_capture_and_replay():
    q, k, v, do = make(2, 8, 2, 300, 300, 64, torch.bfloat16)

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    graphed = torch.cuda.make_graphed_callables(attention, (q, k, v))  # captures fwd and bwd
    for seed in (1, 2):
        q2, k2, v2, do2 = make(2, 8, 2, 300, 300, 64, torch.bfloat16, seed=seed)
        with counted() as stats:
            out = graphed(q2, k2, v2)
            out.backward(do2)
        assert stats["calls"] == {}  # replays: no op call, no decision, the captured kernels
        eager = fwd_bwd(q2, k2, v2, do2, is_causal=True, enable_gqa=True)
        for a, b in zip((out.detach(), q2.grad, k2.grad, v2.grad), eager):
            assert torch.equal(a, b)


def test_autocast():
    q, k, v, do = make(2, 8, 8, 128, 128, 64, torch.float32)
    with counted() as stats, torch.autocast("cuda", dtype=torch.bfloat16):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16 and served(stats, "flash_fwd") == 1
    expected = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert torch.equal(out, expected)


def test_side_streams():
    inputs = [make(2, 8, 8, 512, 512, 128, torch.float16, seed=s, grad=False) for s in range(4)]
    expected = [F.scaled_dot_product_attention(q, k, v, is_causal=True) for q, k, v, _ in inputs]
    streams = [torch.cuda.Stream() for _ in inputs]
    outs = []
    torch.cuda.synchronize()
    for stream, (q, k, v, _) in zip(streams, inputs):
        with torch.cuda.stream(stream):
            outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.cuda.synchronize()
    for a, b in zip(outs, expected):
        assert torch.equal(a, b)


# ---- observability ------------------------------------------------------------------------------

def test_stats_split_calls_and_fallbacks_by_device():
    q, k, v, do = make(1, 8, 8, 256, 256, 64, torch.bfloat16)
    with counted() as stats:
        fwd_bwd(q, k, v, do, is_causal=True)
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert sum(stats["calls"].values()) == 2 and stats["fallbacks"] == {"dropout_p > 0": 1}
    assert stats["devices"] == {"cuda:0": {"calls": stats["calls"], "fallbacks": stats["fallbacks"]}}


def test_attnpack_log_prints_each_new_decision_once():
    code = (
        "import torch, torch.nn.functional as F, attnpack.torch as T\n"
        "T.enable()\n"
        "for s in (128, 128, 128, 200):\n"
        "    q = torch.randn(1, 8, s, 64, device='cuda', dtype=torch.bfloat16)\n"
        "    F.scaled_dot_product_attention(q, q, q, is_causal=True)\n"
        "F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)\n"
        "F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)\n"
        "torch.cuda.synchronize()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "ATTNPACK_LOG": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("attnpack: ")]
    assert len(lines) == 3, lines
    # "-> <family> <kernel>": the tuning db picks the family per seqlen bucket
    served = r" on cuda:0 -> (triton|gluon) \1/fwd/bf16-d64-causal/\S+$"
    assert re.match(r"attnpack: flash_fwd bf16 B=1 Hq=8 Hkv=8 Sq=128 Sk=128 D=64 causal" + served, lines[0]), lines
    assert re.match(r"attnpack: flash_fwd bf16 B=1 Hq=8 Hkv=8 Sq=200 Sk=200 D=64 causal" + served, lines[1]), lines
    assert lines[2].endswith("dropout_p=0.5 on cuda:0 -> fallback: dropout_p > 0")


def test_explain_matches_what_a_call_does():
    shape = (2, 32, 8, 1000, 1000, 128)
    result = attnpack_torch.explain(shape, "bf16", causal=True)
    q, k, v, do = make(*shape, torch.bfloat16)
    with counted() as stats:
        fwd_bwd(q, k, v, do, is_causal=True, enable_gqa=True)
    assert result["served"] and stats["calls"].get(result["kernel"]) == 1, (result, stats)
    done = subprocess.run([sys.executable, "-m", "attnpack.cli", "explain", "--shape", "2,32,8,1000,1000,128",
                           "--causal", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernel"] == result["kernel"]


# ---- a real model -------------------------------------------------------------------------------

def test_transformers_llama_forward_backward():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    model = model.to(DEV, torch.bfloat16).train()
    ids = torch.randint(0, 1000, (2, 256), device=DEV)

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}

    with counted() as stats:
        loss, grads = step()
    with native():
        loss_native, grads_native = step()
    layers = config.num_hidden_layers
    assert stats["fallbacks"] == {}, stats
    assert served(stats, "flash_fwd") == layers and served(stats, "flash_bwd") == layers, stats
    assert abs(loss - loss_native) <= 1e-2 * abs(loss_native), (loss, loss_native)
    for name, g in grads.items():
        ref = grads_native[name]
        assert (g - ref).norm() <= 5e-2 * ref.norm() + 1e-6, name
