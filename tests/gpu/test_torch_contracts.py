"""attnpack.torch keeps PyTorch's op contracts (issue 18). Each test compares attnpack enabled
with attnpack disabled (PyTorch's own kernels) on the same inputs:

- CUDA-graph capture: every tensor output of the four overridden ops lives on the device PyTorch's
  own op puts it on (the efficient op's philox seed and offset: on the GPU while capturing, on
  the CPU otherwise), eagerly and inside torch.cuda.graph;
- extreme values: fp16 and bf16 maxima (|q.k| * scale ~1e11 and beyond) give outputs and
  gradients that are finite wherever PyTorch's flash gives finite ones, and exact where the
  answer is exact (one key, or one key that wins outright);
- errors: every rejected input of the four ops raises PyTorch's own error, with attnpack enabled
  as without it;
- determinism: under use_deterministic_algorithms(True, warn_only=True) a deterministic backward
  warns nothing, a non-deterministic one warns as PyTorch's kernels do; without warn_only it
  falls back.
Skipped without CUDA (the decision logic of each is CPU-tested in tests/cpu/test_torch_contract_decisions.py).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attnpack.torch as attnpack_torch  # noqa: E402
# `extension` is test_torch_sdpa's module fixture (autouse): it loads or builds the extension,
# checks the bundle for this GPU, enables attnpack and preloads its kernels.
from test_torch_sdpa import (ULP, assert_same, both, counted, extension, native,  # noqa: E402,F401
                             served)

REPO = Path(__file__).resolve().parents[2]
DEV = "cuda"
aten = torch.ops.aten


def rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(*shape, device=DEV, dtype=dtype, generator=g)


def predicted_served(entry, dtype, b, h, s, d, causal):
    word = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    return attnpack_torch.explain((b, h, h, s, s, d), word, causal, entry=entry)["served"]


# ---- 1. where every output lives, eagerly and under CUDA-graph capture ---------------------------

def layout_of(outputs):
    """(kind, device, dtype, shape) of each output; non-tensors (SymInts) by value."""
    described = []
    for x in outputs:
        if isinstance(x, torch.Tensor):
            described.append(("tensor", x.device, x.dtype, tuple(x.shape)))
        else:
            described.append(("value", x))
    return described


def run_captured(fn):
    """fn() inside torch.cuda.graph (after PyTorch's recommended side-stream warm-up); returns
    the captured outputs, replayed once, and the graph that owns their memory."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    graph.replay()
    torch.cuda.synchronize()
    return outputs, graph


def capture_calls(q, k, v, causal):
    """The four ops on these inputs; the backward ops take one native forward's outputs."""
    grad = torch.randn_like(q)
    with native():
        flash = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        efficient = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
    return {
        "flash_fwd": lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False),
        "flash_bwd": lambda: aten._scaled_dot_product_flash_attention_backward(
            grad, q, k, v, flash[0], flash[1], None, None, q.shape[2], k.shape[2], 0.0, causal,
            flash[6], flash[7]),
        "efficient_fwd": lambda: aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal),
        "efficient_fwd_no_lse": lambda: aten._scaled_dot_product_efficient_attention(
            q, k, v, None, False, 0.0, causal),
        "efficient_bwd": lambda: aten._scaled_dot_product_efficient_attention_backward(
            grad, q, k, v, None, efficient[0], efficient[1], efficient[2], efficient[3], 0.0,
            [True, True, True, False], causal),
    }


CAPTURE_CASES = [(d, s, causal) for d in (32, 64) for s in (256, 1024) for causal in (False, True)]


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "captured"])
@pytest.mark.parametrize("d, s, causal", CAPTURE_CASES,
                         ids=[f"d{d}-S{s}-{'causal' if c else 'full'}" for d, s, c in CAPTURE_CASES])
def test_every_output_lives_where_pytorch_puts_it(capture, d, s, causal):
    q, k, v = (rand(2, 4, s, d, seed=i) for i in range(3))
    attnpack_torch.preload()  # nothing may load inside the capture
    for name, call in capture_calls(q, k, v, causal).items():
        entry = name.replace("_no_lse", "")
        with counted() as stats:
            mine, graph_mine = run_captured(call) if capture else (call(), None)
        with native():
            theirs, graph_theirs = run_captured(call) if capture else (call(), None)
        assert layout_of(mine) == layout_of(theirs), name
        if predicted_served(entry, q.dtype, 2, 4, s, d, causal):
            assert served(stats, entry) >= 1 and stats["fallbacks"] == {}, (name, stats)
            if capture:  # the replay computed what an eager call computes
                eager = call()
                if entry.endswith("_bwd") and stats["deterministic_backward"] == 0:
                    # a backward that adds dQ with fp32 atomics (the Gluon backward's det0
                    # variants) rounds differently run to run: equal up to that
                    torch.testing.assert_close(mine[0], eager[0], rtol=1e-2, atol=1e-2)
                else:
                    torch.testing.assert_close(mine[0], eager[0], rtol=0, atol=0)
        del graph_mine, graph_theirs


