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

from dataclasses import dataclass

from attnpack.abi import Requirement

from .source import HSA_ROOT

LOG2E = 1.4426950408889634          # AITER passes ck_tile::log2e_v<float>
ARCHS = ("gfx942", "gfx950")

# ---------------------------------------------------------------------------------------------
# Launch words: all from attnpack's generic vocabulary (python/attnpack/abi.py), so the runtime
# needs nothing AITER-specific. The slots are 32-bit values the kernels read as unsigned; they
# go as i32, and a value above 2^31 - 1 is unsupported (AITER keeps element strides in int32):
#   q k v o do dk dv lse, B Hq Sq Sk D, sm_scale (the plain scale; the kernels apply log2(e))
#   <t>_stride_<b|h|s>_bytes     byte strides of the element tensors
#   <t>_stride_s_bytes*<rows>    a tile of rows in bytes (the structs' `Ts`)
#   Hq_per_Hkv                   the GQA group size
#   lse_stride_h_bytes           Sq * 4: lse and delta are contiguous float32 [B, Hq, Sq]
#   const:<n>                    fixed slots: null group-mode pointers, flags, log2(e)
#   delta, dq_acc                the backward's workspace buffers (BWD_WORKSPACE)
LOG2E_WORD = f"const:{LOG2E!r}"

# One grid dimension is a product of factors (var, d), each ceil(var / d), as in attnpack.family.
GridDim = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Field:
    """One argument slot of a packed kernarg buffer."""
    offset: int
    size: int                # bytes the value occupies (the rest of its slot is padding)
    aiter_name: str          # the slot's name in the code object's kernarg metadata
    wire: str                # "ptr" (8 bytes), "i32" or "f32" (4 bytes)
    word: str                # the launch word whose value fills it (attnpack.abi)


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
    for i, (name, wire, word) in enumerate(entries):
        size = 8 if wire == "ptr" else 4
        out.append(Field(start + i * slot_bytes, size, name, wire, word))
    return out


def _strides(tensor: str, prefix: str, axes=("h", "b", "s")) -> list[tuple]:
    names = {"h": "Hs", "b": "BAs", "s": "Seqs"}
    return [(f"{names[a]}_{prefix}", "i32", f"{tensor}_stride_{a}_bytes") for a in axes]


# AITER's tune_opt ("s_opt"): 5, lowered to 3 for a masked forward when Hq % 8 != 0 or
# Sq > 16384. attnpack ships the 5 schedule only; the causal builds require its conditions.
MASK_OPT = 5


def fwd_layout(causal: bool, tile_q: int) -> KernargLayout:
    """fmha_fwd_v3_args (csrc/include/mha_fwd.h): 32 slots of 16 bytes, strides in bytes."""
    entries = [
        ("R", "ptr", "o"), ("Q", "ptr", "q"), ("K", "ptr", "k"), ("V", "ptr", "v"),
        ("LSE", "ptr", "lse"),
        ("scalar", "f32", "sm_scale"),              # the plain softmax scale
        ("seq_len", "i32", "Sq"),
        ("Seqs", "i32", "q_stride_s_bytes"),
        ("Ts", "i32", f"q_stride_s_bytes*{tile_q}"),  # one Q tile of rows, in bytes
        ("Hs", "i32", "q_stride_h_bytes"),
        ("Bs", "i32", "q_stride_b_bytes"),
        ("gqa", "i32", "Hq_per_Hkv"),
        ("k_Seqs", "i32", "k_stride_s_bytes"), ("k_Hs", "i32", "k_stride_h_bytes"),
        ("k_Bs", "i32", "k_stride_b_bytes"),
        ("msk_opt", "i32", f"const:{MASK_OPT}"),
        ("lse", "i32", "const:1"),                   # store LSE: the backward needs it
        ("kv_seq_len", "i32", "Sk"),
        ("qk_head_dim", "i32", "D"), ("v_head_dim", "i32", "D"),
        ("q_head_num", "i32", "Hq"),
        ("v_Seqs", "i32", "v_stride_s_bytes"), ("v_Hs", "i32", "v_stride_h_bytes"),
        ("v_Bs", "i32", "v_stride_b_bytes"),
        ("r_Seqs", "i32", "o_stride_s_bytes"), ("r_Hs", "i32", "o_stride_h_bytes"),
        ("r_Bs", "i32", "o_stride_b_bytes"),
        ("ptr_qseq", "ptr", "const:0"), ("ptr_kseq", "ptr", "const:0"),   # group mode only
        ("lse_Hs", "i32", "lse_stride_h_bytes"),     # LSE's batch stride is implied: Hq * lse_Hs
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
        ("scalar", "f32", "sm_scale"), ("log2e", "f32", LOG2E_WORD),
        ("ratio", "i32", "Hq_per_Hkv"),
        ("seqlen_q", "i32", "Sq"), ("seqlen_k", "i32", "Sk"), ("head_dim", "i32", "D"),
        ("nhead_q", "i32", "Hq"),    # with Sq and D it addresses lse/delta and dq_acc
        *_strides("q", "q"), *_strides("k", "k"), *_strides("v", "v"),
        *_strides("do", "do"), *_strides("dk", "dk"), *_strides("dv", "dv"),
    ]
    fields = _slots(_BWD_POINTERS, 8) + _slots(values, 8, start=9 * 8)
    return KernargLayout("fmha_bwd_v3_genl_args", 9 * 8 + len(values) * 8, tuple(fields),
                         "csrc/include/mha_bwd.h: fmha_bwd_v3_genl_args")


