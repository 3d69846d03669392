"""Every AITER code object attnpack ships, declared as data: what it computes, which device it
is built for, and how it is launched.

Learned from the pinned wheel's own launch code (amd-aiter 0.1.7.post2.dev18):
`aiter_meta/csrc/include/mha_fwd.h` and `mha_bwd.h` (the packed argument structs),
`aiter_meta/hsa/<arch>/fmha_v3_fwd|bwd/codegen.py` (which code object serves which problem,
the tile sizes, grid and block), `aiter_meta/csrc/py_itfs_cu/asm_mha_fwd.cu|asm_mha_bwd.cu`
(how tensors, LSE and the dQ accumulator are laid out) and `aiter/ops/mha.py` (when AITER's
own Python routes a call to these kernels). Offsets below are computed from the struct
shapes; `verify.py` checks every one against the code object's kernarg metadata.

Launch shape, common to all: one workgroup per (tile, q head, batch) with grid
(tiles, Hq, B), a 1-D block, no dynamic LDS, and the argument struct passed as one packed
buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER). Unlisted bytes of the buffer are padding: zero them.

Built, not run: there is no AMD GPU on the machines that wrote this table.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Mapping

from .source import HSA_ROOT

LOG2E = 1.4426950408889634          # AITER passes ck_tile::log2e_v<float>
U32_MAX = 0xFFFFFFFF
ELEMENT_BYTES = {"fp16": 2, "bf16": 2}
ARCHS = ("gfx942", "gfx950")

# ---------------------------------------------------------------------------------------------
# Launch words. Existing attnpack words (python/attnpack/abi.py): the pointers q k v o do dk dv
# lse, the sizes B Hq Hkv Sq Sk and D, and sm_scale. Everything else AITER needs is new:
STRIDE_TENSORS = ("q", "k", "v", "o", "do", "dk", "dv")
NEW_WORDS: dict[str, tuple[str, str]] = {
    **{f"{t}_stride_{a}_bytes": ("u32", f"{t}_stride_{a} * element bytes (2 for fp16/bf16)")
       for t in STRIDE_TENSORS for a in ("b", "h", "s")},
    "gqa_ratio": ("u32", "Hq / Hkv (Hq % Hkv == 0)"),
    "lse_stride_h_bytes": ("u32", "Sq * 4: lse and delta are contiguous float32 [B, Hq, Sq]"),
    "aiter_causal_opt": ("u32", "3 if Hq % 8 != 0 or Sq > 16384 else 5 (AITER's tune_opt for "
                                "masked forwards)"),
    "delta": ("ptr", "workspace: float32 [B, Hq, Sq] contiguous, rowsum(dO * O)"),
    "dq_acc": ("ptr", "workspace: float32 [B, Hq, Sq, D] contiguous, zeroed before the kernel "
                      "(it accumulates dQ with float atomics)"),
    "const:0": ("u32/ptr", "literal zero (null pointers of group mode, unused mask fields)"),
    "const:1": ("u32", "literal 1 (the forward's store-LSE flag)"),
    "const:5": ("u32", "literal 5 (AITER's tune_opt for unmasked forwards)"),
    "const:log2e": ("f32", f"literal log2(e) = {LOG2E!r} as float32"),
}
EXISTING_WORDS = {"q", "k", "v", "o", "do", "dk", "dv", "lse",
                  "B", "Hq", "Hkv", "Sq", "Sk", "D", "sm_scale"}

# One grid dimension is a product of factors (var, d), each ceil(var / d), as in attnpack.family.
GridDim = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Field:
    """One argument slot of a packed kernarg buffer."""
    offset: int
    size: int                # bytes the value occupies (the rest of its slot is padding)
    aiter_name: str          # the slot's name in the code object's kernarg metadata
    wire: str                # "ptr" (8 bytes), "u32" or "f32" (4 bytes)
    word: str                # the launch word whose value fills it
    scale: int = 1           # the slot holds word * scale (tile strides)


@dataclass(frozen=True)
class KernargLayout:
    name: str
    size: int                # the whole buffer; equals the code object's kernarg_segment_size
    fields: tuple[Field, ...]
    aiter_struct: str        # where AITER declares it

    def field(self, aiter_name: str) -> Field:
        return next(f for f in self.fields if f.aiter_name == aiter_name)


def _slots(entries, slot_bytes: int, start: int = 0) -> list[Field]:
    """Fields placed one per fixed-size slot: AITER pads every value (p2 after a pointer, p3 or
    p1 after a 32-bit value) so each starts a new 16- or 8-byte slot."""
    out = []
    for i, (name, wire, word, *scale) in enumerate(entries):
        size = 8 if wire == "ptr" else 4
        out.append(Field(start + i * slot_bytes, size, name, wire, word, *scale))
    return out


def _strides(tensor: str, prefix: str, axes=("h", "b", "s")) -> list[tuple]:
    names = {"h": "Hs", "b": "BAs", "s": "Seqs"}
    return [(f"{names[a]}_{prefix}", "u32", f"{tensor}_stride_{a}_bytes") for a in axes]


def fwd_layout(causal: bool, tile_q: int) -> KernargLayout:
    """fmha_fwd_v3_args (csrc/include/mha_fwd.h): 32 slots of 16 bytes, strides in bytes."""
    entries = [
        ("R", "ptr", "o"), ("Q", "ptr", "q"), ("K", "ptr", "k"), ("V", "ptr", "v"),
        ("LSE", "ptr", "lse"),
        ("scalar", "f32", "sm_scale"),              # the plain softmax scale
        ("seq_len", "u32", "Sq"),
        ("Seqs", "u32", "q_stride_s_bytes"),
        ("Ts", "u32", "q_stride_s_bytes", tile_q),   # one Q tile of rows, in bytes
        ("Hs", "u32", "q_stride_h_bytes"),
        ("Bs", "u32", "q_stride_b_bytes"),
        ("gqa", "u32", "gqa_ratio"),
        ("k_Seqs", "u32", "k_stride_s_bytes"), ("k_Hs", "u32", "k_stride_h_bytes"),
        ("k_Bs", "u32", "k_stride_b_bytes"),
        ("msk_opt", "u32", "aiter_causal_opt" if causal else "const:5"),
        ("lse", "u32", "const:1"),                   # store LSE: the backward needs it
        ("kv_seq_len", "u32", "Sk"),
        ("qk_head_dim", "u32", "D"), ("v_head_dim", "u32", "D"),
        ("q_head_num", "u32", "Hq"),
        ("v_Seqs", "u32", "v_stride_s_bytes"), ("v_Hs", "u32", "v_stride_h_bytes"),
        ("v_Bs", "u32", "v_stride_b_bytes"),
        ("r_Seqs", "u32", "o_stride_s_bytes"), ("r_Hs", "u32", "o_stride_h_bytes"),
        ("r_Bs", "u32", "o_stride_b_bytes"),
        ("ptr_qseq", "ptr", "const:0"), ("ptr_kseq", "ptr", "const:0"),   # group mode only
        ("lse_Hs", "u32", "lse_stride_h_bytes"),     # LSE's batch stride is implied: Hq * lse_Hs
        ("ptr_qseq_padding", "ptr", "const:0"), ("ptr_kseq_padding", "ptr", "const:0"),
    ]
    return KernargLayout(f"fmha_fwd_v3_args{'_causal' if causal else ''}", 32 * 16,
                         tuple(_slots(entries, 16)), "csrc/include/mha_fwd.h: fmha_fwd_v3_args")


_BWD_POINTERS = [("dQ", "ptr", "dq_acc"), ("dK", "ptr", "dk"), ("dV", "ptr", "dv"),
                 ("Q", "ptr", "q"), ("K", "ptr", "k"), ("V", "ptr", "v"), ("dO", "ptr", "do"),
                 ("Lse", "ptr", "lse"), ("D", "ptr", "delta")]


def bwd_genl_layout() -> KernargLayout:
    """fmha_bwd_v3_genl_args (csrc/include/mha_bwd.h): nine bare pointers, then 32-bit values
    each followed by 4 bytes of padding (8-byte slots); every tensor has its own strides."""
    values = [
        ("scalar", "f32", "sm_scale"), ("log2e", "f32", "const:log2e"),
        ("ratio", "u32", "gqa_ratio"),
        ("seqlen_q", "u32", "Sq"), ("seqlen_k", "u32", "Sk"), ("head_dim", "u32", "D"),
        ("nhead_q", "u32", "Hq"),    # with Sq and D it addresses lse/delta and dq_acc
        *_strides("q", "q"), *_strides("k", "k"), *_strides("v", "v"),
        *_strides("do", "do"), *_strides("dk", "dk"), *_strides("dv", "dv"),
    ]
    fields = _slots(_BWD_POINTERS, 8) + _slots(values, 8, start=9 * 8)
    return KernargLayout("fmha_bwd_v3_genl_args", 9 * 8 + len(values) * 8, tuple(fields),
                         "csrc/include/mha_bwd.h: fmha_bwd_v3_genl_args")


def bwd_gfx950_layout(tile_kv: int) -> KernargLayout:
    """fmha_bwd_v3_args_gfx950 (hsa/gfx950/fmha_v3_bwd/codegen.py): 44 slots of 16 bytes."""
    entries = _BWD_POINTERS + [
        ("scalar", "f32", "sm_scale"), ("log2e", "f32", "const:log2e"),
        ("seqlen_q", "u32", "Sq"),
        ("Ts", "u32", "k_stride_s_bytes", tile_kv),   # one KV tile of rows, in bytes
        *_strides("q", "q"),
        ("ratio", "u32", "gqa_ratio"),
        *_strides("k", "k"),
        ("Seqs_dk", "u32", "dk_stride_s_bytes"),
        ("seqlen_k", "u32", "Sk"),
        ("head_dim_q", "u32", "D"),
        ("head_dim_k", "u32", "D"),   # the struct calls it head_dim_v; the metadata head_dim_k
        ("nhead_q", "u32", "Hq"),
        *_strides("v", "v"), *_strides("do", "do"),
        *_strides("dk", "dk", axes=("h", "b")), *_strides("dv", "dv"),
        ("Hs_lsed", "u32", "lse_stride_h_bytes"),
        # Group-mode sequence-start pointers. The C struct holds 8-byte pointers here; the code
        # object's metadata declares 4-byte values. Batch mode passes null, so the slot is zero
        # either way; the table follows the code object.
        ("ptr_seqstart_q", "u32", "const:0"), ("ptr_seqstart_k", "u32", "const:0"),
        ("ptr_seqstart_q_padded", "u32", "const:0"), ("ptr_seqstart_k_padded", "u32", "const:0"),
        ("max_seq_len_dq", "u32", "Sq"),              # batch mode: max_seqlen_q == Sq
        ("mask_x", "u32", "const:0"), ("mask_y", "u32", "const:0"),   # sliding window only
    ]
    return KernargLayout("fmha_bwd_v3_args_gfx950", len(entries) * 16,
                         tuple(_slots(entries, 16)),
                         "hsa/gfx950/fmha_v3_bwd/codegen.py: fmha_bwd_v3_args_gfx950")


# ---------------------------------------------------------------------------------------------
# The code objects.

# How AITER picks a gfx942 forward build (hsa/gfx942/fmha_v3_fwd/codegen.py, the kernel's
# constructor): hipDeviceProp_t::multiProcessorCount 304 -> MI300/, 80 or 64 -> MI308/; any
# other count loads nothing. The gfx942 backward and everything on gfx950 has one build.
CU_VARIANTS = {"MI300": (304,), "MI308": (80, 64), "any": ()}


@dataclass(frozen=True)
class CodeObject:
    arch: str
    op: str                          # "fwd" | "bwd"
    member: str                      # path in the wheel
    symbol: str                      # entry symbol (the kernel descriptor is symbol + ".kd")
    dtype: str
    head_dims: tuple[int, ...]       # attnpack head dims it serves (smaller ones are padded)
    causal: bool
    mask_alignment: str | None       # causal: "top_left" or "bottom_right"
    cu_variant: str                  # key of CU_VARIANTS
    layout: KernargLayout
    block: int                       # threads per workgroup (x)
    tile: int                        # rows of Q (fwd) or KV (bwd) one grid-x step covers
    grid: tuple[GridDim, GridDim, GridDim]
    rounding: str                    # how fp32 becomes bf16 inside the kernel

    @property
    def cu_counts(self) -> tuple[int, ...]:
        return CU_VARIANTS[self.cu_variant]

    @property
    def name(self) -> str:
        dims = "-".join(f"d{d}" for d in self.head_dims)
        variant = "" if self.cu_variant == "any" else f"-{self.cu_variant}"
        return (f"aiter_asm/{self.op}/{self.dtype}-{dims}-{'causal' if self.causal else 'full'}"
                f"/{self.arch}{variant}")


def _fwd(arch: str, cu_variant: str, causal: bool) -> CodeObject:
    folder = f"{arch}/fmha_v3_fwd" + ("" if cu_variant == "any" else f"/{cu_variant}")
    # gfx942 has three bf16 rounding builds; gfx950 converts in hardware (one build).
    rtne = "_rtne" if arch == "gfx942" else ""
    stem = f"fmha_fwd_hd128_bf16{'_causal' if causal else ''}{rtne}"
    tile_q = 256                     # FmhaFwdV3Ts ts_qo, hd128 on both archs
    # A masked forward launches half the Q tiles: each workgroup takes a pair (tg_div = 2).
    rows = tile_q * (2 if causal else 1)
    return CodeObject(
        arch=arch, op="fwd", member=f"{HSA_ROOT}/{folder}/{stem[len('fmha_'):]}.co",
        symbol=f"_ZN5aiter{len(stem)}{stem}E", dtype="bf16", head_dims=(128,), causal=causal,
        mask_alignment="bottom_right" if causal else None, cu_variant=cu_variant,
        layout=fwd_layout(causal, tile_q), block=512, tile=tile_q,
        grid=((("Sq", rows),), (("Hq", 1),), (("B", 1),)),
        rounding="round to nearest even" if arch == "gfx942" else "hardware (gfx950)")


# bwd tiles (FmhaBwdV3Ts ts_kv) and the head dims each build serves: AITER sends head dims
# (64, 128] that are multiples of 8 to the hd128 build (padding the head dim) and (128, 192]
# to the hd192 one; the hd64 build takes exactly 64. attnpack builds head dims 32, 64, 96, 128,
# 256, plus 192 here.
_BWD_HEAD_DIMS = {64: (64,), 128: (96, 128), 192: (192,)}
_BWD_TILE_KV = {("gfx942", 64): 192, ("gfx942", 128): 192, ("gfx942", 192): 64,
                ("gfx950", 128): 256}


def _bwd(arch: str, dtype: str, head_dim: int, causal: bool) -> CodeObject:
    # fp32-atomic dQ ("a32") builds with sequence padding ("pssk": any Sq, Sk) and, above head
    # dim 64, head-dim padding ("ddv"). The "causal" build is top-left aligned, F.sdpa's rule.
    pad = "pssk" if head_dim == 64 else "psskddv"
    rtne = "_rtne" if dtype == "bf16" and arch == "gfx942" else ""
    stem = f"fmha_bwd_hd{head_dim}_{dtype}{'_causal' if causal else ''}_a32{rtne}_{pad}"
    tile_kv = _BWD_TILE_KV[(arch, head_dim)]
    layout = bwd_gfx950_layout(tile_kv) if arch == "gfx950" else bwd_genl_layout()
    # A masked backward launches half the KV tiles (each workgroup takes two).
    rows = tile_kv * (2 if causal else 1)
    return CodeObject(
        arch=arch, op="bwd", member=f"{HSA_ROOT}/{arch}/fmha_v3_bwd/{stem[len('fmha_'):]}.co",
        symbol=f"_ZN5aiter{len(stem)}{stem}E", dtype=dtype, head_dims=_BWD_HEAD_DIMS[head_dim],
        causal=causal, mask_alignment="top_left" if causal else None, cu_variant="any",
        layout=layout, block=256, tile=tile_kv,
        grid=((("Sk", rows),), (("Hq", 1),), (("B", 1),)),
        rounding=("round to nearest even" if rtne else
                  "hardware (gfx950)" if arch == "gfx950" and dtype == "bf16" else "fp16"))


CODE_OBJECTS: tuple[CodeObject, ...] = (
    *(_fwd("gfx942", v, c) for v in ("MI300", "MI308") for c in (False, True)),
    *(_fwd("gfx950", "any", c) for c in (False, True)),
    *(_bwd("gfx942", t, d, c) for d in (64, 128, 192) for t in ("fp16", "bf16")
      for c in (False, True)),
    *(_bwd("gfx950", t, 128, c) for t in ("fp16", "bf16") for c in (False, True)),
)


def code_objects(arch: str | None = None, op: str | None = None) -> list[CodeObject]:
    return [o for o in CODE_OBJECTS if (arch is None or o.arch == arch)
            and (op is None or o.op == op)]


# Why each other fmha_v3 code object of the wheel is not shipped. First match wins.
EXCLUSIONS: tuple[tuple[str, str], ...] = (
    ("_group.co", "group (varlen) mode: takes cu_seqlens pointers, attnpack has no such words"),
    ("dq_shuffle", "reorders the 16-bit dQ of the a16 builds; not shipped (attnpack ships a32)"),
    ("_swa_", "sliding-window mask: attnpack has no window words"),
    ("_br_", "bottom-right causal; F.sdpa's is_causal is top-left (the _causal_ build)"),
    ("hd192_hd128", "head dim of V (128) differs from Q/K (192); attnpack keys carry one head dim"),
    ("gfx950/fmha_v3_bwd/bwd_hd64", "AITER's Python never routes head dim 64 to assembly on "
     "gfx950 (aiter/ops/mha.py can_impl_fmha_v3_bwd_gfx950); a '_recompile' build"),
    ("gfx950/fmha_v3_bwd/bwd_hd192", "AITER's Python never routes head dim 192 to assembly on "
     "gfx950 (aiter/ops/mha.py can_impl_fmha_v3_bwd_gfx950); a '_recompile' build"),
    ("_a16", "16-bit dQ accumulation: needs Sq == Sk, Sk % 64 == 0 and tied strides (dO like "
     "Q, V like K, dK/dV per q head) on gfx942, a padded dQ buffer and a shuffle on gfx950; "
     "attnpack ships the fp32-atomic (a32) build with its own dQ convert"),
    ("_rtna", "bf16 rounding to nearest, ties away; attnpack ships the ties-to-even (rtne) "
     "build, the rounding PyTorch uses"),
    ("_rtz", "bf16 rounding toward zero; attnpack ships the ties-to-even (rtne) build"),
    ("gfx942/fmha_v3_bwd/bwd_hd128_", "unpadded a32 fast path: needs Sq == Sk, Sk % 64 == 0 "
     "and tied strides, and AITER packs its 336-byte fmha_bwd_v3_args for a 352-byte kernarg "
     "segment; the psskddv build serves the same keys"),
    ("gfx942/fmha_v3_fwd/", "not referenced by this wheel's gfx942 dispatcher, which loads "
     "the _rtne/_rtna/_rtz builds"),
)


def exclusion_reason(member: str) -> str | None:
    """Why a wheel member is not shipped; None for the shipped ones."""
    if any(o.member == member for o in CODE_OBJECTS):
        return None
    return next((why for pattern, why in EXCLUSIONS if pattern in member), None)


# ---------------------------------------------------------------------------------------------
# The backward as one variant: preprocess, assembly kernel, dQ convert.
BWD_WORKSPACE = (
    # (name, shape words; both contiguous float32). dq_acc must be zero when the assembly
    # kernel starts: the prepare step zeroes it, so the runtime needs no memset.
    ("delta", ("B", "Hq", "Sq")),
    ("dq_acc", ("B", "Hq", "Sq", "D")),
)
BWD_SEQUENCE = (
    ("prepare", "glue.aiter_bwd_prepare: delta[b, h, s] = sum_d dO * O in float32 (what the "
                "triton family's attn_bwd_preprocess computes) and dq_acc rows zeroed"),
    ("asm", "the AITER backward: dK, dV written in the problem's dtype; dQ accumulated into "
            "dq_acc with float32 atomics, already multiplied by sm_scale; reads the forward's "
            "natural-log LSE [B, Hq, Sq] and delta, both float32"),
    ("convert_dq", "glue.aiter_bwd_convert_dq: dq = dq_acc rounded to the problem's dtype"),
)


# ---------------------------------------------------------------------------------------------
# What a launch needs from the problem, in Python: the reference for the runtime's packing
# and its checks before launching.

@dataclass(frozen=True)
class Problem:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    dtype: str
    causal: bool
    sm_scale: float
    strides: Mapping[str, int]                 # "<t>_stride_<b|h|s>" in elements
    pointers: Mapping[str, int] = field(default_factory=dict)
    cu_count: int = 0                           # the device's compute units (0: not known)

    @classmethod
    def contiguous(cls, B, Hq, Hkv, Sq, Sk, D, dtype="bf16", causal=False, sm_scale=None,
                   layout="bhsd", **kw) -> "Problem":
        """Tensors laid out [B, H, S, D] ("bhsd") or [B, S, H, D] ("bshd"), last dim dense."""
        strides = {}
        for t in STRIDE_TENSORS:
            h, s = (Hkv, Sk) if t in ("k", "v", "dk", "dv") else (Hq, Sq)
            if layout == "bhsd":
                st = {"b": h * s * D, "h": s * D, "s": D}
            else:
                st = {"b": s * h * D, "h": D, "s": h * D}
            strides.update({f"{t}_stride_{a}": v for a, v in st.items()})
        return cls(B, Hq, Hkv, Sq, Sk, D, dtype, causal,
                   1 / math.sqrt(D) if sm_scale is None else sm_scale, strides, **kw)


def word_value(word: str, p: Problem):
    if word.startswith("const:"):
        return LOG2E if word == "const:log2e" else int(word[len("const:"):])
    if word in ("B", "Hq", "Hkv", "Sq", "Sk", "D"):
        return getattr(p, word)
    if word == "sm_scale":
        return p.sm_scale
    if word == "lse_stride_h_bytes":
        return p.Sq * 4
    if word.endswith("_bytes") and "_stride_" in word:
        return p.strides[word[:-len("_bytes")]] * ELEMENT_BYTES[p.dtype]
    if word == "gqa_ratio":
        return p.Hq // p.Hkv
    if word == "aiter_causal_opt":
        return 3 if p.Hq % 8 != 0 or p.Sq > 16384 else 5
    if word in NEW_WORDS or word in EXISTING_WORDS:    # pointers
        return p.pointers.get(word, 0)
    raise KeyError(f"'{word}' is not a launch word of the aiter_asm family")


def unsupported_reason(obj: CodeObject, p: Problem) -> str | None:
    """Why this code object cannot serve the problem (None: it can). The runtime makes the
    same checks before launching and answers UNSUPPORTED with the reason."""
    if p.dtype != obj.dtype:
        return f"{obj.name}: dtype {p.dtype}, this build takes {obj.dtype}"
    if p.D not in obj.head_dims:
        return f"{obj.name}: head dim {p.D}, this build serves {obj.head_dims}"
    if p.causal != obj.causal:
        return f"{obj.name}: causal={p.causal}, this build is causal={obj.causal}"
    if min(p.B, p.Hq, p.Hkv, p.Sq, p.Sk) < 1:
        return f"{obj.name}: empty problem (B, Hq, Hkv, Sq, Sk must all be >= 1)"
    if p.Hq % p.Hkv:
        return f"{obj.name}: Hq {p.Hq} is not a multiple of Hkv {p.Hkv}"
    if obj.op == "bwd" and p.Hq != p.Hkv:
        # The kernel writes dK/dV per q head; GQA needs [B, Sk, Hq, D] dK/dV buffers and a
        # sum over each group afterwards, which this family does not build.
        return f"{obj.name}: GQA backward (Hq {p.Hq} != Hkv {p.Hkv}) is not built"
    if p.causal and obj.mask_alignment == "bottom_right" and p.Sq != p.Sk:
        return (f"{obj.name}: causal with Sq {p.Sq} != Sk {p.Sk}; this kernel's mask is "
                "bottom-right aligned, F.sdpa's top-left")
    if obj.cu_counts and p.cu_count not in obj.cu_counts:
        return (f"{obj.name}: a {obj.arch} device with {p.cu_count} compute units; this build "
                f"is for {obj.cu_counts} ({obj.cu_variant})")
    if not (p.sm_scale > 0 and math.isfinite(p.sm_scale)):
        return f"{obj.name}: softmax scale {p.sm_scale} (must be finite and > 0)"
    for f in obj.layout.fields:
        if f.wire != "u32":
            continue
        value = word_value(f.word, p) * f.scale
        if not 0 <= value <= U32_MAX:
            what = f.word if f.scale == 1 else f"{f.scale} * {f.word}"
            return f"{obj.name}: {what} = {value} does not fit the 32-bit slot {f.aiter_name}"
    return None


def pack_kernargs(obj: CodeObject, p: Problem) -> bytes:
    """The argument buffer exactly as the kernel reads it; padding is zero."""
    reason = unsupported_reason(obj, p)
    if reason:
        raise ValueError(reason)
    buf = bytearray(obj.layout.size)
    for f in obj.layout.fields:
        value = word_value(f.word, p)
        fmt = {"ptr": "<Q", "u32": "<I", "f32": "<f"}[f.wire]
        struct.pack_into(fmt, buf, f.offset, value * f.scale if f.wire != "f32" else value)
    return bytes(buf)


def grid_of(obj: CodeObject, p: Problem) -> tuple[int, int, int]:
    return tuple(math.prod(-(-getattr(p, var) // d) for var, d in dim) for dim in obj.grid)


def select(arch: str, op: str, p: Problem) -> tuple[CodeObject | None, list[str]]:
    """The code object serving the problem on this arch, or None and every refusal reason."""
    reasons = []
    for obj in code_objects(arch, op):
        reason = unsupported_reason(obj, p)
        if reason is None:
            return obj, []
        reasons.append(reason)
    return None, reasons
