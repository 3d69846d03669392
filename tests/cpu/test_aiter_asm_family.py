"""The aiter_asm family through the builder and the runtime, on the CPU (built, not run: no AMD
GPU here).

The archives are the bf16 head-dim-128 slice of what the default gfx942/gfx950 bundles hold
once `attnpack db seed` has given AITER the tuning buckets it serves: the triton family as
every key's default, AITER's kernels where the seeded database picks them. They use the user's
compile cache (the setup's default bundle build fills the triton part) and the cached wheel.
"""
import dataclasses
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.elf import kernel_facts
from attnpack.archive.verify import verify_archive
from attnpack.builder import BuildRequest, build_archives
from attnpack.builder.build import default_cache_dir
from attnpack.builder.compile import CompileFailure
from attnpack.family import kernels_root, load_families
from attnpack.targets import target

from conftest import build

POINTERS = {"q": 0x7f0000001000, "k": 0x7f0000002000, "v": 0x7f0000003000,
            "o": 0x7f0000004000, "lse": 0x7f0000005000, "do": 0x7f0000006000,
            "dq": 0x7f0000007000, "dk": 0x7f0000008000, "dv": 0x7f0000009000}
MI300 = "aiter_asm/fwd/bf16-d128-causal/buildMI300"
MI308 = "aiter_asm/fwd/bf16-d128-causal/buildMI308"


def _seeded_db_dir(root, archs):
    from attnpack.tune.db import save_db, seed_untuned
    from attnpack.tune.runner import standard_keys
    folder = root / "tuning_db"
    folder.mkdir(parents=True)
    # the families this file builds (others, FlyDSL's, would take buckets of their own)
    families = {n: f for n, f in load_families().items() if n in ("triton", "aiter_asm")}
    for arch in archs:
        save_db(seed_untuned(arch, standard_keys(dtypes=("bf16",), head_dims=(128,)), families),
                folder / f"{arch}.jsonl")
    return folder


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """arch -> the bf16 d128 slice of the seeded default bundle, plus the MI308 builds."""
    root = tmp_path_factory.mktemp("aiter")
    archs = ("gfx942", "gfx950")
    req = build(root / "out", None, default_cache_dir(), archs=archs, families=("triton", "aiter_asm"),
                dtypes=("bf16",), head_dims=(128,), tuning_db_dir=_seeded_db_dir(root, archs))
    paths = {p.name.split("-")[-1][:-4]: p for p in req.paths}
    # the whole declared space of the forward on gfx942 (both CU builds), for forced names
    everything = build(root / "all", None, default_cache_dir(), archs=("gfx942",),
                       families=("triton", "aiter_asm"), dtypes=("bf16",), head_dims=(128,),
                       ops=("fwd",), all_variants=True,
                       tuning_db_dir=_seeded_db_dir(root / "all", ("gfx942",)))
    paths["gfx942-all"] = everything.paths[0]
    return paths


def _modules():
    import importlib
    package = load_families()["aiter_asm"].steps.__module__.rsplit(".", 1)[0]
    return (importlib.import_module(f"{package}.kernels"),
            importlib.import_module(f"{package}.source"))


kernels, source = _modules()


def _problem(op="fwd", causal=True, kernel=None, **sizes):
    shape = {"B": 2, "Hq": 16, "Hkv": 4, "Sq": 1024, "Sk": 1024, "D": 128, **sizes}
    return rt.make_problem(op, "bf16", causal=causal, scale=0.125, pointers=POINTERS,
                           kernel=kernel, **shape)


def _bundle(path, monkeypatch, num_sms=None):
    if num_sms is None:
        monkeypatch.delenv("ATTNPACK_RECORDING_NUM_SMS", raising=False)
    else:
        monkeypatch.setenv("ATTNPACK_RECORDING_NUM_SMS", str(num_sms))
    return rt.Bundle(path, recording=True)


# ---- the archives ---------------------------------------------------------------------------

