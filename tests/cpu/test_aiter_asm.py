"""The AITER assembly family on the CPU: the pinned wheel, the declared code objects against
their own kernarg metadata, the packed argument buffer and the checks before a launch.

Built, not run: no AMD GPU exists here. The wheel comes from PyPI once (about 40 MB) and is
then read from the attnpack cache; set ATTNPACK_AITER_WHEEL to a local copy on a machine
without network access.
"""
import dataclasses
import hashlib
import importlib.util
import math
import shutil
import struct
import sys
import time
from pathlib import Path

import pytest

from attnpack import abi
from attnpack.archive.elf import KernelFacts, kernel_facts
from attnpack.family import kernels_root


def _load_family_package():
    """aot/kernels/aiter_asm as a package (it has no family.py yet: the lead wires it in)."""
    folder = kernels_root() / "aiter_asm"
    name = "attnpack_test_aiter_asm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return (importlib.import_module(f"{name}.source"), importlib.import_module(f"{name}.kernels"),
            importlib.import_module(f"{name}.verify"))


source, kernels, verify = _load_family_package()


@pytest.fixture(scope="module")
def wheel():
    with source.open_wheel() as w:
        yield w


def _obj(arch, op, dtype="bf16", head_dim=128, causal=False, cu_variant=None):
    [obj] = [o for o in kernels.code_objects(arch, op) if o.dtype == dtype
             and head_dim in o.head_dims and o.causal == causal
             and (cu_variant is None or o.cu_variant == cu_variant)]
    return obj


# ---- the wheel -------------------------------------------------------------------------------

def test_wheel_is_the_pinned_one_and_comes_from_the_cache(wheel, monkeypatch):
    assert wheel.path.name == source.WHEEL_NAME
    assert source.sha256_file(wheel.path) == source.WHEEL_SHA256
    # A second fetch must not run pip.
    monkeypatch.setattr(source, "_pip_download",
                        lambda *a: pytest.fail("pip ran although the wheel is cached"))
    assert source.fetch_wheel() == wheel.path