def test_the_issues_capture_case_puts_seed_and_offset_on_the_gpu():
    """The report: compute_log_sumexp=True inside torch.cuda.graph gave CPU seed/offset."""
    q, k, v = (rand(1, 8, 1024, 64, seed=i) for i in range(3))
    attnpack_torch.preload()
    call = lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)  # noqa: E731
    with counted() as stats:
        (out, lse, seed, offset), graph = run_captured(call)
    assert served(stats, "efficient_fwd") >= 1, stats
    assert seed.device.type == offset.device.type == "cuda"
    assert (seed.dtype, offset.dtype, seed.shape, offset.shape) == (torch.int64, torch.int64, (), ())
    _, _, seed_eager, offset_eager = call()
    assert seed_eager.device.type == offset_eager.device.type == "cpu"  # and eagerly on the CPU
    del graph


# ---- 2. extreme values --------------------------------------------------------------------------

def extreme_inputs(dtype, value, d, s, kind, seed=3):
    q = torch.full((1, 2, s, d), value, device=DEV, dtype=dtype)
    if kind == "ties":  # every score equal: uniform softmax
        k = q.clone()
    else:  # key j = value (1 - j/64), distinct in bf16 too: key 0 wins every row outright
        keys = (value * (1 - torch.arange(s, device=DEV, dtype=torch.float64) / 64)).to(dtype)
        k = keys[None, None, :, None].expand(1, 2, s, d).contiguous()
    v = rand(1, 2, s, d, dtype=dtype, seed=seed)
    do = rand(1, 2, s, d, dtype=dtype, seed=seed + 1)
    return q, k, v, do


def flash_fwd_bwd(q, k, v, do):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v)
        out.backward(do)
    return [out.detach(), q.grad, k.grad, v.grad]


def float64_reference(q, k, v, do):
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v
    out.backward(do.double())
    return [out.detach(), q.grad, k.grad, v.grad]


BF16_MAX = torch.finfo(torch.bfloat16).max
FP16_MAX = torch.finfo(torch.float16).max
# dtype, value, head dim, Sq = Sk, kind, compared with the float64 answer. Exact answers need
# one key or a one-hot softmax, and a power-of-two scale (head dim 64): then the LSE the forward
# stores is exactly scale * max and the backward's P of the winning key exactly 1. Otherwise the
# fp32 LSE PyTorch's ops exchange is itself off by up to half an ulp of ~1e10 (thousands), or
# cannot hold ln Sk next to the max, and P of the winner comes out 0 or 1 (clamped) rather than
# exact, in PyTorch's flash as in attnpack: there only finiteness is compared.
EXTREMES = [
    (torch.bfloat16, 133120.0, 64, 1, "ties", True),  # the report's input
    (torch.float16, FP16_MAX, 64, 1, "ties", True),
    (torch.bfloat16, 1e18, 64, 1, "ties", True),
    (torch.float16, FP16_MAX, 64, 40, "onehot", True),
    (torch.bfloat16, 1e18, 64, 40, "onehot", True),
    (torch.bfloat16, 133120.0, 128, 1, "ties", False),
    (torch.float16, FP16_MAX, 128, 1, "ties", False),
    (torch.bfloat16, 1e18, 128, 40, "onehot", False),
    (torch.float16, FP16_MAX, 64, 300, "ties", False),
    (torch.bfloat16, 133120.0, 128, 300, "ties", False),
    (torch.bfloat16, BF16_MAX, 64, 1, "ties", False),  # q.k overflows fp32: PyTorch's is not finite either
]


@pytest.mark.parametrize("case", EXTREMES, ids=[
    f"{str(c[0]).split('.')[-1]}-{c[1]:g}-d{c[2]}-S{c[3]}-{c[4]}" for c in EXTREMES])
