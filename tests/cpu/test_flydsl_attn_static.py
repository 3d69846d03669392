"""Static checks of the FlyDSL gfx950 forward's code objects, compiled here on the CPU (the
kernel is built, not run: no AMD GPU). Needs build_tools/install_flydsl.sh's packages; compiles
are cached under ~/.cache/attnpack/flydsl, keyed on source, flydsl version, arch and config."""
import itertools
import re
import struct
import subprocess

import pytest

from attnpack import abi
from attnpack.archive.elf import AMDGPU_MACH, EM_AMDGPU, kernel_facts
from flydsl_attn_loader import flydsl_attn, toolchain_missing

why = toolchain_missing()
pytestmark = pytest.mark.skipif(why is not None, reason=why or "")
fa = flydsl_attn()
VARIANTS = list(itertools.product(("bf16", "fp16"), (64, 128), (False, True)))


@pytest.fixture(scope="module")
def compiled():
    return {v: fa.backend.compile_forward("gfx950", *v, {}) for v in VARIANTS}


def disassemble(image: bytes, tmp_path) -> str:
    path = tmp_path / "k.co"
    path.write_bytes(image)
    return subprocess.run(["llvm-objdump-22", "-d", "--mcpu=gfx950", str(path)],
                          check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v[0]}-d{v[1]}-{'causal' if v[2] else 'full'}")
def test_code_object(compiled, variant, tmp_path):
    dtype, D, causal = variant
    obj = compiled[variant]
    image = obj.image
    assert image[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", image, 0x12)[0] == EM_AMDGPU == 224
    assert struct.unpack_from("<I", image, 0x30)[0] & 0xFF == AMDGPU_MACH["gfx950"] == 0x4F
    facts = kernel_facts(image, obj.entry)
    assert facts.arch == "gfx950" and obj.entry in facts.symbols
    res = facts.resources
    cfg = fa.tiles.check_config(D, dtype, {})
    assert res["lds_bytes"] == fa.tiles.lds_bytes(D, cfg) <= 160 * 1024
    # 8 waves = 2 per SIMD: each wave has half of the 512 unified registers
    assert res["vgpr"] + res["agpr"] <= 512 // (fa.tiles.threads(cfg) // 64 // 4)
    assert res["scratch_bytes"] == 0 and res["vgpr_spills"] == 0 and res["sgpr_spills"] == 0
    assert res["wavefront_size"] == 64
    assert obj.block == (fa.tiles.threads(cfg), 1, 1)

    text = disassemble(image, tmp_path)
    mfma = "v_mfma_f32_32x32x16_" + ("bf16" if dtype == "bf16" else "f16")
    counts = {op: len(re.findall(rf"\b{op}\b", text))
              for op in (mfma, "ds_read_b64_tr_b16", "s_setprio", "s_barrier", "ds_bpermute_b32")}
    assert counts[mfma] >= 2 * (D // 16 * cfg["block_n"] // 32 + D // 32 * cfg["block_n"] // 16)
    assert counts["ds_read_b64_tr_b16"] >= 2 * (D // 32) * (cfg["block_n"] // 16)
    assert "s_setprio 1" in text and "s_setprio 0" in text
    assert counts["s_barrier"] >= 6   # prologue, stagger x2, A_0, B_0, loop A/B, A_n
    assert "scratch_" not in text  # no spill traffic


@pytest.mark.parametrize("variant", VARIANTS[:2])
def test_kernarg_layout_matches_launch_words(compiled, variant):
    """Every kernarg byte the code object declares is filled by exactly one launch word of the
    right wire type, and the words sit at the argument offsets the metadata gives."""
    obj = compiled[variant]
    facts = kernel_facts(obj.image, obj.entry)
    assert obj.kernarg_size == facts.kernarg_size == 204
    assert [(a.offset, a.size) for a in obj.args] == facts.params
    covered = bytearray(obj.kernarg_size)
    for w in obj.launch_words:
        assert abi.param_type(w.word) == w.wire_type, w
        assert abi.WIRE_LAYOUT[w.wire_type][0] == w.size and w.offset % w.size == 0
        for i in range(w.offset, w.offset + w.size):
            assert covered[i] == 0, f"byte {i} filled twice"
            covered[i] = 1
        arg = next(a for a in obj.args if a.offset <= w.offset < a.offset + a.size)
        assert w.offset + w.size <= arg.offset + arg.size
    assert sum(covered) == obj.kernarg_size  # 204 = 4 x (8 + 40) + 8 + 4: no padding bytes
    by_word = {w.word: w.offset for w in obj.launch_words if w.word in ("q", "k", "lse")}
    assert by_word == {"q": 0, "k": 48, "lse": 192}
    assert [w.word for w in obj.launch_words if 48 <= w.offset < 96] == [
        "k", "B", "Hkv", "Sk", "D", "k_stride_b", "k_stride_h", "k_stride_s"]
    assert obj.grid == ((("Sq", 256),), (("B", 1), ("Hq", 1)), ())


def test_cache_key_inputs():
    key = fa.backend.cache_key
    base = key("src", "0.4.2", "gfx950", {"block_n": 32})
    assert base == key("src", "0.4.2", "gfx950", {"block_n": 32})
    assert len({base, key("src2", "0.4.2", "gfx950", {"block_n": 32}),
                key("src", "0.4.3", "gfx950", {"block_n": 32}),
                key("src", "0.4.2", "gfx942", {"block_n": 32}),
                key("src", "0.4.2", "gfx950", {"block_n": 64})}) == 5
    assert fa.backend.flydsl_version() == fa.backend.FLYDSL_VERSION_PINNED


def test_refuses_other_archs():
    with pytest.raises(ValueError, match="gfx942"):
        fa.backend.compile_forward("gfx942", "bf16", 128, False, {})