def test_a_wheel_with_other_bytes_is_refused_with_both_hashes_and_the_fix(wheel, tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv(source.WHEEL_ENV, raising=False)
    bad = tmp_path / "aiter" / source.WHEEL_NAME
    bad.parent.mkdir()
    shutil.copyfile(wheel.path, bad)
    with open(bad, "r+b") as f:          # flip one byte in the middle
        f.seek(1 << 20)
        byte = f.read(1)
        f.seek(1 << 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    actual = source.sha256_file(bad)
    with pytest.raises(source.AiterSourceError) as e:
        source.fetch_wheel(cache_dir=tmp_path)
    msg = str(e.value)
    for part in (source.WHEEL_NAME, source.WHEEL_SHA256, actual, "Delete it", "WHEEL_SHA256"):
        assert part in msg
    # The same check guards a wheel handed in through the environment.
    monkeypatch.setenv(source.WHEEL_ENV, str(bad))
    with pytest.raises(source.AiterSourceError, match=actual):
        source.fetch_wheel(cache_dir=tmp_path)


def test_offline_fetch_fails_naming_the_wheel_and_the_way_out(tmp_path, monkeypatch):
    monkeypatch.delenv(source.WHEEL_ENV, raising=False)
    start = time.monotonic()
    with pytest.raises(source.AiterSourceError) as e:   # nothing listens on port 9
        source.fetch_wheel(cache_dir=tmp_path, index_url="http://127.0.0.1:9/simple")
    msg = str(e.value)
    assert "offline" in msg and source.WHEEL_NAME in msg and source.WHEEL_ENV in msg
    assert source.WHEEL_SHA256 in msg
    assert not (tmp_path / "aiter" / source.WHEEL_NAME).exists()
    assert time.monotonic() - start < 60


def test_members_are_checked_against_the_wheels_record(wheel):
    member = _obj("gfx950", "fwd").member
    data = wheel.read(member)
    assert hashlib.sha256(data).hexdigest() == wheel._record[member]
    damaged = source.AiterWheel(wheel.path)
    damaged._record[member] = "0" * 64
    with pytest.raises(source.AiterSourceError, match="RECORD"):
        damaged.read(member)
    damaged.close()


def test_extract_writes_the_members_with_their_hashes(wheel, tmp_path):
    members = [_obj("gfx942", "fwd", cu_variant="MI308").member, _obj("gfx950", "bwd").member]
    hashes = source.extract(wheel, members, tmp_path)
    for m in members:
        out = tmp_path / Path(m).relative_to(source.HSA_ROOT)
        assert out.read_bytes() == wheel.read(m)
        assert hashes[m] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert (tmp_path / "gfx942/fmha_v3_fwd/MI308/fwd_hd128_bf16_rtne.co").is_file()


def test_notice_names_the_wheel_every_file_hash_and_the_licence(wheel):
    members = [o.member for o in kernels.CODE_OBJECTS]
    text = source.notice_text(wheel, members)
    for part in (source.WHEEL_NAME, source.VERSION, source.WHEEL_SHA256, "MIT License",
                 "Permission is hereby granted"):
        assert part in text
    for m in members:
        assert f"{hashlib.sha256(wheel.read(m)).hexdigest()}  {m}" in text


# ---- the table against the wheel --------------------------------------------------------------

def test_every_code_object_in_the_wheel_is_shipped_or_excluded_with_a_reason(wheel):
    inventory = wheel.code_objects()
    per_folder = {}
    for m in inventory:
        folder = "/".join(m.split("/")[2:4])
        per_folder[folder] = per_folder.get(folder, 0) + 1
    # The counts issue 14 measured on this wheel.
    assert per_folder == {"gfx942/fmha_v3_fwd": 32, "gfx942/fmha_v3_bwd": 120,
                          "gfx950/fmha_v3_fwd": 8, "gfx950/fmha_v3_bwd": 95}
    shipped = {o.member for o in kernels.CODE_OBJECTS}
    assert len(shipped) == len(kernels.CODE_OBJECTS) == 22
    assert shipped <= set(inventory)
    for m in inventory:
        assert (m in shipped) != (kernels.exclusion_reason(m) is not None), m


@pytest.mark.parametrize("obj", kernels.CODE_OBJECTS, ids=lambda o: o.name)
def test_code_object_agrees_with_its_declaration(wheel, obj):
    image = wheel.read(obj.member)
    assert verify.check_code_object(obj, image) == []
    assert verify.code_object_version(image) in (5, 6)


# Hand-written from the structs in the wheel's csrc/include/mha_fwd.h and mha_bwd.h and the
# gfx950 backward's codegen.py (slot by slot, not computed), so the table is checked twice.
FWD_ARGS = [("R", 0), ("Q", 16), ("K", 32), ("V", 48), ("LSE", 64), ("scalar", 80),
            ("seq_len", 96), ("Seqs", 112), ("Ts", 128), ("Hs", 144), ("Bs", 160), ("gqa", 176),
            ("k_Seqs", 192), ("k_Hs", 208), ("k_Bs", 224), ("msk_opt", 240), ("lse", 256),
            ("kv_seq_len", 272), ("qk_head_dim", 288), ("v_head_dim", 304),
            ("q_head_num", 320), ("v_Seqs", 336), ("v_Hs", 352), ("v_Bs", 368),
            ("r_Seqs", 384), ("r_Hs", 400), ("r_Bs", 416), ("ptr_qseq", 432),
            ("ptr_kseq", 448), ("lse_Hs", 464), ("ptr_qseq_padding", 480),
            ("ptr_kseq_padding", 496)]
BWD_GENL_ARGS = [("dQ", 0), ("dK", 8), ("dV", 16), ("Q", 24), ("K", 32), ("V", 40),
                 ("dO", 48), ("Lse", 56), ("D", 64), ("scalar", 72), ("log2e", 80),
                 ("ratio", 88), ("seqlen_q", 96), ("seqlen_k", 104), ("head_dim", 112),
                 ("nhead_q", 120), ("Hs_q", 128), ("BAs_q", 136), ("Seqs_q", 144),
                 ("Hs_k", 152), ("BAs_k", 160), ("Seqs_k", 168), ("Hs_v", 176),
                 ("BAs_v", 184), ("Seqs_v", 192), ("Hs_do", 200), ("BAs_do", 208),
                 ("Seqs_do", 216), ("Hs_dk", 224), ("BAs_dk", 232), ("Seqs_dk", 240),
                 ("Hs_dv", 248), ("BAs_dv", 256), ("Seqs_dv", 264)]
BWD_GFX950_ARGS = [("dQ", 0x00), ("dK", 0x10), ("dV", 0x20), ("Q", 0x30), ("K", 0x40),
                   ("V", 0x50), ("dO", 0x60), ("Lse", 0x70), ("D", 0x80), ("scalar", 0x90),
                   ("log2e", 0xa0), ("seqlen_q", 0xb0), ("Ts", 0xc0), ("Hs_q", 0xd0),
                   ("BAs_q", 0xe0), ("Seqs_q", 0xf0), ("ratio", 0x100), ("Hs_k", 0x110),
                   ("BAs_k", 0x120), ("Seqs_k", 0x130), ("Seqs_dk", 0x140),
                   ("seqlen_k", 0x150), ("head_dim_q", 0x160), ("head_dim_k", 0x170),
                   ("nhead_q", 0x180), ("Hs_v", 0x190), ("BAs_v", 0x1a0), ("Seqs_v", 0x1b0),
                   ("Hs_do", 0x1c0), ("BAs_do", 0x1d0), ("Seqs_do", 0x1e0), ("Hs_dk", 0x1f0),
                   ("BAs_dk", 0x200), ("Hs_dv", 0x210), ("BAs_dv", 0x220), ("Seqs_dv", 0x230),
                   ("Hs_lsed", 0x240), ("ptr_seqstart_q", 0x250), ("ptr_seqstart_k", 0x260),
                   ("ptr_seqstart_q_padded", 0x270), ("ptr_seqstart_k_padded", 0x280),
                   ("max_seq_len_dq", 0x290), ("mask_x", 0x2a0), ("mask_y", 0x2b0)]


@pytest.mark.parametrize("obj, expected, size", [
    (_obj("gfx942", "fwd", causal=True, cu_variant="MI300"), FWD_ARGS, 512),
    (_obj("gfx942", "bwd", dtype="fp16", head_dim=64), BWD_GENL_ARGS, 272),
    (_obj("gfx950", "bwd", causal=True), BWD_GFX950_ARGS, 704),
], ids=["fwd-gfx942", "bwd-genl-gfx942", "bwd-gfx950"])
def test_metadata_offsets_by_hand(wheel, obj, expected, size):
    facts = kernel_facts(wheel.read(obj.member), obj.symbol)
    assert (facts.machine, facts.arch, facts.kernarg_size) == ("amdgpu", obj.arch, size)
    named = [(n, off) for n, (off, _) in zip(facts.param_names, facts.params) if n != "pad"]
    assert named == expected
    assert [(f.aiter_name, f.offset) for f in obj.layout.fields] == expected
    assert obj.layout.size == size
    pointers = {n for n, k in zip(facts.param_names, facts.param_kinds) if k == "global_buffer"}
    assert pointers == {f.aiter_name for f in obj.layout.fields if f.wire == "ptr"}
    assert facts.reqd_workgroup_size == (obj.block, 1, 1)


def test_the_check_catches_each_kind_of_wrong_declaration(wheel):
    obj = _obj("gfx942", "fwd", causal=True, cu_variant="MI300")
    image = wheel.read(obj.member)
    layout = obj.layout

    def with_fields(fields, **kw):
        return dataclasses.replace(obj, layout=dataclasses.replace(layout, fields=tuple(fields)),
                                   **kw)

    gqa = layout.fields.index(layout.field("gqa"))
    shifted = list(layout.fields)
    shifted[gqa] = dataclasses.replace(shifted[gqa], offset=180)
    problems = verify.check_code_object(with_fields(shifted), image)
    assert any("offset 180: metadata has 'pad' (4 bytes, by_value), the table 'gqa'" in p
               for p in problems)
    assert any("'gqa' at offset 176 (4 bytes) is not in the table" in p for p in problems)
    assert any("covered twice" in p for p in problems)
    widened = list(layout.fields)
    widened[gqa] = dataclasses.replace(widened[gqa], size=8)
    assert any("'gqa' (4 bytes, by_value), the table 'gqa' (8 bytes" in p
               for p in verify.check_code_object(with_fields(widened), image))
    dropped = [f for f in layout.fields if f.aiter_name != "lse_Hs"]
    problems = verify.check_code_object(with_fields(dropped), image)
    assert any("'lse_Hs' at offset 464 (4 bytes) is not in the table" in p for p in problems)
    assert any("neither a field nor a pad" in p for p in problems)
    as_value = list(layout.fields)
    as_value[0] = dataclasses.replace(as_value[0], wire="u32", size=4)
    assert any("'R' (8 bytes, global_buffer)" in p
               for p in verify.check_code_object(with_fields(as_value), image))
    resized = dataclasses.replace(obj, layout=dataclasses.replace(layout, size=496))
    assert any("kernarg segment 512 bytes" in p for p in verify.check_code_object(resized, image))
    assert any("requires workgroup (512, 1, 1)" in p
               for p in verify.check_code_object(dataclasses.replace(obj, block=256), image))
    assert any("EF_AMDGPU_MACH 0x4c" in p
               for p in verify.check_code_object(dataclasses.replace(obj, arch="gfx950"), image))
    wrong_symbol = dataclasses.replace(obj, symbol="_ZN5aiter19fmha_fwd_hd128_bf16E")
    assert any("no amdhsa.kernels entry" in p
               for p in verify.check_code_object(wrong_symbol, image))
    assert verify.check_code_object(obj, b"\0" * 64) == [f"{obj.member} ({obj.symbol}): "
                                                          "not an ELF file"]


def test_a_segment_declared_only_by_size_is_reported_as_such():
    obj = _obj("gfx950", "fwd")
    facts = KernelFacts("amdgpu", "gfx950", {obj.symbol}, kernarg_size=512)
    assert verify._check_kernargs(obj, facts, "x") == [
        "x: the metadata names no kernel arguments; only the kernarg size could be checked"]


# ---- launch words -------------------------------------------------------------------------------

def test_layouts_speak_only_declared_words():
    attnpack_words = (set(abi.TENSORS) | set(abi.FP32_BUFFERS) | set(abi.SIZES) |
                      {abi.HEAD_DIM} | set(abi.FLOATS))
    assert kernels.EXISTING_WORDS <= attnpack_words
    assert not set(kernels.NEW_WORDS) & attnpack_words
    used = {f.word for o in kernels.CODE_OBJECTS for f in o.layout.fields}
    assert used <= kernels.EXISTING_WORDS | set(kernels.NEW_WORDS)
    assert set(kernels.NEW_WORDS) <= used          # no word declared for nothing
    for o in kernels.CODE_OBJECTS:
        for f in o.layout.fields:
            assert (f.wire == "ptr") == (f.size == 8)
            assert f.scale == 1 or f.aiter_name == "Ts"


# ---- packing, grid and the checks before a launch ------------------------------------------------

POINTERS = {"q": 0x7f0000001000, "k": 0x7f0000002000, "v": 0x7f0000003000,
            "o": 0x7f0000004000, "lse": 0x7f0000005000, "do": 0x7f0000006000,
            "dk": 0x7f0000007000, "dv": 0x7f0000008000, "delta": 0x7f0000009000,
            "dq_acc": 0x7f000000a000}


def test_forward_buffer_for_a_small_gqa_shape_by_hand():
    obj = _obj("gfx942", "fwd", causal=True, cu_variant="MI300")
    p = kernels.Problem.contiguous(B=2, Hq=8, Hkv=2, Sq=384, Sk=384, D=128, causal=True,
                                   sm_scale=0.125, pointers=POINTERS, cu_count=304)
    want = bytearray(512)
    for off, ptr in ((0, "o"), (16, "q"), (32, "k"), (48, "v"), (64, "lse")):
        struct.pack_into("<Q", want, off, POINTERS[ptr])
    struct.pack_into("<f", want, 80, 0.125)
    q_s, q_h, q_b = 128 * 2, 384 * 128 * 2, 8 * 384 * 128 * 2      # bytes, [B, Hq, Sq, D]
    k_s, k_h, k_b = 128 * 2, 384 * 128 * 2, 2 * 384 * 128 * 2      # [B, Hkv, Sk, D]
    for off, value in ((96, 384), (112, q_s), (128, 256 * q_s), (144, q_h), (160, q_b),
                       (176, 4), (192, k_s), (208, k_h), (224, k_b),
                       (240, 5),          # Hq % 8 == 0 and Sq <= 16384: AITER's tune_opt 5
                       (256, 1), (272, 384), (288, 128), (304, 128), (320, 8),
                       (336, k_s), (352, k_h), (368, k_b),          # V is laid out like K
                       (384, q_s), (400, q_h), (416, q_b),          # O like Q
                       (464, 384 * 4)):
        struct.pack_into("<I", want, off, value)
    assert kernels.pack_kernargs(obj, p) == bytes(want)
    assert kernels.grid_of(obj, p) == (1, 8, 2) and obj.block == 512
    # Six q heads: AITER lowers tune_opt to 3 for a masked forward.
    p6 = dataclasses.replace(p, Hq=6, Hkv=2)
    assert struct.unpack_from("<I", kernels.pack_kernargs(obj, p6), 240) == (3,)


def test_backward_buffer_takes_the_workspaces_and_per_tensor_strides():
    obj = _obj("gfx950", "bwd", dtype="fp16", causal=True)
    p = kernels.Problem.contiguous(B=3, Hq=4, Hkv=4, Sq=100, Sk=300, D=96, dtype="fp16",
                                   causal=True, sm_scale=0.1, layout="bshd", pointers=POINTERS)
    buf = kernels.pack_kernargs(obj, p)
    u32 = lambda off: struct.unpack_from("<I", buf, off)[0]  # noqa: E731
    assert struct.unpack_from("<Q", buf, 0x00)[0] == POINTERS["dq_acc"]
    assert struct.unpack_from("<Q", buf, 0x80)[0] == POINTERS["delta"]
    assert struct.unpack_from("<f", buf, 0xa0)[0] == pytest.approx(math.log2(math.e), rel=1e-7)
    assert u32(0xb0) == 100 and u32(0x150) == 300 and u32(0x160) == u32(0x170) == 96
    assert u32(0xc0) == 256 * 4 * 96 * 2                 # Ts: 256 K rows, [B, Sk, Hkv, D]
    assert (u32(0xd0), u32(0xe0), u32(0xf0)) == (96 * 2, 100 * 4 * 96 * 2, 4 * 96 * 2)
    assert u32(0x240) == 100 * 4 and u32(0x290) == 100
    assert kernels.grid_of(obj, p) == (1, 4, 3) and obj.block == 256   # ceil(300 / 512)


@pytest.mark.parametrize("s", [1, 255, 256, 257, 511, 512, 513, 1000, 4096, 16385])
def test_grid_rule_matches_aiters_launch_arithmetic(s):
    """AITER: gdx = ((s + ts - 1) / ts + tg_div - 1) / tg_div, tg_div 2 when masked."""
    for obj in kernels.CODE_OBJECTS:
        p = kernels.Problem.contiguous(B=2, Hq=8, Hkv=8, Sq=s, Sk=s, D=obj.head_dims[-1],
                                       dtype=obj.dtype, causal=obj.causal)
        tiles = (s + obj.tile - 1) // obj.tile
        tg = 2 if obj.causal else 1
        assert kernels.grid_of(obj, p) == ((tiles + tg - 1) // tg, 8, 2), obj.name


def test_selection_and_every_refusal_reason():
    sel = kernels.select
    P = kernels.Problem.contiguous
    square = P(B=1, Hq=16, Hkv=4, Sq=2048, Sk=2048, D=128, causal=True)
    mi300 = dataclasses.replace(square, cu_count=304)
    assert sel("gfx942", "fwd", mi300)[0].cu_variant == "MI300"
    assert sel("gfx942", "fwd", dataclasses.replace(square, cu_count=80))[0].cu_variant == "MI308"
    assert sel("gfx942", "fwd", dataclasses.replace(square, cu_count=64))[0].cu_variant == "MI308"
    obj, reasons = sel("gfx942", "fwd", dataclasses.replace(square, cu_count=228))
    assert obj is None and len(reasons) == 4
    assert sum("with 228 compute units" in r for r in reasons) == 2
    assert sel("gfx950", "fwd", square)[0].member.endswith("gfx950/fmha_v3_fwd/"
                                                           "fwd_hd128_bf16_causal.co")

    def refused(arch, op, problem, text):
        obj, reasons = sel(arch, op, problem)
        assert obj is None and any(text in r for r in reasons), reasons

    refused("gfx950", "fwd", P(1, 16, 4, 1024, 2048, 128, causal=True),
            "causal with Sq 1024 != Sk 2048; this kernel's mask is bottom-right aligned")
    refused("gfx950", "fwd", P(1, 16, 4, 1024, 1024, 128, dtype="fp16"), "dtype fp16")
    refused("gfx950", "fwd", P(1, 16, 4, 1024, 1024, 64), "head dim 64")
    refused("gfx950", "fwd", P(1, 16, 4, 0, 1024, 128), "empty problem")
    refused("gfx950", "fwd", P(1, 16, 5, 1024, 1024, 128), "Hq 16 is not a multiple of Hkv 5")
    refused("gfx950", "fwd", P(1, 16, 4, 1024, 1024, 128, sm_scale=-1.0), "softmax scale -1.0")
    refused("gfx950", "bwd", P(1, 16, 4, 1024, 1024, 128), "GQA backward (Hq 16 != Hkv 4)")
    refused("gfx950", "bwd", P(1, 8, 8, 1024, 1024, 64), "head dim 64")
    # [B, H, S, D] with 128 heads of 131072 x 128: a 2^32-byte batch stride.
    refused("gfx942", "bwd", P(2, 128, 128, 131072, 131072, 128),
            "q_stride_b_bytes = 4294967296 does not fit the 32-bit slot BAs_q")
    # The backward's causal mask is top-left: any Sq, Sk; head dim 96 runs on the hd128 build.
    obj, _ = sel("gfx942", "bwd", P(2, 8, 8, 100, 300, 96, causal=True))
    assert obj.member.endswith("bwd_hd128_bf16_causal_a32_rtne_psskddv.co")
    obj, _ = sel("gfx942", "bwd", P(2, 8, 8, 100, 300, 192, dtype="fp16"))
    assert obj.member.endswith("bwd_hd192_fp16_a32_psskddv.co")


def test_glue_kernels_compile_for_both_archs_without_spills():
    glue = importlib.import_module(kernels.__name__.rsplit(".", 1)[0] + ".glue")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton
    for arch in kernels.ARCHS:
        for name, step in glue.GLUE_STEPS.items():
            signature = {a: "*bf16" if a in ("o", "do", "dq") else "*fp32" if a in
                         ("delta", "dq_acc") else "i64" if "_stride_" in a else "i32"
                         for a in step["args"]}
            consts = {"HEAD_DIM": 96, "BLOCK_D": glue.block_d(96), "BLOCK_M": glue.BLOCK_M}
            compiled = triton.compile(
                ASTSource(fn=step["fn"], signature={**signature, **dict.fromkeys(consts,
                                                                                 "constexpr")},
                          constexprs=consts),
                target=GPUTarget("hip", arch, 64), options={"num_warps": 4})
            facts = kernel_facts(compiled.asm["hsaco"], compiled.name)
            assert facts.arch == arch, name
            assert facts.resources["vgpr_spills"] == facts.resources["scratch_bytes"] == 0, name


def test_family_imports_nothing_from_aiter():
    assert not any(m == "aiter" or m.startswith("aiter.") for m in sys.modules)