def test_the_archives_hold_the_family_and_verify(archives):
    for arch in ("gfx942", "gfx950"):
        ar, problems, _ = verify_archive(archives[arch])
        assert problems == []
        aiter = {k["name"]: k for k in ar.kernels if k["family"] == "aiter_asm"}
        build_tag = "buildMI300" if arch == "gfx942" else "buildsingle"
        assert sorted(aiter) == [f"aiter_asm/bwd/bf16-d128-{m}/buildsingle" for m in
                                 ("causal", "full")] + [
            f"aiter_asm/fwd/bf16-d128-{m}/{build_tag}" for m in ("causal", "full")]
        # the per-functional defaults stay triton's: AITER serves only tuned buckets
        assert {e["kernel"].split("/")[0] for e in ar.index["selection"]} == {"triton"}
        tuned = [e for e in ar.index["tuning"]["entries"] if e["kernel"] in aiter]
        assert tuned and all(e["gqa"] == 1 for e in tuned if e["op"] == "bwd")
        assert all(e["sq"] == e["sk"] for e in tuned if e["op"] == "fwd" and e["causal"])
        family = ar.index["families"]["aiter_asm"]
        assert (family["backend"], family["priority"], family["compilers"]) == (
            "prebuilt", 60, ["triton"])      # the backward's glue steps are Triton kernels
        assert family["provenance"]["license"] == "MIT"
        assert family["provenance"]["wheel_sha256"] == source.WHEEL_SHA256
        for part in (source.WHEEL_NAME, source.WHEEL_SHA256, "MIT License",
                     "Permission is hereby granted"):
            assert part in family["notice"]
        for name, k in aiter.items():
            assert k["deterministic"] == (k["op"] == "fwd")
            steps = [s["name"] for s in k["steps"]]
            assert steps == (["fwd"] if k["op"] == "fwd" else ["prepare", "asm", "convert_dq"])
            ops = [r[:3] for r in k.get("requires", [])]
            if k["op"] == "bwd":
                assert ops == [["Hq_per_Hkv", "==", 1]]
            else:
                assert ops == ([["Sq", "==", "Sk"], ["Hq", "multiple_of", 8], ["Sq", "<=", 16384]]
                               if k["key"]["causal"] else []) + (
                    [["num_sms", "==", 304]] if arch == "gfx942" else [])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_each_aiter_image_is_the_declared_code_object(archives, arch):
    """What `attnpack verify` checks of each, spelled out: ELF machine AMDGPU, the arch's flags,
    the entry symbol, and the kernarg segment equal to the declared buffer; the padding the
    index records is exactly the metadata's `pad` slots."""
    ar = read_archive(archives[arch])
    for k in ar.kernels:
        for s in k["steps"]:
            if s["name"] not in ("fwd", "asm") or k["family"] != "aiter_asm":
                continue
            raw = ar.image(s["image"])
            assert struct.unpack_from("<H", raw, 0x12)[0] == 224                  # EM_AMDGPU
            assert struct.unpack_from("<I", raw, 0x30)[0] & 0xFF == target(arch).elf_mach
            facts = kernel_facts(raw, s["symbol"])
            assert s["symbol"] in facts.symbols and s["symbol"].startswith("_ZN5aiter")
            [obj] = [o for o in kernels.CODE_OBJECTS if o.symbol == s["symbol"]
                     and o.arch == arch and (o.cu_variant in ("single", "MI300"))]
            assert hashlib.sha256(raw).hexdigest() == obj.sha256
            assert facts.kernarg_size == s["kernarg_size"] == obj.layout.size
            pads = [[off, size] for (off, size), name in zip(facts.params, facts.param_names)
                    if name == "pad"]
            assert s["padding"] == pads and pads
            assert sorted([p[3] for p in s["params"]] + [p[0] for p in pads]) == \
                [off for off, _ in facts.params]
            assert s["block"] == [obj.block, 1, 1] and s["shared"] == 0


# ---- selection ------------------------------------------------------------------------------

