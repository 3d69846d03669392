"""The portable Triton flash-attention family: its launch steps and its declared variant space.

Functional keys: dtype x head dim x causal. Configs per op are tile sizes, warps and pipeline
stages. Configs carrying `wpe` (AMD's waves_per_eu occupancy hint) are the AMD ones and are the
only ones built for AMD targets; the others (deep cp.async pipelines, tuned on sm_90) for
NVIDIA targets. Within a vendor, `excluded` drops configs whose tiles do not fit the target's
shared memory/LDS (attnpack.targets) or would spill.
"""
import inspect

import triton
import triton.language as tl

from attnpack.abi import Requirement
from attnpack.builder.backends.triton import TritonKernel
from attnpack.family import FamilySpec, FunctionalKey, Step, TensorMap, Workspace
from attnpack.targets import TARGETS

from .bwd import attn_bwd_dkdv, attn_bwd_dq, attn_bwd_preprocess
from .decode import (attn_fwd_decode, attn_fwd_decode_combine, attn_fwd_decode_split,
                     attn_fwd_decode_split_tma, attn_fwd_decode_tma)
from .fwd import attn_fwd

# Portable: every target of attnpack.targets, by vendor (a new target needs no edit here).
ARCHS = tuple(TARGETS)
AMD_ARCHS = tuple(a for a in ARCHS if TARGETS[a].vendor == "amd")
PREPROCESS_BLOCK_M = 128

# ---- forward: M = query rows per program, N = KV rows per mainloop step
FWD_CONFIGS = (
    # sm_90. A 64-row Q tile is one wgmma warpgroup (4 warps); two such programs share an SM
    # (shared memory and registers allow it), so one's softmax overlaps the other's matmuls.
    {"M": 64, "N": 64, "warps": 4, "stages": 3},
    {"M": 128, "N": 128, "warps": 8, "stages": 3},  # two warpgroups, one program per SM
    {"M": 128, "N": 64, "warps": 8, "stages": 3},
    {"M": 64, "N": 32, "warps": 4, "stages": 2},    # head dim 256: no spill, fits shared memory
    {"M": 128, "N": 32, "warps": 8, "stages": 2},   # head dim 256
    # gfx942/gfx950: one stage (the AMD pipeliner's second stage made these tiles spill VGPRs;
    # LDS is 64/160 KiB); waves_per_eu trades VGPRs for occupancy
    {"M": 128, "N": 64, "warps": 4, "stages": 1, "wpe": 2},
    {"M": 128, "N": 128, "warps": 8, "stages": 1, "wpe": 2},
    {"M": 64, "N": 64, "warps": 4, "stages": 1, "wpe": 1},
    # decode (decode.py, sm_90): one program per (batch, KV head), the query rows of its GQA
    # group packed into the Q tile; served only for Sq <= DECODE_MAX_SQ (the kernel's `requires`)
    {"decode": 1, "M": 16, "N": 64, "warps": 4, "stages": 4},
    {"decode": 1, "M": 64, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "M": 16, "N": 32, "warps": 4, "stages": 3},    # head dim 256
    # split-KV decode: chunks of `split` keys in parallel, then a merge (decode.py), for
    # batches whose B·Hkv programs leave SMs idle. The short chunks (128, 256 keys) are for the
    # fewest streams and shortest caches, where 512-key chunks still leave few programs.
    {"decode": 1, "split": 128, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 256, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 256, "M": 16, "N": 32, "warps": 4, "stages": 3},  # head dim 256
    {"decode": 1, "split": 512, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 1024, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 1024, "M": 64, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 512, "M": 16, "N": 32, "warps": 4, "stages": 3},  # head dim 256
    {"decode": 1, "M": 16, "N": 64, "warps": 8, "stages": 3},
    {"decode": 1, "M": 64, "N": 64, "warps": 8, "stages": 3},
    {"decode": 1, "split": 1024, "M": 16, "N": 64, "warps": 8, "stages": 3},
    {"decode": 1, "split": 512, "M": 16, "N": 64, "warps": 8, "stages": 3},
    # long chunks, for one wave of two or three programs per SM: an H200 holds 396 of these at
    # once (70 KiB of shared memory each). 128 streams of 8192 keys make 1024 programs in
    # 1024-key chunks (2.6 waves), 512 in 2048-key chunks and 256 in 4096-key chunks; run83 saw
    # one unsplit program per SM (128 streams) stream K/V at 3.7 TB/s, two (256) at 4.3 TB/s
    {"decode": 1, "split": 2048, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 4096, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "split": 8192, "M": 16, "N": 64, "warps": 4, "stages": 3},
    # K and V by TMA (decode.py, sm_90, head dim <= 128): the copy engine instead of 128
    # threads' cp.async. Deeper rings where one program has the SM to itself (the unsplit
    # kernels at 128 streams), two programs per SM for the chunked ones.
    {"decode": 1, "tma": 1, "M": 16, "N": 64, "warps": 4, "stages": 4},
    {"decode": 1, "tma": 1, "M": 64, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "M": 16, "N": 64, "warps": 4, "stages": 6},
    {"decode": 1, "tma": 1, "M": 16, "N": 128, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "split": 512, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "split": 1024, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "split": 2048, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "split": 4096, "M": 16, "N": 64, "warps": 4, "stages": 3},
    {"decode": 1, "tma": 1, "split": 8192, "M": 16, "N": 64, "warps": 4, "stages": 3},
)
DECODE_MAX_SQ = 16
COMBINE_CHUNKS = 16  # chunk results one merge step reads at a time

