"""The AITER assembly family's static side on the CPU: the pinned wheel, the declared code
objects against their own kernarg metadata, the launch words and the grid rule.
(test_aiter_asm_family.py builds the family into archives and launches it through the runtime.)

Built, not run: no AMD GPU exists here. The wheel comes from PyPI once (about 40 MB) and is
then read from the attnpack cache; set ATTNPACK_AITER_WHEEL to a local copy on a machine
without network access.
"""
import dataclasses
import hashlib
import importlib
import shutil
import sys
import time
from pathlib import Path

import pytest

from attnpack import abi
from attnpack.archive.elf import KernelFacts, kernel_facts
from attnpack.family import kernels_root, load_family


def _family_modules():
    """The family folder as the builder loads it, and its modules."""
    spec = load_family(kernels_root() / "aiter_asm")
    package = spec.steps.__module__.rsplit(".", 1)[0]
    return tuple(importlib.import_module(f"{package}.{m}") for m in ("source", "kernels", "verify"))


source, kernels, verify = _family_modules()


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

def test_the_pinned_member_hashes_are_the_wheels(wheel):
    assert len(kernels.MEMBER_SHA256) == len(kernels.CODE_OBJECTS)
    for obj in kernels.CODE_OBJECTS:
        assert wheel._record[obj.member] == obj.sha256, obj.member


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


# ---- launch words and grids ---------------------------------------------------------------------

def test_layouts_speak_the_generic_vocabulary():
    """Every slot is filled by a word of attnpack's vocabulary (abi.parse) that takes the slot's
    wire type: the runtime needs nothing AITER-specific."""
    used = set()
    for o in kernels.CODE_OBJECTS:
        workspace = ("delta", "dq_acc") if o.op == "bwd" else ()
        for f in o.layout.fields:
            assert (f.wire == "ptr") == (f.size == 8)
            if f.word in workspace:
                continue
            parsed = abi.parse(f.word)
            assert parsed.fits(f.wire), (o.name, f)
            used.add(f.word)
    assert {"Hq_per_Hkv", "lse_stride_h_bytes", "const:0", "const:1", "const:5",
            f"const:{kernels.LOG2E!r}", "q_stride_s_bytes*256", "k_stride_s_bytes*256"} <= used
    # the tile slots scale a row stride by the tile's rows
    for o in kernels.CODE_OBJECTS:
        if any(f.aiter_name == "Ts" for f in o.layout.fields):
            ts = o.layout.field("Ts")
            assert abi.parse(ts.word).multiplier == o.tile


def _grid(obj, sizes):
    """The step's grid rule: a dim is the product of its factors (var, d), each ceil(var / d)."""
    out = []
    for dim in obj.grid:
        n = 1
        for var, d in dim:
            n *= -(-sizes[var] // d)
        out.append(n)
    return tuple(out)


@pytest.mark.parametrize("s", [1, 255, 256, 257, 511, 512, 513, 1000, 4096, 16385])
def test_grid_rule_matches_aiters_launch_arithmetic(s):
    """AITER: gdx = ((s + ts - 1) / ts + tg_div - 1) / tg_div, tg_div 2 when masked."""
    for obj in kernels.CODE_OBJECTS:
        tiles = (s + obj.tile - 1) // obj.tile
        tg = 2 if obj.causal else 1
        sizes = {"Sq": s, "Sk": s, "Hq": 8, "B": 2}
        assert _grid(obj, sizes) == ((tiles + tg - 1) // tg, 8, 2), obj.name


def test_requirements_per_code_object():
    texts = {o.name: [r.text for r in o.requires] for o in kernels.CODE_OBJECTS}
    assert texts["aiter_asm/fwd/bf16-d128-causal/gfx942-MI300"] == [
        "Sq == Sk", "Hq multiple_of 8", "Sq <= 16384", "num_sms == 304"]
    assert texts["aiter_asm/fwd/bf16-d128-full/gfx942-MI308"] == ["num_sms in {80, 64}"]
    assert texts["aiter_asm/fwd/bf16-d128-full/gfx950"] == []
    assert all(t == ["Hq_per_Hkv == 1"] for n, t in texts.items() if "/bwd/" in n)


def test_family_imports_nothing_from_aiter():
    assert not any(m == "aiter" or m.startswith("aiter.") for m in sys.modules)