def test_gfx942_forward_is_chosen_only_on_its_cu_count_and_shapes(archives, monkeypatch):
    path = archives["gfx942"]
    with _bundle(path, monkeypatch, num_sms=304) as bundle:
        assert bundle.select(_problem()).name == MI300
        assert bundle.select(_problem(causal=False, Hq=6, Hkv=2, Sq=1000, Sk=8000)).name == \
            "aiter_asm/fwd/bf16-d128-full/buildMI300"
        for sizes, reason in [
            ({"Sq": 1000}, "requires Sq == Sk (bottom-right causal mask: F.sdpa's top-left mask "
                           "is the same only when Sq == Sk): Sq=1000, Sk=1024"),
            ({"Hq": 12}, "requires Hq multiple_of 8 (AITER runs this masked forward with "
                         "tune_opt 5 only then, the schedule attnpack ships): Hq=12"),
        ]:
            text = bundle.explain(_problem(**sizes))
            assert f"tuned {MI300}: rejected, {reason}" in text
            assert bundle.select(_problem(**sizes)).name.startswith("triton/fwd/bf16-d128-causal/")
    for sms in (132, 80):    # the recording driver's own count, and an MI308X's
        with _bundle(path, monkeypatch, num_sms=None if sms == 132 else sms) as bundle:
            text = bundle.explain(_problem())
            assert (f"tuned {MI300}: rejected, requires num_sms == 304 (the MI300X/MI325X build: "
                    f"needs a 304-CU device): this device has {sms}") in text
            assert bundle.select(_problem()).name.startswith("triton/fwd/bf16-d128-causal/")


def test_the_mi308_build_is_chosen_on_an_mi308(archives, monkeypatch):
    path = archives["gfx942-all"]
    with _bundle(path, monkeypatch, num_sms=80) as bundle:
        assert bundle.select(_problem(kernel=MI308)).name == MI308
        with pytest.raises(rt.Unsupported) as e:
            bundle.select(_problem(kernel=MI300))
        assert e.value.message.endswith("needs a 304-CU device): this device has 80")
    with _bundle(path, monkeypatch, num_sms=304) as bundle:
        with pytest.raises(rt.Unsupported) as e:
            bundle.select(_problem(kernel=MI308))
        assert e.value.message == ("requires num_sms in {80, 64} (the MI308X build: needs an "
                                   "80- or 64-CU device): this device has 304")


def test_without_a_device_the_cu_count_is_unknown_and_triton_serves(archives):
    # A HIP bundle on this machine, which has no AMD GPU: explain and select ask the device,
    # get no answer, and do not take a CU requirement as met.
    with rt.Bundle(archives["gfx942"], arch="gfx942") as bundle:
        text = bundle.explain(_problem())
        assert (f"tuned {MI300}: rejected, requires num_sms == 304 (the MI300X/MI325X build: "
                "needs a 304-CU device): the device's multiprocessor count is not known here "
                "(no device was asked)") in text
        assert bundle.select(_problem()).name.startswith("triton/")
    with rt.Bundle(archives["gfx950"], arch="gfx950") as bundle:  # no CU requirement there
        assert bundle.select(_problem()).name == "aiter_asm/fwd/bf16-d128-causal/buildsingle"


def test_the_backward_is_mha_only_and_within_32_bit_strides(archives, monkeypatch):
    for arch in ("gfx942", "gfx950"):
        bwd = "aiter_asm/bwd/bf16-d128-causal/buildsingle"
        with _bundle(archives[arch], monkeypatch) as bundle:
            mha = _problem("bwd", Hq=8, Hkv=8)
            kernel = bundle.select(mha)
            assert kernel.name == bwd and not kernel.deterministic
            assert bundle.select(_problem("bwd")).name.startswith("triton/bwd/")    # GQA 4
            with pytest.raises(rt.Unsupported) as e:
                bundle.select(_problem("bwd", kernel=bwd))
            assert e.value.message == ("requires Hq_per_Hkv == 1 (MHA only: the kernel writes "
                                       "dK and dV per query head; a GQA sum is not built): "
                                       "Hq_per_Hkv=4")
            # 64 heads of 131072 rows of 128 bf16: a batch stride of 2^30 elements, 2^31 bytes
            big = _problem("bwd", Hq=64, Hkv=64, Sq=131072, Sk=131072)
            text = bundle.explain(big)
            assert (f"tuned {bwd}: rejected, q_stride_b_bytes=2147483648 does not fit the "
                    "kernel's 32-bit parameter") in text
            assert bundle.select(big).name.startswith("triton/bwd/")


# ---- launches -------------------------------------------------------------------------------