# ---- backward: the dK/dV kernel owns kvN keys and steps over queries kvM at a time, with kvW
# warps and kvS pipeline stages; the dQ kernel owns qM queries and steps over keys qN at a
# time, with qW warps and qS stages. The two kernels are timed separately by the sweep
# (bench/triton_family.py --sweep), so a config may pair the best of each.
BWD_CONFIGS = (
    # sm_90: one warpgroup per program, two programs per SM (as the forward)
    {"kvN": 64, "kvM": 32, "kvW": 4, "kvS": 3, "qM": 64, "qN": 32, "qW": 4, "qS": 3},
    {"kvN": 64, "kvM": 32, "kvW": 4, "kvS": 3, "qM": 64, "qN": 64, "qW": 4, "qS": 2},
    {"kvN": 128, "kvM": 32, "kvW": 8, "kvS": 2, "qM": 128, "qN": 64, "qW": 8, "qS": 2},
    {"kvN": 64, "kvM": 64, "kvW": 8, "kvS": 2, "qM": 128, "qN": 32, "qW": 8, "qS": 2},  # d256
    # gfx942/gfx950
    {"kvN": 64, "kvM": 32, "kvW": 4, "kvS": 1, "qM": 64, "qN": 32, "qW": 4, "qS": 1, "wpe": 1},
    {"kvN": 128, "kvM": 32, "kvW": 8, "kvS": 1, "qM": 128, "qN": 32, "qW": 8, "qS": 1, "wpe": 1},
    {"kvN": 32, "kvM": 16, "kvW": 4, "kvS": 1, "qM": 64, "qN": 32, "qW": 4, "qS": 1, "wpe": 1},  # d256
)

# Configs that exist for head dim 256 only. On sm_90 they measured 15-45 % slower than the
# 64-row one-warpgroup tiles at head dim <= 128 on H200 (docs/triton-family.md); on AMD the
# smaller tile is needed only where the larger ones spill. The build skips them elsewhere.
HEAD_DIM_256_ONLY = (
    {"M": 64, "N": 32, "warps": 4, "stages": 2},
    {"M": 128, "N": 32, "warps": 8, "stages": 2},
    {"kvN": 64, "kvM": 64, "kvW": 8, "kvS": 2, "qM": 128, "qN": 32, "qW": 8, "qS": 2},
    {"kvN": 32, "kvM": 16, "kvW": 4, "kvS": 1, "qM": 64, "qN": 32, "qW": 4, "qS": 1, "wpe": 1},
)


# The largest head dim at which an AMD config compiles without VGPR spills (triton 3.6, gfx942
# and gfx950, waves_per_eu as declared); the small configs cover the larger head dims.
AMD_MAX_HEAD_DIM = {("fwd", 128, 128): 64, ("fwd", 128, 64): 128, ("bwd", 128, 32): 64,
                    ("bwd", 64, 32): 128}


def _amd_max_head_dim(op: str, config) -> int:
    tiles = (config["M"], config["N"]) if op == "fwd" else (config["kvN"], config["kvM"])
    return AMD_MAX_HEAD_DIM.get((op, *tiles), 256)