def test_extreme_values_stay_finite_forward_and_backward(case):
    dtype, value, d, s, kind, exact = case
    q, k, v, do = extreme_inputs(dtype, value, d, s, kind)
    with counted() as stats:
        mine = flash_fwd_bwd(q, k, v, do)
    assert (served(stats, "flash_fwd"), served(stats, "flash_bwd")) == (1, 1), stats
    with native():
        theirs = flash_fwd_bwd(q, k, v, do)
    for name, a, b in zip(("out", "dq", "dk", "dv"), mine, theirs):
        if name == "dk" and kind == "ties" and s > 1 and value < BF16_MAX:
            # P comes out 1 instead of 1/Sk (the LSE cannot hold ln Sk), so dK is Sk times its
            # exact value, which may pass fp16's range; PyTorch's P rounds its own way (0 or 1)
            continue
        finite_theirs = torch.isfinite(b)
        assert torch.isfinite(a)[finite_theirs].all(), \
            f"{name}: not finite where PyTorch's flash is ({torch.isfinite(a).float().mean():.2f} finite)"
    if value == 133120.0 and d == 64 and s == 1:
        assert torch.isfinite(theirs[0]).all()  # the report's premise: PyTorch's flash is finite
        assert torch.equal(mine[0], v)           # one key: softmax is 1, out is v exactly
    if not exact:
        return
    want = float64_reference(q, k, v, do)
    ulp = ULP[dtype]
    for name, a, r in zip(("out", "dv"), (mine[0], mine[3]), (want[0], want[3])):
        assert torch.isfinite(a).all(), name
        err = (a.double() - r).abs().max().item()
        assert err <= ulp * max(1.0, r.abs().max().item()), f"{name}: error {err:.3g}"
    # dQ and dK: exactly 0 here; their rounding is measured against the size of their terms
    # (dS ~ ulp * |dO|.|v|, each term times a query or key near `value`, Sk terms).
    terms = 4 * ulp * (do.double().abs() @ v.double().abs().transpose(-1, -2)).max().item()
    bound = 2 * ulp * max(1.0, s * terms * float(value) / math.sqrt(d))
    for name, a in (("dq", mine[1]), ("dk", mine[2])):
        assert torch.isfinite(a).all(), name
        assert a.double().abs().max().item() <= bound, f"{name}: {a.double().abs().max().item():.3g} > {bound:.3g}"


# ---- 3. errors: PyTorch's own, whether attnpack would serve the call or not --------------------

def _q(*shape, dtype=torch.float16, seed=0):
    return rand(*shape, dtype=dtype, seed=seed)


def _strided_last(b, h, s, d, dtype=torch.float16):
    return rand(b, h, s, 2 * d, dtype=dtype)[..., ::2]  # last-dim stride 2


def _flash_bwd(grad, q, k, v, out=None, lse=None, cum=None):
    out = torch.zeros_like(q) if out is None else out
    lse = torch.zeros(q.shape[0], q.shape[1], q.shape[2], device=DEV) if lse is None else lse
    rng = torch.empty(2, device=DEV, dtype=torch.uint64)
    return aten._scaled_dot_product_flash_attention_backward(
        grad, q, k, v, out, lse, cum, cum, q.shape[2], k.shape[2], 0.0, False, rng,
        torch.empty((), device=DEV, dtype=torch.uint64))


