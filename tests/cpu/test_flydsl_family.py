"""The flydsl family (aot/kernels/flydsl_attn) in the gfx950 archive.

The archive is built by the normal builder (gfx950, families flydsl + triton, head dims 64 and
128) with a freshly seeded untuned database (`attnpack db seed`'s rule), so these tests do not
depend on the committed aot/tuning_db. Then: `attnpack verify` and a static check of each
FlyDSL image, a forward launched by the recording driver in a process where `import flydsl`
fails, and which keys FlyDSL serves against triton. The kernel is built, not run: no AMD GPU.

Needs build_tools/install_flydsl.sh's toolchain (setup.sh installs it) and libattnpack
($ATTNPACK_RUNTIME_LIB or build/). Compiles go through the default compile cache, which
setup.sh's build has already filled.
"""
import json
import math
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from attnpack import abi
from attnpack import runtime as rt
from attnpack.archive import Image, read_archive, write_archive
from attnpack.archive.elf import kernel_facts
from attnpack.archive.verify import _fills_arguments, verify_archive
from attnpack.builder import BuildRequest, build_archives
from attnpack.builder.build import default_cache_dir
from attnpack.builder.compile import CompileJob
from attnpack.family import FunctionalKey, load_families
from attnpack.keys import TuneKey
from attnpack.targets import EM_AMDGPU, target
from attnpack.tune.db import save_db, seed_untuned
from attnpack.tune.runner import standard_keys
from flydsl_attn_loader import flydsl_attn, toolchain_missing

why = toolchain_missing()
pytestmark = pytest.mark.skipif(why is not None, reason=why or "")
fa = flydsl_attn()
VARIANTS = [(dt, d, c) for dt in ("bf16", "fp16") for d in (64, 128) for c in (False, True)]
PACK = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}
LDS_LIMIT = 160 * 1024


def _flydsl_and_triton():
    """The families this file builds: FlyDSL against the catch-all (the AITER family serves
    buckets of its own on gfx950, tested in test_aiter_asm_family.py)."""
    return {n: f for n, f in load_families().items() if n in ("flydsl", "triton")}


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("flydsl")
    (root / "db").mkdir()
    save_db(seed_untuned("gfx950", standard_keys(), _flydsl_and_triton()), root / "db" / "gfx950.jsonl")
    req = BuildRequest(archs=("gfx950",), out_dir=root / "out", families=("flydsl", "triton"),
                       head_dims=(64, 128), tuning_db_dir=root / "db",
                       cache_dir=default_cache_dir(), jobs=2)
    [path] = build_archives(req)
    return path


def flydsl_kernels(ar):
    return {(k["key"]["dtype"], k["key"]["head_dim"], k["key"]["causal"]): k
            for k in ar.kernels if k["family"] == "flydsl"}


def test_the_archive_holds_the_flydsl_family_and_verifies(archive):
    ar, problems, warnings = verify_archive(archive)
    assert problems == []
    assert not [w for w in warnings if "flydsl_attn_fwd" in w]
    assert ar.meta["compilers"]["flydsl"] == fa.backend.FLYDSL_VERSION_PINNED == "0.4.2"
    assert "triton" in ar.meta["compilers"]
    assert ar.index["families"]["flydsl"] == {
        "backend": "flydsl", "compilers": ["flydsl"], "priority": 50,
        "provenance": dict(fa.SPEC.provenance)}
    kernels = flydsl_kernels(ar)
    assert sorted(kernels) == sorted(VARIANTS)
    assert {k["name"] for k in kernels.values()} == {v.name for v in fa.SPEC.default_variants("gfx950")}
    # triton stays the per-functional catch-all; FlyDSL is selected by tuning entries only
    assert {s["kernel"].split("/")[0] for s in ar.index["selection"]} == {"triton"}
    entries = ar.index["tuning"]["entries"]
    served = [k for k in standard_keys() if k.op == "fwd" and k.sq >= 256 and k.sk >= 256]
    assert sum(e["kernel"].startswith("flydsl/") for e in entries) == len(served) > 0