def _runtime_args(kernel) -> tuple[str, ...]:
    """The kernel's non-constexpr parameters, in order: the step's launch-spec argument list."""
    params = inspect.signature(kernel.fn).parameters.values()
    return tuple(p.name for p in params if p.annotation is not tl.constexpr)


def _block_d(head_dim: int) -> int:
    return triton.next_power_of_2(head_dim)  # 96 runs as 128 with masked columns


def _has_tma(arch: str) -> bool:
    return TARGETS[arch].vendor == "nvidia" and int(arch[3:]) >= 90


def _kv_maps(key: FunctionalKey, config) -> tuple[TensorMap, ...]:
    """K and V of a TMA decode config: [1, 1, N, head dim] boxes of the [B, Hkv, Sk, D] tensors,
    in the shared layout Triton picks for such a tile (the builder checks the compiled one)."""
    block = (1, 1, config["N"], _block_d(key.head_dim))
    return tuple(TensorMap.tile(f"{t}_desc", t, block, key.dtype) for t in ("k", "v"))


def _step(name, kernel, grid, constexprs, arch, config, warps, stages, tensormaps=()) -> Step:
    args = _runtime_args(kernel)
    return Step(name=name, args=args, grid=grid, tensormaps=tensormaps, kernel=TritonKernel(
        kernel, constexprs, num_warps=warps, num_stages=stages,
        # strides are multiples of 16 elements for every head dim we serve (and for BSHD
        # views); the runtime checks the promise and falls back otherwise
        divisible_by_16=tuple(a for a in args if "_stride_" in a),
        options={"waves_per_eu": config["wpe"]} if arch in AMD_ARCHS else {}))


def steps(arch: str, op: str, key: FunctionalKey, config) -> tuple[Step, ...]:
    head = {"HEAD_DIM": key.head_dim, "BLOCK_D": _block_d(key.head_dim)}
    per_q_tile = lambda rows: ((("Sq", rows),), (("B", 1), ("Hq", 1)), ())
    per_kv_tile = lambda rows: ((("Sk", rows),), (("B", 1), ("Hkv", 1)), ())
    if op == "fwd":
        tiles = {"BLOCK_M": config["M"], "BLOCK_N": config["N"], "CAUSAL": key.causal}
        tma = bool(config.get("tma"))
        maps = _kv_maps(key, config) if tma else ()
        if config.get("split"):
            chunk = config["split"]
            per_chunk = ((("Sk", chunk),), (("B", 1), ("Hkv", 1)), ())
            per_row = ((("Sq", 1),), (("B", 1), ("Hq", 1)), ())
            return (_step("fwd_split", attn_fwd_decode_split_tma if tma else attn_fwd_decode_split,
                          per_chunk, {**head, **tiles, "CHUNK": chunk}, arch, config,
                          config["warps"], config["stages"], maps),
                    _step("fwd_combine", attn_fwd_decode_combine, per_row,
                          {**head, "CHUNK": chunk, "BLOCK_C": COMBINE_CHUNKS}, arch, config, 4, 1))
        if config.get("decode"):
            per_kv_head = ((("B", 1), ("Hkv", 1)), (), ())
            return (_step("fwd", attn_fwd_decode_tma if tma else attn_fwd_decode, per_kv_head,
                          {**head, **tiles}, arch, config, config["warps"], config["stages"],
                          maps),)
        return (_step("fwd", attn_fwd, per_q_tile(config["M"]), {**head, **tiles}, arch, config,
                      config["warps"], config["stages"]),)
    dkdv_tiles = {"BLOCK_M": config["kvM"], "BLOCK_N": config["kvN"], "CAUSAL": key.causal}
    dq_tiles = {"BLOCK_M": config["qM"], "BLOCK_N": config["qN"], "CAUSAL": key.causal}
    return (
        _step("bwd_preprocess", attn_bwd_preprocess, per_q_tile(PREPROCESS_BLOCK_M),
              {**head, "BLOCK_M": PREPROCESS_BLOCK_M}, arch, config, 4, 1),
        _step("bwd_dkdv", attn_bwd_dkdv, per_kv_tile(config["kvN"]), {**head, **dkdv_tiles},
              arch, config, config["kvW"], config["kvS"]),
        _step("bwd_dq", attn_bwd_dq, per_q_tile(config["qM"]), {**head, **dq_tiles},
              arch, config, config["qW"], config["qS"]),
    )