def bwd_gfx950_layout(tile_kv: int) -> KernargLayout:
    """fmha_bwd_v3_args_gfx950 (hsa/gfx950/fmha_v3_bwd/codegen.py): 44 slots of 16 bytes."""
    entries = _BWD_POINTERS + [
        ("scalar", "f32", "sm_scale"), ("log2e", "f32", LOG2E_WORD),
        ("seqlen_q", "i32", "Sq"),
        ("Ts", "i32", f"k_stride_s_bytes*{tile_kv}"),   # one KV tile of rows, in bytes
        *_strides("q", "q"),
        ("ratio", "i32", "Hq_per_Hkv"),
        *_strides("k", "k"),
        ("Seqs_dk", "i32", "dk_stride_s_bytes"),
        ("seqlen_k", "i32", "Sk"),
        ("head_dim_q", "i32", "D"),
        ("head_dim_k", "i32", "D"),   # the struct calls it head_dim_v; the metadata head_dim_k
        ("nhead_q", "i32", "Hq"),
        *_strides("v", "v"), *_strides("do", "do"),
        *_strides("dk", "dk", axes=("h", "b")), *_strides("dv", "dv"),
        ("Hs_lsed", "i32", "lse_stride_h_bytes"),
        # Group-mode sequence-start pointers. The C struct holds 8-byte pointers here; the code
        # object's metadata declares 4-byte values. Batch mode passes null, so the slot is zero
        # either way; the table follows the code object.
        ("ptr_seqstart_q", "i32", "const:0"), ("ptr_seqstart_k", "i32", "const:0"),
        ("ptr_seqstart_q_padded", "i32", "const:0"), ("ptr_seqstart_k_padded", "i32", "const:0"),
        ("max_seq_len_dq", "i32", "Sq"),              # batch mode: max_seqlen_q == Sq
        ("mask_x", "i32", "const:0"), ("mask_y", "i32", "const:0"),   # sliding window only
    ]
    return KernargLayout("fmha_bwd_v3_args_gfx950", len(entries) * 16,
                         tuple(_slots(entries, 16)),
                         "hsa/gfx950/fmha_v3_bwd/codegen.py: fmha_bwd_v3_args_gfx950")


# ---------------------------------------------------------------------------------------------
# The code objects.

# How AITER picks a gfx942 forward build (hsa/gfx942/fmha_v3_fwd/codegen.py, the kernel's
# constructor): hipDeviceProp_t::multiProcessorCount 304 -> MI300/, 80 or 64 -> MI308/; any
# other count loads nothing. The gfx942 backward and everything on gfx950 has one build.
CU_VARIANTS = {"MI300": (304,), "MI308": (80, 64), "single": ()}
CU_VARIANT_GPUS = {"MI300": "the MI300X/MI325X build: needs a 304-CU device",
                   "MI308": "the MI308X build: needs an 80- or 64-CU device"}

