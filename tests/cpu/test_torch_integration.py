"""attnpack.torch on a CPU-only torch (CI): the extension builds against it, import registers
"ATTNPACK" and nothing else, enable/disable leave every SDPA setting as it was, CPU SDPA is
untouched, and each call's decision (served kernel or fallback reason) is exactly what it should
be, checked through explain() on archives opened with the runtime's recording driver.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.nn.attention, "register_flash_attention_impl"):
    pytest.skip("torch without torch.nn.attention.register_flash_attention_impl (< 2.11)",
                allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from torch.nn.attention import (current_flash_attention_impl,  # noqa: E402
                                list_flash_attention_impls)

import attnpack.torch as attnpack_torch  # noqa: E402
from attnpack.builder import BuildRequest, build_archives  # noqa: E402
from attnpack.cli import main as cli  # noqa: E402
from attnpack.torch import _build, _extension, _routing  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OPS = ("aten::_scaled_dot_product_flash_attention",
       "aten::_scaled_dot_product_flash_attention_backward",
       "aten::_scaled_dot_product_efficient_attention",
       "aten::_scaled_dot_product_efficient_attention_backward")
MATH, FLASH, EFFICIENT, CUDNN, OVERRIDEABLE = 0, 1, 2, 3, 4
CUDNN_FIRST = [CUDNN, FLASH, EFFICIENT, MATH, OVERRIDEABLE]  # torch >= 2.11 on sm_90, cuDNN > 9.15


@pytest.fixture(scope="session")
def extension():
    """libattnpack_torch: the one the package finds ($ATTNPACK_TORCH_LIB, or build/torch of
    this checkout, which setup.sh builds), else built here by CMake against this torch
    (incremental after the first run)."""
    found = _extension.library_path()
    if found.is_file():
        lib = found
    else:
        try:
            lib = _build.build(REPO / "build" / "torch-tests")
        except subprocess.CalledProcessError as e:
            pytest.fail(f"building the extension failed:\n{e.stdout[-4000:]}\n{e.stderr[-4000:]}")
        os.environ["ATTNPACK_TORCH_LIB"] = str(lib)
    ext = _extension.load()
    assert ext.path == lib
    return ext


@pytest.fixture(autouse=True)
def leave_pytorch_as_found():
    """Whatever a test does, the next one starts from PyTorch's own state."""
    order = list(torch._C._get_sdp_priority_order())
    yield
    attnpack_torch.disable()
    torch._C._set_sdp_priority_order(order)