def shared_memory_bytes(arch: str, op: str, head_dim: int, config) -> int:
    """Upper bound of the shared memory (LDS) the compiled kernel asks for, 16-bit tiles.

    Calibrated on triton 3.6 compiles: on sm_90 the Q (or resident K/V, Q/dO) tiles plus
    `stages` buffers of each streamed tile, plus LSE/delta rows; on AMD Q stays in registers
    and the streamed tiles are buffered at most twice per stage.
    """
    d = _block_d(head_dim)
    if op == "fwd":
        s = config["stages"]
        if arch in AMD_ARCHS:
            return 4 * d * config["N"] * s
        return 2 * d * (config["M"] + 2 * s * config["N"])
    kv_s, q_s = config["kvS"], config["qS"]
    if arch in AMD_ARCHS:
        return 2 * d * max(config["kvN"] + 2 * kv_s * config["kvM"],
                           config["qM"] + 2 * q_s * config["qN"])
    dkdv = 2 * d * (2 * config["kvN"] + 2 * kv_s * config["kvM"]) + 8 * kv_s * config["kvM"]
    dq = 2 * d * (2 * config["qM"] + 2 * q_s * config["qN"])
    return max(dkdv, dq)


def fwd_registers_per_thread(head_dim: int, config) -> int:
    """fp32 values each sm_90 thread holds for the O accumulator plus the score tile."""
    return config["M"] * (_block_d(head_dim) + config["N"]) // (32 * config["warps"])


def excluded(arch: str, op: str, key: FunctionalKey, config) -> str | None:
    amd_config = "wpe" in config
    if arch in AMD_ARCHS and not amd_config:
        return "sm_90 config (cp.async pipeline depth, no waves_per_eu); AMD has its own"
    if arch not in AMD_ARCHS and amd_config:
        return "AMD config (waves_per_eu, shallow LDS pipeline); sm_90 has its own"
    if config.get("tma") and not _has_tma(arch):
        return "K/V by TMA (tensor descriptors), which needs sm_90 or later"
    if config.get("tma") and key.head_dim > 128:
        return "a TMA decode tile for head dims up to 128 (head dim 256 keeps the cp.async ones)"
    if arch in AMD_ARCHS and key.head_dim > _amd_max_head_dim(op, config):
        return f"spills VGPRs above head dim {_amd_max_head_dim(op, config)} on AMD"
    need, have = shared_memory_bytes(arch, op, key.head_dim, config), TARGETS[arch].shared_bytes
    if need > have:
        return f"needs up to {need // 1024} KiB shared memory; {arch} has {have // 1024} KiB"
    if config.get("decode") and key.head_dim > 128 and config["N"] > 32:
        return "a decode tile that spills at head dim 256 on sm_90 (ptxas: 168-184-byte frames)"
    if key.head_dim <= 128 and dict(config) in HEAD_DIM_256_ONLY:
        return "a head-dim-256 tile; the larger tiles serve head dim <= 128 (faster on H200)"
    # ptxas spills once accumulator + scores pass ~144 fp32 registers per thread (measured:
    # 128 and 144 clean, 160 and 192 spill hundreds of bytes)
    if op == "fwd" and arch not in AMD_ARCHS and fwd_registers_per_thread(key.head_dim, config) > 144:
        return (f"{fwd_registers_per_thread(key.head_dim, config)} fp32 accumulator/score "
                "registers per thread would spill on sm_90")
    return None


def workspace(arch: str, op: str, key: FunctionalKey, config) -> tuple[Workspace, ...]:
    """The backward's Δ; a split-KV decode's chunk results (fp32, one per ceil(Sk/split))."""
    if op == "bwd":
        return (Workspace("delta", ("B", "Hq", "Sq")),)
    if config.get("split"):
        chunks = f"Sk/{config['split']}"
        return (Workspace("o_part", ("B", "Hq", "Sq", chunks, "D")),
                Workspace("lse_part", ("B", "Hq", "Sq", chunks)))
    return ()


def requires(arch: str, op: str, key: FunctionalKey, config) -> tuple[Requirement, ...]:
    if config.get("decode"):
        return (Requirement("Sq", "<=", DECODE_MAX_SQ,
                            f"the decode kernel serves at most {DECODE_MAX_SQ} query rows per head"),)
    return ()