# sha256 of every shipped member, as the pinned wheel's RECORD lists it (checked again when
# the object is read, and by the prebuilt backend against this pin).
MEMBER_SHA256 = {
    "gfx942/fmha_v3_fwd/MI300/fwd_hd128_bf16_rtne.co":
        "074f06acd281efa21ccaa231daff109162861c5d91d3b095ea00c80bd3e68b9e",
    "gfx942/fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne.co":
        "ed4ba4b8d2bc737e313ebc675ac8fbe5beefe2a1d5dece7b0af22ef967c50145",
    "gfx942/fmha_v3_fwd/MI308/fwd_hd128_bf16_rtne.co":
        "0d637c24bca4fc777f9d55657c740875904091b59199ca2dc211df04f9d6e257",
    "gfx942/fmha_v3_fwd/MI308/fwd_hd128_bf16_causal_rtne.co":
        "d55431f40157e705064908602e5edb055d671d0483c9717fb832640719d2a523",
    "gfx950/fmha_v3_fwd/fwd_hd128_bf16.co":
        "0db3e1b8fbd078c628f79dccf0641129cc0d14b18e3273733f384c0427250183",
    "gfx950/fmha_v3_fwd/fwd_hd128_bf16_causal.co":
        "bb2ba1c81baec331fc1a5fc7e7b16a0e773131e368baf3624a2ca0a2ac543000",
    "gfx942/fmha_v3_bwd/bwd_hd64_fp16_a32_pssk.co":
        "3645da26cb50f497b2e9f24bda5e6990f1f5c573c2437c441e0cabab8a214eb0",
    "gfx942/fmha_v3_bwd/bwd_hd64_fp16_causal_a32_pssk.co":
        "48cee171832044a4139ba55d96c5b138df22f69820c2bc18abcf207aa45b852a",
    "gfx942/fmha_v3_bwd/bwd_hd64_bf16_a32_rtne_pssk.co":
        "54609c2d3864d5013c98ae0649ed0f5492db37255a6c9fb6bf2ff1ea36b18565",
    "gfx942/fmha_v3_bwd/bwd_hd64_bf16_causal_a32_rtne_pssk.co":
        "c1659c003062ac1d66f67a9e3dc07ded306785ec35c039f90279e3f2ac469c67",
    "gfx942/fmha_v3_bwd/bwd_hd128_fp16_a32_psskddv.co":
        "e07c2ff29b56249b454e831387eded54dc99545166fc52157be7b9451c7fe93b",
    "gfx942/fmha_v3_bwd/bwd_hd128_fp16_causal_a32_psskddv.co":
        "8b6b8cc4a280b8f5cd1f9cbc7ba8777605e374b1c9a93cd214806af8c39866e6",
    "gfx942/fmha_v3_bwd/bwd_hd128_bf16_a32_rtne_psskddv.co":
        "3ada70c67ddaec9c0559450b9c833d3d5280be918628dccfb68ceec95f900f37",
    "gfx942/fmha_v3_bwd/bwd_hd128_bf16_causal_a32_rtne_psskddv.co":
        "dc8572e63260f23c1c479379ba93d643e93c0f91cca14be6bb278ab8d001bd0c",
    "gfx942/fmha_v3_bwd/bwd_hd192_fp16_a32_psskddv.co":
        "4b4b96964c514b31b6876097c4d89d73a7db099fbe44f19a8729b40f2e87a1c5",
    "gfx942/fmha_v3_bwd/bwd_hd192_fp16_causal_a32_psskddv.co":
        "808c4455d2b2f0b70e881a9662de0629077172b5f70c23c800b88390303956aa",
    "gfx942/fmha_v3_bwd/bwd_hd192_bf16_a32_rtne_psskddv.co":
        "c1b93eff92154cfada913df5bd6dccccecfef9306421c4afce5e78e58950c96e",
    "gfx942/fmha_v3_bwd/bwd_hd192_bf16_causal_a32_rtne_psskddv.co":
        "6131cd318f04365f461f724f9af2ceb768ec948d34753262166394787e240d17",
    "gfx950/fmha_v3_bwd/bwd_hd128_fp16_a32_psskddv.co":
        "80e6fd8862e0398ab714cfa6c09de1f25ec187b8406774471cd6f8286d926126",
    "gfx950/fmha_v3_bwd/bwd_hd128_fp16_causal_a32_psskddv.co":
        "af81b958a471caa358fce61749ec4fa1e660a9ce6d40647e265f9ab62c50152e",
    "gfx950/fmha_v3_bwd/bwd_hd128_bf16_a32_psskddv.co":
        "93728df7751c1ac50e771b8e3b2d0f8678da677562347d1421de788dc60d74b2",
    "gfx950/fmha_v3_bwd/bwd_hd128_bf16_causal_a32_psskddv.co":
        "68bc0945e45bf8f557384efa734d6d8e928e566c29ad618c1ba90c04bb4a7aaa",
}


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
    def sha256(self) -> str:
        return MEMBER_SHA256[self.member[len(HSA_ROOT) + 1:]]

    @property
    def name(self) -> str:
        dims = "-".join(f"d{d}" for d in self.head_dims)
        variant = "" if self.cu_variant == "single" else f"-{self.cu_variant}"
        return (f"aiter_asm/{self.op}/{self.dtype}-{dims}-{'causal' if self.causal else 'full'}"
                f"/{self.arch}{variant}")

    @property
    def requires(self) -> tuple[Requirement, ...]:
        """What a problem must meet beyond the functional key, checked by the runtime before
        it chooses the kernel (it answers UNSUPPORTED with the `why`, and PyTorch falls back).
        Sizes, GQA divisibility and 32-bit slot overflow are the runtime's generic checks."""
        out = []
        if self.mask_alignment == "bottom_right":
            out.append(Requirement("Sq", "==", "Sk", "bottom-right causal mask: F.sdpa's "
                                   "top-left mask is the same only when Sq == Sk"))
        if self.op == "fwd" and self.causal:
            why = (f"AITER runs this masked forward with tune_opt {MASK_OPT} only then, the "
                   "schedule attnpack ships")
            out += [Requirement("Hq", "multiple_of", 8, why), Requirement("Sq", "<=", 16384, why)]
        if self.op == "bwd":
            out.append(Requirement("Hq_per_Hkv", "==", 1, "MHA only: the kernel writes dK and "
                                   "dV per query head; a GQA sum is not built"))
        if self.cu_counts:
            counts = self.cu_counts
            out.append(Requirement("num_sms", "==", counts[0], CU_VARIANT_GPUS[self.cu_variant])
                       if len(counts) == 1 else
                       Requirement("num_sms", "in", counts, CU_VARIANT_GPUS[self.cu_variant]))
        return tuple(out)