def disassemble(image: bytes, tmp_path) -> str:
    path = tmp_path / "k.co"
    path.write_bytes(image)
    return subprocess.run(["llvm-objdump-22", "-d", "--mcpu=gfx950", str(path)],
                          check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-d{v[1]}-{'causal' if v[2] else 'full'}")
def test_each_flydsl_image(archive, variant, tmp_path):
    dtype, D, causal = variant
    ar = read_archive(archive)
    kernel = flydsl_kernels(ar)[variant]
    [step] = kernel["steps"]
    image = ar.image(step["image"])
    assert image[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", image, 0x12)[0] == EM_AMDGPU == 224
    assert struct.unpack_from("<I", image, 0x30)[0] & 0xFF == target("gfx950").elf_mach == 0x4F
    facts = kernel_facts(image, step["symbol"])
    assert facts.arch == "gfx950" and step["symbol"] == fa.backend.ENTRY_SYMBOL in facts.symbols
    res = facts.resources
    cfg = fa.tiles.check_config(D, dtype, kernel["config"])
    assert res["lds_bytes"] == fa.tiles.lds_bytes(D, cfg) <= LDS_LIMIT
    # 512 unified registers per SIMD lane, shared by the waves on it (8 waves: 2 per SIMD)
    assert res["vgpr"] + res["agpr"] <= 512 // (fa.tiles.threads(cfg) // 64 // 4) == 256
    assert res["scratch_bytes"] == 0 and res["vgpr_spills"] == 0 and res["sgpr_spills"] == 0
    assert res["wavefront_size"] == 64
    assert step["block"] == [fa.tiles.threads(cfg), 1, 1] == [512, 1, 1]
    assert step["shared"] == 0 and step["cluster"] == [1, 1, 1] and step["tensormaps"] == []

    text = disassemble(image, tmp_path)
    mfma = "v_mfma_f32_32x32x16_" + ("bf16" if dtype == "bf16" else "f16")
    counts = {op: len(re.findall(rf"\b{op}\b", text))
              for op in (mfma, "ds_read_b64_tr_b16", "s_setprio", "s_barrier", "ds_bpermute_b32")}
    # the loop body's Sᵀ = K Qᵀ and Oᵀ += Vᵀ Pᵀ, and the peeled first and last phases
    assert counts[mfma] >= 2 * (D // 16 * cfg["block_n"] // 32 + D // 32 * cfg["block_n"] // 16)
    assert counts["ds_read_b64_tr_b16"] >= 2 * (D // 32) * (cfg["block_n"] // 16)
    assert "s_setprio 1" in text and "s_setprio 0" in text
    assert counts["s_barrier"] >= 6   # prologue, stagger x2, A_0, B_0, loop A/B, A_n
    assert "scratch_" not in text  # no spill traffic


def test_launch_spec_fills_the_kernarg_segment_word_by_word(archive):
    """Every kernarg byte the code object declares is filled by exactly one launch-spec field of
    the word's wire type, each field inside one argument (pointer, layout struct, scalar)."""
    ar = read_archive(archive)
    for kernel in flydsl_kernels(ar).values():
        [step] = kernel["steps"]
        facts = kernel_facts(ar.image(step["image"]), step["symbol"])
        assert step["kernarg_size"] == facts.kernarg_size == 204  # 4 x (8 + 40) + 8 + 4
        assert facts.params == [(0, 8), (8, 40), (48, 8), (56, 40), (96, 8), (104, 40),
                                (144, 8), (152, 40), (192, 8), (200, 4)]
        fields = [(off, abi.WIRE_SIZE[typ]) for _, typ, _, off in step["params"]]
        assert _fills_arguments(fields, facts.params) == []
        covered = bytearray(204)
        for word, typ, div, off in step["params"]:
            assert typ in abi.param_types(word) and off % abi.WIRE_SIZE[typ] == 0
            for i in range(off, off + abi.WIRE_SIZE[typ]):
                assert not covered[i], f"byte {i} filled twice"
                covered[i] = 1
            want_div = (16 if word in ("q", "k", "v", "o") else 4 if word == "lse"
                        else 8 if "_stride_" in word else 1)
            assert div == want_div, (word, div)
        assert all(covered)
        by_offset = {off: word for word, _, _, off in step["params"]}
        assert [by_offset[o] for o in range(48, 96) if o in by_offset] == [
            "k", "B", "Hkv", "Sk", "D", "k_stride_b", "k_stride_h", "k_stride_s"]
        assert by_offset[0] == "q" and by_offset[192] == "lse" and by_offset[200] == "sm_scale_log2"
        assert step["grid"] == [[["Sq", 256]], [["B", 1], ["Hq", 1]], []]


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """The archive again with one FlyDSL step edited (hashes stay consistent)."""
    ar = read_archive(src)
    kernels = ar.kernels
    edit(next(k for k in kernels if k["family"] == "flydsl")["steps"][0])
    images = [Image(r["kind"], r["symbol"], ar.image(i)) for i, r in enumerate(ar.index["images"])]
    dst.parent.mkdir(parents=True, exist_ok=True)
    return write_archive(dst, arch=ar.arch, target=ar.target, bundle_version=ar.meta["bundle_version"],
                         compilers=ar.meta["compilers"], images=images, kernels=kernels,
                         selection=ar.index["selection"], families=ar.index["families"])


def test_verify_refuses_fields_that_leave_an_argument_unfilled_or_too_much_lds(archive, tmp_path):
    def drop_q_head_dim(step):  # q's struct loses its D (bytes 20..23)
        step["params"] = [p for p in step["params"] if p[3] != 20]

    def scale_past_the_args(step):  # the scale moved behind the last argument
        step["params"][-1][3] = 204
        step["kernarg_size"] = 208

    def ask_for_dynamic_lds(step):
        step["shared"] = 110 * 1024

    cases = {drop_q_head_dim: [r"ELF argument \(8, 40\) \(offset, size\) is not filled end to end"],
             scale_past_the_args: [r"ELF argument \(200, 4\) \(offset, size\) is not filled",
                                   r"launch spec field \(204, 4\) \(offset, size\) lies in no ELF argument",
                                   r"ELF kernarg size 204 != launch spec 208"],
             ask_for_dynamic_lds: [r"\d+ bytes of static LDS \+ 112640 dynamic > 163840"]}
    for edit, expected in cases.items():
        path = _rewrite(archive, tmp_path / edit.__name__ / archive.name, edit)
        _, problems, _ = verify_archive(path)
        assert len(problems) == len(expected), problems
        for pattern in expected:
            assert any(re.search(pattern, p) for p in problems), (pattern, problems)


def test_backend_versions_and_cache_key(monkeypatch):
    backend = fa.backend.FlyDSLBackend()
    assert backend.versions() == {"flydsl": "0.4.2"}
    variant = fa.SPEC.default_variants("gfx950")[0]
    job = CompileJob(variant, variant.steps[0])
    assert job.backend.name == "flydsl" and type(job.backend).__name__ == "FlyDSLBackend"
    key = backend.cache_key(job)
    assert key == backend.cache_key(CompileJob(variant, variant.steps[0]))
    monkeypatch.setattr(fa.backend, "flydsl_version", lambda: "0.4.3")
    assert backend.cache_key(job) != key
    other = fa.SPEC.variant("gfx950", "fwd", variant.key, {"waves_per_group": 2, "block_n": 64})
    monkeypatch.undo()
    assert backend.cache_key(CompileJob(other, other.steps[0])) != key
    k = fa.backend.cache_key
    base = k("src", "0.4.2", "gfx950", {"block_n": 32})
    assert len({base, k("src2", "0.4.2", "gfx950", {"block_n": 32}),
                k("src", "0.4.3", "gfx950", {"block_n": 32}),
                k("src", "0.4.2", "gfx942", {"block_n": 32}),
                k("src", "0.4.2", "gfx950", {"block_n": 64})}) == 5


def test_refuses_other_archs_and_spilling_configs():
    with pytest.raises(ValueError, match="gfx942"):
        fa.backend.compile_forward("gfx942", "bf16", 128, False, {})
    key = FunctionalKey("bf16", 128, False)
    assert "spilled" in fa.SPEC.excluded("gfx950", "fwd", key, {"waves_per_group": 4, "block_n": 64})
    assert fa.SPEC.excluded("gfx950", "fwd", key, {"waves_per_group": 2, "block_n": 64}) is None


# ---- No FlyDSL at run time ----------------------------------------------------------------
B, HQ, HKV, SQ, SK, D = 2, 8, 2, 1000, 777, 128
POINTERS = {"q": 0x100000, "k": 0x200000, "v": 0x300000, "o": 0x400000, "lse": 0x500000,
            "do": 0x600000, "dq": 0x700000, "dk": 0x800000, "dv": 0x900000}
# BSHD views for q/o (distinct strides per axis), BHSD for k/v
STRIDES = {"q": (SQ * HQ * D, D, HQ * D, 1), "o": (SQ * HQ * D, D, HQ * D, 1),
           "k": (HKV * SK * D, SK * D, D, 1), "v": (HKV * SK * D, SK * D, D, 1)}
SCALE = 0.08

RUN_WITHOUT_FLYDSL = r"""
import importlib.abc, json, sys

class NoFlyDSL(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "flydsl" or name.startswith("flydsl."):
            raise ImportError(f"{name} is blocked: FlyDSL is a build-time dependency only")
        return None

sys.meta_path.insert(0, NoFlyDSL())
try:
    import flydsl  # noqa: F401
    sys.exit("import flydsl was not blocked")
except ImportError:
    pass

from attnpack import runtime as rt
case = json.loads(sys.argv[2])
problem = lambda op: rt.make_problem(op, "bf16", causal=True, scale=case["scale"],
                                     strides={t: tuple(s) for t, s in case["strides"].items()},
                                     pointers=case["pointers"], **case["sizes"])
with rt.Bundle(sys.argv[1], recording=True) as bundle:
    fwd, bwd = bundle.select(problem("fwd")), bundle.select(problem("bwd"))
    bundle.forward(problem("fwd"))
    recorded = bundle.recorded_launches()
maps = open("/proc/self/maps").read()
print(json.dumps({"fwd": [fwd.name, fwd.backend], "bwd": [bwd.name, bwd.family],
                  "recorded": recorded,
                  "flydsl_modules": sorted(m for m in sys.modules if m.split(".")[0] == "flydsl"),
                  # FlyDSL's runtime libraries (libfly_jit_runtime, its MLIR) live in its package
                  "fly_libraries": sorted({path for path in (line.split()[-1] for line in
                                                             maps.splitlines() if "/" in line)
                                           if "site-packages/flydsl" in path
                                           or path.rsplit("/", 1)[-1].startswith("libfly")})}))
"""


def value_of(word: str) -> int | float:
    """A launch word's value for the problem above, as the runtime must resolve it."""
    sizes = {"B": B, "Hq": HQ, "Hkv": HKV, "Sq": SQ, "Sk": SK, "D": D}
    if word in sizes:
        return sizes[word]
    if word in POINTERS:
        return POINTERS[word]
    if word == "sm_scale_log2":
        return SCALE * math.log2(math.e)
    tensor, _, axis = word.partition("_stride_")
    return STRIDES[tensor]["bhs".index(axis)]


def test_a_forward_launches_from_the_archive_with_flydsl_blocked(archive):
    case = {"sizes": dict(B=B, Hq=HQ, Hkv=HKV, Sq=SQ, Sk=SK, D=D), "scale": SCALE,
            "strides": STRIDES, "pointers": POINTERS}
    run = subprocess.run([sys.executable, "-c", RUN_WITHOUT_FLYDSL, str(archive), json.dumps(case)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["flydsl_modules"] == [] and out["fly_libraries"] == []
    name = "flydsl/fwd/bf16-d128-causal/waves_per_group4_block_n32"
    assert out["fwd"] == [name, "flydsl"]
    assert out["bwd"][1] == "triton"   # its backward reads this forward's LSE

    step = next(k for k in read_archive(archive).kernels if k["name"] == name)["steps"][0]
    expected = bytearray(step["kernarg_size"])
    for word, typ, _, offset in step["params"]:   # hand-packed from the index's offsets
        struct.pack_into(PACK[typ], expected, offset, value_of(word))
    [launch] = out["recorded"]["launches"]
    assert launch["symbol"] == "flydsl_attn_fwd_0"
    assert bytes.fromhex(launch["args"]) == bytes(expected) and len(expected) == 204
    assert launch["arg_offsets"] == [p[3] for p in step["params"]]
    assert launch["grid"] == [math.ceil(SQ / 256), B * HQ, 1] == [4, 16, 1]
    assert launch["block"] == [512, 1, 1] and launch["cluster"] == [1, 1, 1]
    assert launch["shared"] == 0       # the 51 KiB of LDS are the code object's static segment
    sha256 = read_archive(archive).index["images"][step["image"]]["sha256"].hex()
    assert out["recorded"]["loaded"] == [f"flydsl_attn_fwd_0 {sha256}"]


# ---- Selection ------------------------------------------------------------------------------
def test_seeding_gives_flydsl_exactly_the_buckets_it_serves():
    keys = standard_keys()
    seeded = seed_untuned("gfx950", keys, _flydsl_and_triton())
    assert len(seeded.entries) == len(keys)
    for key, entry in seeded.entries.items():
        serves = key.op == "fwd" and key.sq >= 256 and key.sk >= 256
        assert entry["family"] == ("flydsl" if serves else "triton"), key.text
        if serves:
            assert entry["kernel"] == fa.SPEC.variant(
                "gfx950", "fwd", key.functional, fa.SPEC.default_config("gfx950", "fwd", key.functional)).name
    reason = fa.SPEC.serves("gfx950", TuneKey("fwd", "bf16", 128, True, 1, 128, 4096, 128))
    assert reason.startswith("Sq bucket 128, Sk bucket 4096: below 256")
    # no other arch: the family declares gfx950 only
    assert all(e["family"] == "triton"
               for e in seed_untuned("gfx942", keys, _flydsl_and_triton()).entries.values())


# shapes in buckets of the seeded grid (runner.STANDARD_PAIRS); a bucket off the grid takes the
# nearest entry's kernel (the runtime's rule, docs/tuning.md), whichever family that is
@pytest.mark.parametrize("Sq,Sk,family", [(1000, 1000, "flydsl"), (4096, 4096, "flydsl"),
                                          (129, 129, "flydsl"), (3000, 800, "flydsl"),
                                          (900, 7000, "flydsl"), (128, 128, "triton"),
                                          (1, 4096, "triton"), (100, 100, "triton"),
                                          (64, 3000, "triton")])
@pytest.mark.parametrize("dtype,D,causal,gqa", [("bf16", 128, True, 4), ("fp16", 64, False, 1)])
def test_which_keys_flydsl_serves(archive, Sq, Sk, family, dtype, D, causal, gqa):
    prob = rt.make_problem("fwd", dtype, B=1, Hq=8 * gqa, Hkv=8, Sq=Sq, Sk=Sk, D=D, causal=causal)
    with rt.Bundle(archive, recording=True) as bundle:
        kernel = bundle.select(prob)
        text = bundle.explain(prob)
        backward = bundle.select(rt.make_problem("bwd", dtype, B=1, Hq=8 * gqa, Hkv=8, Sq=Sq,
                                                 Sk=Sk, D=D, causal=causal))
    assert kernel.family == family, text
    assert kernel.name.startswith(f"{family}/fwd/{dtype}-d{D}-{'causal' if causal else 'full'}/")
    assert re.search(rf"tuned {re.escape(kernel.name)}: chosen", text), text
    assert f"kernel: {kernel.name} (family {family}," in text
    assert backward.family == "triton"