def _expected_forward_buffer() -> bytes:
    """fmha_fwd_v3_args for B=2, Hq=8, Hkv=2, Sq=Sk=384, D=128, causal, scale 0.125,
    contiguous [B, H, S, D] bf16 tensors, written slot by slot from AITER's struct."""
    want = bytearray(512)
    for off, ptr in ((0, "o"), (16, "q"), (32, "k"), (48, "v"), (64, "lse")):
        struct.pack_into("<Q", want, off, POINTERS[ptr])
    struct.pack_into("<f", want, 80, 0.125)
    q_s, q_h, q_b = 128 * 2, 384 * 128 * 2, 8 * 384 * 128 * 2      # bytes, [B, Hq, Sq, D]
    k_s, k_h, k_b = 128 * 2, 384 * 128 * 2, 2 * 384 * 128 * 2      # [B, Hkv, Sk, D]
    for off, value in ((96, 384), (112, q_s), (128, 256 * q_s), (144, q_h), (160, q_b),
                       (176, 4), (192, k_s), (208, k_h), (224, k_b),
                       (240, 5),          # AITER's tune_opt for Hq % 8 == 0, Sq <= 16384
                       (256, 1), (272, 384), (288, 128), (304, 128), (320, 8),
                       (336, k_s), (352, k_h), (368, k_b),          # V is laid out like K
                       (384, q_s), (400, q_h), (416, q_b),          # O like Q
                       (464, 384 * 4)):                             # lse_Hs: Sq floats
        struct.pack_into("<I", want, off, value)
    return bytes(want)


RECORD_FORWARD = textwrap.dedent("""
    import json, sys
    from attnpack import runtime as rt
    path, pointers = sys.argv[1], json.loads(sys.argv[2])
    problem = rt.make_problem("fwd", "bf16", B=2, Hq=8, Hkv=2, Sq=384, Sk=384, D=128,
                              causal=True, scale=0.125, pointers=pointers)
    with rt.Bundle(path, recording=True) as bundle:
        name = bundle.select(problem).name
        bundle.forward(problem)
        [launch] = bundle.recorded_launches()["launches"]
    print(json.dumps({"kernel": name, "launch": launch,
                      "modules": sorted(m.split(".")[0] for m in sys.modules)}))
""")


def test_recording_driver_packs_the_forward_buffer_as_aiter_does(archives, monkeypatch):
    with _bundle(archives["gfx942"], monkeypatch, num_sms=304) as bundle:
        problem = rt.make_problem("fwd", "bf16", B=2, Hq=8, Hkv=2, Sq=384, Sk=384, D=128,
                                  causal=True, scale=0.125, pointers=POINTERS)
        assert bundle.select(problem).name == MI300
        bundle.forward(problem)
        [launch] = bundle.recorded_launches()["launches"]
    assert bytes.fromhex(launch["args"]) == _expected_forward_buffer()
    assert launch["symbol"] == "_ZN5aiter31fmha_fwd_hd128_bf16_causal_rtneE"
    assert launch["grid"] == [1, 8, 2] and launch["block"] == [512, 1, 1]   # (⌈384/512⌉, Hq, B)
    assert launch["shared"] == 0