def _efficient_bwd(grad, q, k, v, bias=None, out=None, lse=None, mask=(True, True, True, False)):
    out = torch.zeros_like(q) if out is None else out
    rows = -(-q.shape[2] // 32) * 32
    lse = torch.zeros(q.shape[0], q.shape[1], rows, device=DEV) if lse is None else lse
    seed = torch.empty((), dtype=torch.int64)
    return aten._scaled_dot_product_efficient_attention_backward(
        grad, q, k, v, bias, out, lse, seed, seed, 0.0, list(mask), False)


B, H, S, D = 2, 4, 128, 64
REJECTED = {
    # flash forward
    "flash_fwd/fp32": lambda: aten._scaled_dot_product_flash_attention(
        *(_q(B, H, S, D, dtype=torch.float32, seed=i) for i in range(3)), 0.0, False),
    "flash_fwd/mixed-dtypes": lambda: aten._scaled_dot_product_flash_attention(
        _q(B, H, S, D), _q(B, H, S, D, dtype=torch.bfloat16), _q(B, H, S, D), 0.0, False),
    "flash_fwd/head-dim-264": lambda: aten._scaled_dot_product_flash_attention(
        *(_q(B, H, S, 264, seed=i) for i in range(3)), 0.0, False),
    "flash_fwd/heads-6-over-4": lambda: aten._scaled_dot_product_flash_attention(
        _q(B, 6, S, D), _q(B, 4, S, D), _q(B, 4, S, D), 0.0, False),
    "flash_fwd/last-dim-strided": lambda: aten._scaled_dot_product_flash_attention(
        _strided_last(B, H, S, D), _q(B, H, S, D), _q(B, H, S, D), 0.0, False),
    "flash_fwd/batch-mismatch": lambda: aten._scaled_dot_product_flash_attention(
        _q(B, H, S, D), _q(B + 1, H, S, D), _q(B + 1, H, S, D), 0.0, False),
    "flash_fwd/key-on-cpu": lambda: aten._scaled_dot_product_flash_attention(
        _q(B, H, S, D), _q(B, H, S, D).cpu(), _q(B, H, S, D), 0.0, False),
    # flash backward
    "flash_bwd/grad-dtype": lambda: _flash_bwd(_q(B, H, S, D, dtype=torch.bfloat16),
                                               *(_q(B, H, S, D, seed=i) for i in range(3))),
    "flash_bwd/head-dim-264": lambda: _flash_bwd(*(_q(B, H, S, 264, seed=i) for i in range(4))),
    "flash_bwd/last-dim-strided": lambda: _flash_bwd(_q(B, H, S, D), _strided_last(B, H, S, D),
                                                     _q(B, H, S, D), _q(B, H, S, D)),
    "flash_bwd/heads-6-over-4": lambda: _flash_bwd(_q(B, 6, S, D), _q(B, 6, S, D),
                                                   _q(B, 4, S, D), _q(B, 4, S, D)),
    # efficient forward
    "efficient_fwd/heads-8-and-2": lambda: aten._scaled_dot_product_efficient_attention(
        _q(B, 8, S, D), _q(B, 2, S, D), _q(B, 2, S, D), None, True),
    "efficient_fwd/last-dim-strided": lambda: aten._scaled_dot_product_efficient_attention(
        _strided_last(B, H, S, D), _q(B, H, S, D), _q(B, H, S, D), None, True),
    "efficient_fwd/batch-mismatch": lambda: aten._scaled_dot_product_efficient_attention(
        _q(B, H, S, D), _q(B + 1, H, S, D), _q(B + 1, H, S, D), None, True),
    "efficient_fwd/three-dims": lambda: aten._scaled_dot_product_efficient_attention(
        _q(H, S, D), _q(H, S, D), _q(H, S, D), None, True),
    # efficient backward
    "efficient_bwd/bias-grad-without-bias": lambda: _efficient_bwd(
        *(_q(B, H, S, D, seed=i) for i in range(4)), mask=(True, True, True, True)),
    "efficient_bwd/heads-8-and-2": lambda: _efficient_bwd(_q(B, 8, S, D), _q(B, 8, S, D),
                                                          _q(B, 2, S, D), _q(B, 2, S, D)),
    "efficient_bwd/grad-batch-mismatch": lambda: _efficient_bwd(
        _q(B + 1, H, S, D), *(_q(B, H, S, D, seed=i) for i in range(3))),
    "efficient_bwd/last-dim-strided": lambda: _efficient_bwd(_q(B, H, S, D), _strided_last(B, H, S, D),
                                                             _q(B, H, S, D), _q(B, H, S, D)),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_rejected_inputs_raise_pytorchs_own_error(case):
    mine, theirs, stats = both(REJECTED[case])
    assert isinstance(theirs, Exception), f"PyTorch accepted {case}: {type(theirs)}"
    assert_same(mine, theirs, exact=True)  # the same exception type and message
    assert stats["calls"] == {}, stats     # nothing of it ran on the bundle


def test_the_issues_missing_error_is_raised():
    """grad_input_mask asking for a bias gradient with no bias: PyTorch raises, attnpack too,
    although attnpack serves the same call without the bias gradient."""
    q, k, v, grad = (_q(1, 8, 256, 64, seed=i) for i in range(4))
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
    call = lambda mask: aten._scaled_dot_product_efficient_attention_backward(  # noqa: E731
        grad, q, k, v, None, out, lse, seed, offset, 0.0, mask, False)
    with counted() as stats:
        call([True, True, True, False])
    assert served(stats, "efficient_bwd") == 1, stats
    with pytest.raises(RuntimeError, match="bias_requires_grad is true but no bias was provided"):
        call([True, True, True, True])


# ---- 4. determinism warnings follow the serving kernel -------------------------------------------

DETERMINISM_PROBE = textwrap.dedent("""
    import json, warnings, torch, torch.nn.functional as F, attnpack.torch as T
    torch.set_warn_always(True)     # every TORCH_WARN_ONCE, PyTorch's and attnpack's, each call
    T.enable()
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16, generator=g)
                   for _ in range(4))
    result = {}
    for mode in ("warn_only", "error"):
        torch.use_deterministic_algorithms(True, warn_only=mode == "warn_only")
        T.reset_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            q1, k1, v1 = (t.clone().requires_grad_() for t in (q, k, v))
            F.scaled_dot_product_attention(q1, k1, v1, is_causal=True).backward(do)
            torch.cuda.synchronize()
        result[mode] = {"warnings": [str(w.message) for w in caught
                                     if "deterministic" in str(w.message)],
                        "stats": T.stats()}
    print(json.dumps(result))
""")


def _probe_determinism(env=None):
    done = subprocess.run([sys.executable, "-c", DETERMINISM_PROBE], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_deterministic_mode_gets_a_deterministic_backward_and_warn_only_warns_for_the_rest():
    """warn_only=False: a backward declared deterministic serves (where the tuned winner is a
    Gluon atomic-dQ variant, its entry's deterministic kernel), with no warning. warn_only=True:
    the tuned winner serves, with one warning in PyTorch's words naming it exactly when it is
    not deterministic (on the H200 it is not: fp16 d64 causal S256 picks det0)."""
    result = _probe_determinism()
    error = result["error"]
    assert served(error["stats"], "flash_bwd") == 1, error["stats"]
    assert error["stats"]["deterministic_backward"] == 1 and error["warnings"] == [], error
    warn = result["warn_only"]
    assert served(warn["stats"], "flash_bwd") == 1, warn["stats"]
    backward = [name for name in warn["stats"]["calls"] if "/bwd/" in name]
    assert len(backward) == 1, warn["stats"]
    if warn["stats"]["deterministic_backward"] == 1:
        assert warn["warnings"] == [], warn["warnings"]
    else:
        assert len(warn["warnings"]) == 1, warn["warnings"]
        message = warn["warnings"][0]
        assert "non-deterministic algorithm" in message and backward[0] in message
        assert "use_deterministic_algorithms(True, warn_only=False)" in message


@pytest.fixture(scope="module")
def undeclared_bundle(tmp_path_factory):
    """An archive of tests/gpu/fixtures/kernels/undeclared: the triton kernels under a family
    attnpack does not know to be deterministic."""
    if torch.version.hip is not None:
        pytest.skip("the fixture family is declared for sm_90 only")
    from attnpack.builder import BuildRequest, build_archives
    root = tmp_path_factory.mktemp("undeclared")
    kernels = root / "kernels"
    kernels.mkdir()
    os.symlink(Path(__file__).parent / "fixtures" / "kernels" / "undeclared", kernels / "undeclared")
    build_archives(BuildRequest(archs=("sm_90",), out_dir=root / "out", kernels_root=kernels,
                                tuning_db_dir=root, jobs=os.cpu_count() or 1))
    return root / "out"


def test_nondeterministic_backward_warns_like_pytorch_or_falls_back(undeclared_bundle):
    result = _probe_determinism({"ATTNPACK_BUNDLE_DIR": str(undeclared_bundle)})
    # warn_only=True: served by the non-deterministic backward, with one warning naming it and
    # saying what PyTorch's say (use_deterministic_algorithms(True, warn_only=False)).
    warn = result["warn_only"]
    assert served(warn["stats"], "flash_bwd") == 1 and warn["stats"]["deterministic_backward"] == 0
    assert len(warn["warnings"]) == 1, warn["warnings"]
    message = warn["warnings"][0]
    assert "non-deterministic algorithm" in message and "undeclared" in message
    assert "use_deterministic_algorithms(True, warn_only=False)" in message
    # warn_only=False: PyTorch's deterministic kernel serves it, and attnpack says why.
    error = result["error"]
    assert served(error["stats"], "flash_bwd") == 0
    assert error["stats"]["fallbacks"] == {
        "deterministic mode: no kernel declared deterministic serves bwd fp16 d64 causal": 1}
    assert not [w for w in error["warnings"] if "attnpack" in w]