def _fwd(arch: str, cu_variant: str, causal: bool) -> CodeObject:
    folder = f"{arch}/fmha_v3_fwd" + ("" if cu_variant == "single" else f"/{cu_variant}")
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
        causal=causal, mask_alignment="top_left" if causal else None, cu_variant="single",
        layout=layout, block=256, tile=tile_kv,
        grid=((("Sk", rows),), (("Hq", 1),), (("B", 1),)),
        rounding=("round to nearest even" if rtne else
                  "hardware (gfx950)" if arch == "gfx950" and dtype == "bf16" else "fp16"))


CODE_OBJECTS: tuple[CodeObject, ...] = (
    *(_fwd("gfx942", v, c) for v in ("MI300", "MI308") for c in (False, True)),
    *(_fwd("gfx950", "single", c) for c in (False, True)),
    *(_bwd("gfx942", t, d, c) for d in (64, 128, 192) for t in ("fp16", "bf16")
      for c in (False, True)),
    *(_bwd("gfx950", t, 128, c) for t in ("fp16", "bf16") for c in (False, True)),
)


def code_objects(arch: str | None = None, op: str | None = None) -> list[CodeObject]:
    return [o for o in CODE_OBJECTS if (arch is None or o.arch == arch)
            and (op is None or o.op == op)]


def find(arch: str, op: str, dtype: str, head_dim: int, causal: bool,
         cu_variant: str) -> CodeObject | None:
    """The code object serving one functional key with one CU build, if any."""
    return next((o for o in CODE_OBJECTS if (o.arch, o.op, o.dtype, o.causal, o.cu_variant)
                 == (arch, op, dtype, causal, cu_variant) and head_dim in o.head_dims), None)


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