def _find(op: str, **fields):
    for config in (FWD_CONFIGS if op == "fwd" else BWD_CONFIGS):
        if all(config.get(k) == v for k, v in fields.items()) and len(config) == len(fields):
            return config
    raise KeyError(f"no {op} config {fields}")


def default_config(arch: str, op: str, key: FunctionalKey):
    """The measured default (`measured_default`) where it fits the target; on a target it was
    not measured for and does not fit (sm_80's 163 KiB of shared memory at head dim 256), the
    first declared config of the target's vendor that does."""
    preferred = measured_default(arch, op, key)
    if excluded(arch, op, key, preferred) is None:
        return preferred
    fitting = [c for c in (FWD_CONFIGS if op == "fwd" else BWD_CONFIGS)
               if excluded(arch, op, key, c) is None]
    return fitting[0] if fitting else preferred  # none fits: the build names the exclusion


def measured_default(arch: str, op: str, key: FunctionalKey):
    """The bundle's config per functional key before any tuning database exists.

    sm_90, measured on H200 (bench/triton_family.py --sweep; docs/triton-family.md):
      fwd, head dim <= 128: the 64-row Q tile on one warpgroup, KV 64, 3 stages; it had the best
        geometric mean at head dims 64 and 128, causal or not (two programs fit on one SM).
      fwd, head dim 256: the only tiles that neither spill nor overflow shared memory; 64 rows.
      bwd: dK/dV on 64-key tiles stepping 32 queries with one warpgroup and 3 stages was the
        fastest dK/dV kernel on every measured shape. dQ on 64-query tiles: KV steps of 64 with
        2 stages won for non-causal head dim > 64; steps of 32 with 3 stages won elsewhere.
      head dims 32 and 96 were not measured: they take the configs of 64 and 128 (96 runs as a
        masked 128); 256 takes the one backward config that keeps its spills smallest.
    AMD, built but never run here: the tiles AMD's own Triton attention uses on MI300 (Q 128 x
    KV 64, 4 warps, 1 stage, waves_per_eu 2), and the small tile at head dim 256, the only one
    that fits gfx942's 64 KiB LDS. Backward: the small-footprint config (64-key dK/dV tiles),
    and at head dim 256 32-key tiles, the largest whose dK/dV accumulators fit without spilling.
    """
    d = key.head_dim
    if arch in AMD_ARCHS:
        if op == "fwd":
            if d <= 128:
                return _find("fwd", M=128, N=64, warps=4, stages=1, wpe=2)
            return _find("fwd", M=64, N=64, warps=4, stages=1, wpe=1)
        if d <= 128:
            return _find("bwd", kvN=64, kvM=32, kvW=4, kvS=1, qM=64, qN=32, qW=4, qS=1, wpe=1)
        return _find("bwd", kvN=32, kvM=16, kvW=4, kvS=1, qM=64, qN=32, qW=4, qS=1, wpe=1)
    if op == "fwd":
        if d <= 128:
            return _find("fwd", M=64, N=64, warps=4, stages=3)
        return _find("fwd", M=64, N=32, warps=4, stages=2)
    if d <= 64 or (d <= 128 and key.causal):
        return _find("bwd", kvN=64, kvM=32, kvW=4, kvS=3, qM=64, qN=32, qW=4, qS=3)
    if d <= 128:
        return _find("bwd", kvN=64, kvM=32, kvW=4, kvS=3, qM=64, qN=64, qW=4, qS=2)
    return _find("bwd", kvN=64, kvM=64, kvW=8, kvS=2, qM=128, qN=32, qW=8, qS=2)


SPEC = FamilySpec(
    name="triton",
    backend="triton",
    archs=ARCHS,
    ops=("fwd", "bwd"),
    functional={"dtype": ("fp16", "bf16"), "head_dim": (32, 64, 96, 128, 256),
                "causal": (False, True)},
    configs={"fwd": FWD_CONFIGS, "bwd": BWD_CONFIGS},
    steps=steps,
    default_config=default_config,
    excluded=excluded,
    requires=requires,
    workspace=workspace,
    provenance={"license": "MIT", "origin": "attnpack (aot/kernels/triton_attn), original code"},
    # No atomics: every dK/dV tile is owned by one program that walks all of its query heads
    # and rows, and dQ is a separate kernel (bwd.py).
    deterministic_backward=True,
)