def test_the_same_launch_in_a_process_where_aiter_cannot_be_imported(archives, tmp_path):
    """The code objects come from the archive alone: a process in which `import aiter` fails
    (a meta-path finder refuses it, whether or not the package is installed) records the same
    bytes, and imports neither aiter nor the family's sources."""
    script = tmp_path / "record.py"
    script.write_text(RECORD_FORWARD)
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(textwrap.dedent("""
        import importlib.abc, sys
        class NoAiter(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "aiter" or name.startswith("aiter."):
                    raise ImportError(f"{name} is blocked in this process")
        sys.meta_path.insert(0, NoAiter())
    """))
    env = {**os.environ, "ATTNPACK_RECORDING_NUM_SMS": "304",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(kernels_root().parents[1] / "python"),
                                         os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run([sys.executable, "-c", "import aiter"], env=env, capture_output=True,
                           text=True)
    assert probe.returncode != 0 and "aiter is blocked in this process" in probe.stderr
    run = subprocess.run([sys.executable, str(script), str(archives["gfx942"]),
                          json.dumps(POINTERS)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["kernel"] == MI300
    assert bytes.fromhex(out["launch"]["args"]) == _expected_forward_buffer()
    assert "aiter" not in out["modules"] and "triton" not in out["modules"]
    assert not any(m.startswith("attnpack_kernels") for m in out["modules"])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_the_backward_runs_prepare_asm_convert_in_order(archives, arch, monkeypatch):
    B, H, Sq, Sk, D = 3, 4, 100, 300, 128
    bwd = "aiter_asm/bwd/bf16-d128-causal/buildsingle"
    problem = _problem("bwd", kernel=bwd, B=B, Hq=H, Hkv=H, Sq=Sq, Sk=Sk, D=D)
    workspace = 0x7e0000000000
    with _bundle(archives[arch], monkeypatch) as bundle:
        size = bundle.workspace_size(problem)
        delta_bytes = B * H * Sq * 4
        dq_acc_at = -(-delta_bytes // 256) * 256
        assert size == dq_acc_at + B * H * Sq * D * 4
        bundle.backward(problem, workspace=workspace, workspace_size=size)
        launches = bundle.recorded_launches()["launches"]
    assert [launch["symbol"] for launch in launches] == [
        "aiter_bwd_prepare", kernels.find(arch, "bwd", "bf16", D, True, "single").symbol,
        "aiter_bwd_convert_dq"]
    prepare, asm, convert = launches
    assert prepare["grid"] == [2, B * H, 1] and convert["grid"] == [2, B * H, 1]  # ⌈100/64⌉
    tile = 192 if arch == "gfx942" else 256
    assert asm["grid"] == [-(-Sk // (2 * tile)), H, B] and asm["block"] == [256, 1, 1]
    args = bytes.fromhex(asm["args"])
    obj = kernels.find(arch, "bwd", "bf16", D, True, "single")
    at = {f.aiter_name: f.offset for f in obj.layout.fields}
    ptr = lambda name: struct.unpack_from("<Q", args, at[name])[0]  # noqa: E731
    u32 = lambda name: struct.unpack_from("<I", args, at[name])[0]  # noqa: E731
    assert (ptr("dQ"), ptr("D")) == (workspace + dq_acc_at, workspace)
    assert [ptr(n) for n in ("dK", "dV", "Q", "K", "V", "dO", "Lse")] == [
        POINTERS[t] for t in ("dk", "dv", "q", "k", "v", "do", "lse")]
    assert struct.unpack_from("<f", args, at["log2e"])[0] == pytest.approx(1.4426950408889634,
                                                                           rel=1e-7)
    assert (u32("seqlen_q"), u32("seqlen_k"), u32("nhead_q"), u32("ratio")) == (Sq, Sk, H, 1)
    assert u32("BAs_k") == H * Sk * D * 2 and u32("Seqs_dv") == D * 2
    if arch == "gfx950":
        assert u32("Ts") == 256 * D * 2 and u32("Hs_lsed") == Sq * 4
    # the glue steps address the same workspace: prepare writes delta and zeroes dq_acc
    pre = bytes.fromhex(prepare["args"])
    assert struct.unpack_from("<QQQQ", pre, 0) == (POINTERS["o"], POINTERS["do"], workspace,
                                                   workspace + dq_acc_at)
    assert struct.unpack_from("<QQ", bytes.fromhex(convert["args"]), 0) == (
        workspace + dq_acc_at, POINTERS["dq"])


# ---- the builder's side ---------------------------------------------------------------------

def test_glue_steps_name_their_own_backend():
    from attnpack.builder.compile import CompileJob
    fam = load_families()["aiter_asm"]
    variant = next(v for v in fam.default_variants("gfx950") if v.op == "bwd")
    jobs = [CompileJob(variant, s) for s in variant.steps]
    assert [j.backend_name for j in jobs] == ["triton", "prebuilt", "triton"]
    assert variant.backends == ("prebuilt", "triton")
    assert fam.policy(variant.backends)["compilers"] == ["triton"]
    assert len({j.cache_key() for j in jobs}) == 3


def test_db_seed_gives_aiter_the_buckets_it_serves():
    from attnpack.family import default_variants
    from attnpack.tune.db import seed_untuned
    from attnpack.tune.runner import standard_keys
    families = load_families()   # gfx942: no other family serves buckets there
    db = seed_untuned("gfx942", standard_keys(), families)
    by_family = {}
    for e in db.entries.values():
        by_family.setdefault(e["family"], []).append(e)
    aiter = by_family["aiter_asm"]
    assert {(e["op"], e["dtype"], e["head_dim"]) for e in aiter} == {
        ("fwd", "bf16", 128), *(("bwd", t, d) for t in ("fp16", "bf16") for d in (64, 128))}
    assert all(e["gqa"] == 1 for e in aiter if e["op"] == "bwd")
    assert all(e["kernel"].endswith("/buildMI300") for e in aiter if e["op"] == "fwd")
    keys = standard_keys()
    gqas, pairs = {k.gqa for k in keys}, {(k.sq, k.sk) for k in keys}
    square = {p for p in pairs if p[0] == p[1]}
    # fwd: every full bucket, causal ones with Sq == Sk; bwd: MHA buckets, 2 dtypes x 2 dims
    assert len(aiter) == len(gqas) * (len(pairs) + len(square)) + 2 * 2 * 2 * len(pairs)
    assert len(db.entries) == len(keys)
    # the catch-all per functional key (no bucket) stays the triton family's
    defaults = default_variants("gfx942", families)
    assert {v.family for v in defaults.values()} == {"triton"}


def test_a_layout_the_object_disagrees_with_fails_the_build():
    """The prebuilt backend's check, with AITER's padding: a forgotten field, a misnamed one
    and a mistyped one are each refused with what the object lists."""
    from attnpack.builder.backends.prebuilt import PrebuiltError, check_layout
    from attnpack.builder.compile import CompileJob
    fam = load_families()["aiter_asm"]
    variant = next(v for v in fam.default_variants("gfx950") if v.op == "fwd" and v.key.causal)
    [step] = variant.steps
    image = step.kernel.source.read()
    check_layout(CompileJob(variant, step), image)     # the declared layout passes

    def job_with(params):
        kernel = dataclasses.replace(step.kernel, params=tuple(params))
        return CompileJob(variant, dataclasses.replace(step, kernel=kernel))

    params = list(step.kernel.params)
    lse_hs = next(i for i, p in enumerate(params) if p.name == "lse_Hs")
    with pytest.raises(PrebuiltError, match=r"lists arguments \[\('lse_Hs', 464, 4\)\] \(name, "
                                            r"offset, size\) that are neither declared fields "
                                            r"nor padding \['pad'\]"):
        check_layout(job_with(params[:lse_hs] + params[lse_hs + 1:]), image)
    renamed = params.copy()
    renamed[lse_hs] = dataclasses.replace(params[lse_hs], name="lse_Bs")
    with pytest.raises(PrebuiltError, match=r"\('lse_stride_h_bytes', 464, 'lse_Bs', 'lse_Hs'\)"):
        check_layout(job_with(renamed), image)
    mistyped = params.copy()
    mistyped[lse_hs] = dataclasses.replace(params[lse_hs], type="f32")
    with pytest.raises(PrebuiltError, match=r"field lse_stride_h_bytes at byte 464 is declared "
                                            r"f32; the word takes \['i64', 'i32'\]"):
        check_layout(job_with(mistyped), image)


def test_an_offline_build_names_the_wheel_and_the_way_out(tmp_path, monkeypatch):
    # an empty attnpack cache (no wheel, no compiled objects) and an index nobody answers
    monkeypatch.setenv("ATTNPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(source.WHEEL_ENV, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    req = BuildRequest(archs=("gfx950",), out_dir=tmp_path / "out", families=("aiter_asm",),
                       ops=("fwd",), all_variants=True, jobs=1, cache_dir=None,
                       tuning_db_dir=tmp_path)
    with pytest.raises(Exception) as e:
        build_archives(req)
    message = str(e.value)
    for part in ("is this machine offline?", source.WHEEL_NAME, source.WHEEL_ENV,
                 source.WHEEL_SHA256):
        assert part in message
    assert isinstance(e.value, CompileFailure)     # the object's read, in a compile worker
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_explain_an_archive_for_a_given_cu_count(archives):
    """`attnpack explain --archive` explains through the recording driver; --num-sms sets the
    count it pretends (a fresh process: the count is read when the bundle opens)."""
    def explain(*extra):
        run = subprocess.run([sys.executable, "-m", "attnpack.cli", "explain", "--shape",
                              "2,32,8,4096,4096,128", "--causal", "--archive",
                              str(archives["gfx942"]), "--arch", "gfx942", *extra],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 [str(kernels_root().parents[1] / "python"),
                                  os.environ.get("PYTHONPATH", "")])})
        assert run.returncode == 0, run.stderr
        return run.stdout
    assert f"kernel:   {MI300} (family aiter_asm)" in explain("--num-sms", "304")
    text = explain()
    assert "kernel:   triton/fwd/bf16-d128-causal/" in text
    assert "needs a 304-CU device): this device has 132" in text