def sdpa_state() -> dict:
    """Every PyTorch setting enable()/disable() could touch."""
    state = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        "overrideable": torch._C._get_overrideable_sdp_enabled(),
        "math_fp16_bf16_reduction": torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(),
        "priority": list(torch._C._get_sdp_priority_order()),
        "impl": current_flash_attention_impl(),
        "impls": list_flash_attention_impls(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "dispatch": {op: torch._C._dispatch_dump(op) for op in OPS},
        "cuda_kernels": [torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA") for op in OPS],
    }
    if hasattr(torch._C, "_get_fa3_sdp_enabled"):
        state["fa3"] = torch._C._get_fa3_sdp_enabled()
    return state


# ---- the extension and registration ---------------------------------------------------------

def test_extension_builds_against_this_torch(extension):
    assert extension.built_with == torch.__version__.split("+")[0]
    if shutil.which("readelf") is None:
        pytest.skip("no readelf to list the library's dependencies")
    dynamic = subprocess.run(["readelf", "-d", str(extension.path)], capture_output=True,
                             text=True, check=True).stdout
    needed = sorted(line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line)
    # The same source as on the GPU machine: no CUDA library, no Python, libattnpack linked.
    assert not [n for n in needed if "cuda" in n or "python" in n], needed
    assert any(n.startswith("libattnpack.so.") for n in needed), needed
    assert {"libc10.so", "libtorch_cpu.so"} <= set(needed), needed


def _probe(import_attnpack: bool) -> dict:
    code = (
        "import json, torch, torch.nn.attention as A\n"
        + ("import attnpack.torch, attnpack.torch._extension as E\n" if import_attnpack else "")
        + f"ops = {list(OPS)!r}\n"
        "print(json.dumps({'impls': A.list_flash_attention_impls(),\n"
        "  'current': A.current_flash_attention_impl(),\n"
        + ("  'extension_loaded': E.loaded() is not None,\n" if import_attnpack else "")
        + "  'cuda_kernels': [torch._C._dispatch_has_kernel_for_dispatch_key(o, 'CUDA') for o in ops],\n"
        "  'dispatch': [torch._C._dispatch_dump(o) for o in ops],\n"
        "  'priority': list(torch._C._get_sdp_priority_order()),\n"
        "  'cudnn': torch.backends.cuda.cudnn_sdp_enabled()}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    return json.loads(done.stdout)


def test_import_registers_attnpack_and_changes_nothing_else():
    without, with_import = _probe(False), _probe(True)
    assert "ATTNPACK" not in without["impls"]
    assert with_import["impls"] == sorted(without["impls"] + ["ATTNPACK"])
    assert with_import["current"] is None                 # registered, never auto-activated
    assert with_import["extension_loaded"] is False       # nothing loaded until activation
    for key in ("cuda_kernels", "dispatch", "priority", "cudnn"):
        assert with_import[key] == without[key], key
    assert with_import["cuda_kernels"] == [False] * 4     # a CPU torch has no CUDA kernels


def test_enable_disable_round_trip_restores_every_setting(extension):
    before = sdpa_state()
    for _ in range(2):
        attnpack_torch.enable()
        attnpack_torch.enable()  # enabling twice is one activation
        enabled = sdpa_state()
        assert enabled["impl"] == "ATTNPACK" and attnpack_torch.is_enabled()
        assert enabled["cuda_kernels"] == [True] * 4
        for op in OPS:
            assert "attnpack/torch/csrc/overrides.cpp" in enabled["dispatch"][op]
        # No cuDNN preference on a CPU torch: the order already has flash and efficient first.
        same = {k: v for k, v in enabled.items() if k not in ("impl", "dispatch", "cuda_kernels")}
        assert same == {k: v for k, v in before.items() if k not in ("impl", "dispatch", "cuda_kernels")}
        attnpack_torch.disable()
        assert sdpa_state() == before
        assert not attnpack_torch.is_enabled()
    attnpack_torch.disable()  # disabling when not enabled changes nothing
    assert sdpa_state() == before


def test_enable_moves_flash_and_efficient_ahead_of_preferred_cudnn(extension):
    torch._C._set_sdp_priority_order(CUDNN_FIRST)
    before = sdpa_state()
    attnpack_torch.enable()
    assert list(torch._C._get_sdp_priority_order()) == [FLASH, EFFICIENT, CUDNN, MATH, OVERRIDEABLE]
    assert torch.backends.cuda.cudnn_sdp_enabled() == before["cudnn"]  # cuDNN stays on, behind
    attnpack_torch.disable()
    assert sdpa_state() == before
    assert list(torch._C._get_sdp_priority_order()) == CUDNN_FIRST


def test_disable_keeps_an_order_set_while_enabled(extension, caplog):
    torch._C._set_sdp_priority_order(CUDNN_FIRST)
    attnpack_torch.enable()
    mine = [MATH, FLASH, EFFICIENT, CUDNN, OVERRIDEABLE]
    torch._C._set_sdp_priority_order(mine)
    with caplog.at_level("WARNING", logger="attnpack.torch"):
        attnpack_torch.disable()
    assert list(torch._C._get_sdp_priority_order()) == mine
    assert "priority order changed while attnpack was enabled" in caplog.text
    assert not attnpack_torch.is_enabled()


@pytest.mark.parametrize("order, expected", [
    ([3, 1, 2, 0, 4], [1, 2, 3, 0, 4]),
    ([1, 2, 0, 3, 4], [1, 2, 0, 3, 4]),   # PyTorch's default: unchanged
    ([3, 2, 1, 0, 4], [2, 1, 3, 0, 4]),   # relative order of flash/efficient kept
    ([0, 3, 1, 4, 2], [0, 1, 2, 3, 4]),
    ([1, 3, 0, 2, 4], [1, 2, 3, 0, 4]),
])
def test_flash_first(order, expected):
    assert _routing.flash_first(order) == expected


def test_another_implementation_replaces_attnpack(extension):
    from torch.nn.attention import _registry
    removed = []

    class Handle:
        def remove(self):
            removed.append(True)

    before = sdpa_state()
    torch.nn.attention.register_flash_attention_impl("ATTNPACK_TEST_OTHER", register_fn=Handle)
    try:
        attnpack_torch.enable()
        torch.nn.attention.activate_flash_attention_impl("ATTNPACK_TEST_OTHER")
        assert current_flash_attention_impl() == "ATTNPACK_TEST_OTHER"
        assert not attnpack_torch.is_enabled()
        state = sdpa_state()
        assert state["dispatch"] == before["dispatch"] and state["priority"] == before["priority"]
        attnpack_torch.disable()  # not the active one: leaves the other alone
        assert current_flash_attention_impl() == "ATTNPACK_TEST_OTHER" and removed == []
        torch.nn.attention.restore_flash_attention_impl()
        assert removed == [True]
    finally:
        _registry._FLASH_ATTENTION_IMPLS.pop("ATTNPACK_TEST_OTHER", None)
    assert sdpa_state() == before


def test_originals_on_a_cpu_torch(extension):
    attnpack_torch.enable()
    assert extension.originals() == {
        op: {"captured": False, "detail": f"no kernel for CUDA for {op}"} for op in OPS}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal, hkv", [(False, 4), (True, 4), (True, 2)])
def test_cpu_sdpa_untouched(extension, dtype, causal, hkv):
    def run():
        g = torch.Generator().manual_seed(7)
        q = torch.randn(2, 4, 33, 16, generator=g, dtype=dtype, requires_grad=True)
        k = torch.randn(2, hkv, 40, 16, generator=g, dtype=dtype, requires_grad=True)
        v = torch.randn(2, hkv, 40, 16, generator=g, dtype=dtype, requires_grad=True)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != 4)
        out.backward(torch.ones_like(out))
        return out.detach(), q.grad, k.grad, v.grad

    native = run()
    attnpack_torch.reset_stats()
    attnpack_torch.enable()
    served = run()
    for a, b in zip(native, served):
        assert torch.equal(a, b)
    assert attnpack_torch.stats() == attnpack_torch._empty_stats()  # no CUDA kernel ran


# ---- decisions, through explain() on archives ---------------------------------------------

@pytest.fixture(scope="session")
def toy_archive(toy_build):
    return str(next(p for p in toy_build.paths if p.name.endswith("-sm_90.apk")))


@pytest.fixture(scope="session")
def triton_archive(tmp_path_factory):
    """The real Triton family, fp16 head dim 64 only, for sm_90 (a few seconds)."""
    root = tmp_path_factory.mktemp("triton")
    req = BuildRequest(archs=("sm_90",), out_dir=root / "out", cache_dir=root / "cache", jobs=2,
                       families=("triton",), dtypes=("fp16",), head_dims=(64,))
    return str(build_archives(req)[0])


TOY = "toy/{op}/fp16-d32-{mask}/BLOCK16_warps1"


@pytest.mark.parametrize("case, expected", [
    # served: both ops, both passes; GQA on the flash op; causal Sq != Sk on the efficient op
    (dict(), TOY.format(op="fwd", mask="full")),
    (dict(causal=True), TOY.format(op="fwd", mask="causal")),
    (dict(op="bwd", causal=True), TOY.format(op="bwd", mask="causal")),
    (dict(shape=(3, 4, 2, 16, 16, 32), causal=True), TOY.format(op="fwd", mask="causal")),
    (dict(shape=(1, 2, 2, 17, 100, 32), causal=True), TOY.format(op="fwd", mask="causal")),
    (dict(shape=(1, 2, 2, 17, 100, 32), causal=True, op="bwd"), TOY.format(op="bwd", mask="causal")),
    (dict(entry="efficient_fwd"), TOY.format(op="fwd", mask="full")),
    (dict(entry="efficient_bwd", shape=(2, 2, 2, 17, 17, 32)), TOY.format(op="bwd", mask="full")),
    # what no archive changes
    (dict(dropout_p=0.1), "dropout_p > 0"),
    (dict(dropout_p=0.1, op="bwd"), "dropout_p > 0"),
    (dict(entry="flash_fwd", return_debug_mask=True, dropout_p=0.1), "return_debug_mask"),
    (dict(entry="efficient_fwd", attn_bias=True), "attn_bias"),
    (dict(entry="efficient_bwd", attn_bias=True), "attn_bias"),
    (dict(scale=0.0), "scale is not positive and finite"),
    (dict(scale=float("inf")), "scale is not positive and finite"),
    (dict(dtype="fp64", shape=(1, 2, 2, 16, 16, 32)), "dtype fp64 not served"),
    (dict(entry="flash_fwd", shape=(1, 2, 2, 16, 40, 32), causal=True),
     "causal with Sq != Sk on the flash op (its mask is bottom-right aligned)"),
    (dict(entry="efficient_fwd", shape=(1, 4, 2, 16, 16, 32)), "Hq != Hkv on the efficient op"),
    (dict(shape=(1, 3, 2, 16, 16, 32)), "Hq not a multiple of Hkv"),
    (dict(shape=(0, 2, 2, 16, 16, 32)), "empty tensor"),
    (dict(op="bwd", deterministic=True), "deterministic mode: no kernel declared deterministic serves bwd fp16 d32 full"),
    # what the runtime says about this archive
    (dict(dtype="bf16"), "dtype bf16 not built"),
    (dict(dtype="fp32", entry="efficient_fwd"), "dtype fp32 not built"),
    (dict(shape=(1, 2, 2, 16, 16, 64)), "head_dim 64 not built"),
], ids=lambda x: json.dumps(x) if isinstance(x, dict) else None)
def test_decision(extension, toy_archive, case, expected):
    case = dict(case)
    shape = case.pop("shape", (1, 2, 2, 16, 16, 32))
    dtype = case.pop("dtype", "fp16")
    result = attnpack_torch.explain(shape, dtype, archive=toy_archive, arch="sm_90", **case)
    if expected.startswith("toy/"):
        assert (result["served"], result["kernel"], result["family"], result["reason"]) == \
            (True, expected, "toy", None), result
        assert f"kernel: {expected}" in result["runtime"]
    else:
        assert (result["served"], result["kernel"], result["reason"]) == (False, None, expected), result


def test_decision_with_the_triton_family(extension, triton_archive):
    def decide(shape, causal=False, op="fwd", **kw):
        return attnpack_torch.explain(shape, "fp16", causal, op, archive=triton_archive,
                                      arch="sm_90", **kw)
    # The Triton backward has no atomics: served in deterministic mode too.
    r = decide((2, 8, 8, 128, 128, 64), True, "bwd", deterministic=True)
    assert r["served"] and r["family"] == "triton" and r["kernel"].startswith("triton/bwd/fp16-d64-causal/")
    # GQA (Hkv < Hq) reaches the flash op un-expanded and is served there.
    r = decide((3, 32, 8, 1000, 1000, 64), True)
    assert r["entry"] == "flash_fwd" and r["kernel"].startswith("triton/fwd/fp16-d64-causal/")
    # Causal Sq != Sk: PyTorch's flash check refuses it, the efficient op serves it, top-left.
    r = decide((1, 8, 8, 17, 1000, 64), True, "bwd")
    assert r["entry"] == "efficient_bwd" and r["kernel"].startswith("triton/bwd/fp16-d64-causal/")
    # ... unless it is GQA too: then neither op is reached.
    r = decide((1, 32, 8, 17, 1000, 64), True)
    assert (r["entry"], r["served"]) == (None, False)
    assert decide((1, 8, 8, 128, 128, 128))["reason"] == "head_dim 128 not built"


def test_explain_refuses_an_archive_for_another_arch(extension, toy_build):
    gfx950 = str(next(p for p in toy_build.paths if p.name.endswith("-gfx950.apk")))
    with pytest.raises(RuntimeError, match=r"arch_mismatch: archive .*gfx950.* but sm_90 was asked for"):
        attnpack_torch.explain((1, 2, 2, 16, 16, 32), "fp16", archive=gfx950, arch="sm_90")


@pytest.mark.parametrize("args, expected", [
    (("bf16", 32, 8, 128, 128, 128, True), "flash"),
    (("bf16", 8, 8, 17, 1000, 64, True), "efficient"),   # causal Sq != Sk
    (("bf16", 32, 8, 17, 1000, 64, True), None),         # ... with GQA
    (("fp16", 8, 8, 17, 1000, 64, False), "flash"),
    (("fp32", 8, 8, 128, 128, 64, False), "efficient"),  # flash takes no fp32
    (("fp32", 32, 8, 128, 128, 64, False), None),
    (("bf16", 8, 8, 128, 128, 512, False), "efficient"),  # head dim over 256
])
def test_sdpa_entry(args, expected):
    assert attnpack_torch.sdpa_entry(*args) == expected


def test_cli_explain(extension, toy_archive):
    runner = CliRunner()
    base = ["explain", "--dtype", "fp16", "--archive", toy_archive, "--arch", "sm_90"]
    done = runner.invoke(cli, base + ["--shape", "1,2,2,16,40,32", "--causal", "--op", "bwd", "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert (result["entry"], result["served"], result["kernel"]) == \
        ("efficient_bwd", True, TOY.format(op="bwd", mask="causal"))
    done = runner.invoke(cli, base + ["--shape", "1,2,2,16,16,64"])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[:3] == [
        "F.sdpa fp16 B=1 Hq=2 Hkv=2 Sq=16 Sk=16 D=64 full (fwd)",
        "aten op:  aten::_scaled_dot_product_flash_attention",
        f"archive:  {toy_archive} (sm_90)"]
    assert "fallback: PyTorch's own kernel -- head_dim 64 not built" in done.output
    if not torch.cuda.is_available():
        done = runner.invoke(cli, ["explain", "--shape", "1,2,2,16,16,32"])
        assert done.exit_code == 1 and "no CUDA device here" in done.output
    done = runner.invoke(cli, base + ["--shape", "1,2,2,16"])
    assert done.exit_code == 2 and "expected B,Hq,Hkv,Sq,Sk,D" in done.output
