"""The Gluon dual-wave (ping-pong) forward for sm_90: its launch step and declared variant space.

Run and measured on the H200 (docs/gluon-family.md). The family has priority 1000, so it is
never a family default: it serves where the tuning database picks it (141 of the 176 sm_90
forward keys), with the triton default behind it for inputs a TMA descriptor cannot take.

Config knobs:
  M           query rows per consumer warpgroup (a work tile is 2 * M rows)
  N           key rows per K/V tile
  stages      depth of the K/V shared-memory ring
  overlap     1: softmax(j) runs while the warpgroup's own PV(j - 1) is in flight (fwd.py);
              absent: the plain ping-pong, which waits for both GEMMs first
  persistent  1: one program per SM strides over the work tiles, O has its own shared buffer;
              absent: one program per work tile
"""
import inspect

from triton.experimental.gluon import language as gl

from attnpack.builder.backends.triton import TritonKernel
from attnpack.family import FamilySpec, FunctionalKey, Step, TensorMap
from attnpack.targets import TARGETS

from .fwd import attn_fwd_pingpong

SHARED_MEMORY_BYTES = TARGETS["sm_90"].shared_bytes
GL_DTYPE = {"fp16": gl.float16, "bf16": gl.bfloat16}

FWD_CONFIGS = (
    {"M": 64, "N": 128, "stages": 2},
    {"M": 64, "N": 64, "stages": 3},
    {"M": 64, "N": 128, "stages": 3},
    {"M": 64, "N": 64, "stages": 2},
    {"M": 64, "N": 128, "stages": 2, "overlap": 1},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1},
    {"M": 64, "N": 128, "stages": 3, "overlap": 1},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1},
    # persistent N128/2 stages keeps the plain schedule: the overlapped one spills at head dim 128
    {"M": 64, "N": 128, "stages": 2, "persistent": 1},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "persistent": 1},
    {"M": 64, "N": 128, "stages": 3, "overlap": 1, "persistent": 1},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1, "persistent": 1},
)

# setmaxnreg per partition: the loader needs few registers, which frees them for the two
# consumer warpgroups (accumulator M x D plus scores M x N fp32 over 128 threads each).
CONSUMER_REGS = 232
LOAD_REGS = 40


def _runtime_args(kernel) -> tuple[str, ...]:
    params = inspect.signature(kernel.fn).parameters.values()
    return tuple(p.name for p in params if p.annotation is not gl.constexpr)


def _tensor_map(name: str, tensor: str, rows: int, key: FunctionalKey) -> TensorMap:
    block = (1, 1, rows, key.head_dim)
    layout = gl.NVMMASharedLayout.get_default_for(list(block), GL_DTYPE[key.dtype])
    return TensorMap(name=name, tensor=tensor, block=block, layout=layout)


def steps(arch: str, op: str, key: FunctionalKey, config) -> tuple[Step, ...]:
    m, n = config["M"], config["N"]
    maps = (_tensor_map("q_desc", "q", m, key), _tensor_map("k_desc", "k", n, key),
            _tensor_map("v_desc", "v", n, key), _tensor_map("o_desc", "o", m, key))
    words = {"q_desc": "q_desc", "k_desc": "k_desc", "v_desc": "v_desc", "o_desc": "o_desc",
             "lse_ptr": "lse", "B": "B", "Hq": "Hq", "Hkv": "Hkv", "Sq": "Sq", "Sk": "Sk",
             "qk_scale": "sm_scale_log2"}
    args = tuple(words[a] for a in _runtime_args(attn_fwd_pingpong))
    constexprs = {"BLOCK_M": m, "BLOCK_N": n, "HEAD_DIM": key.head_dim,
                  "STAGES": config["stages"], "CAUSAL": key.causal,
                  "OVERLAP": bool(config.get("overlap", 0)),
                  "PERSISTENT": bool(config.get("persistent", 0)),
                  "CONSUMER_REGS": CONSUMER_REGS, "LOAD_REGS": LOAD_REGS}
    if config.get("persistent"):
        grid = ((("num_sms", 1),), (), ())
    else:
        grid = ((("Sq", 2 * m),), (("B", 1), ("Hq", 1)), ())
    return (Step(name="fwd", args=args, grid=grid, tensormaps=maps,
                 kernel=TritonKernel(attn_fwd_pingpong, constexprs, num_warps=4, num_stages=1)),)


def shared_memory_bytes(head_dim: int, config) -> int:
    """Two Q tiles (reused for O unless persistent, which has two O tiles of its own) and
    `stages` K and V tiles, 16-bit, plus barriers."""
    rows = (4 if config.get("persistent") else 2) * config["M"] + 2 * config["stages"] * config["N"]
    return 2 * head_dim * rows + 1024


def excluded(arch: str, op: str, key: FunctionalKey, config) -> str | None:
    need = shared_memory_bytes(key.head_dim, config)
    if need > SHARED_MEMORY_BYTES:
        return f"needs {need // 1024} KiB shared memory; sm_90 has {SHARED_MEMORY_BYTES // 1024} KiB"
    return None


def default_config(arch: str, op: str, key: FunctionalKey):
    # Never selected as a default (priority 1000); this only names the first config.
    return FWD_CONFIGS[0]


SPEC = FamilySpec(
    name="gluon",
    backend="triton",
    archs=("sm_90",),
    ops=("fwd",),
    functional={"dtype": ("fp16", "bf16"), "head_dim": (64, 128), "causal": (False, True)},
    configs={"fwd": FWD_CONFIGS},
    steps=steps,
    default_config=default_config,
    excluded=excluded,
    priority=1000,
    provenance={"license": "MIT", "origin": "attnpack (aot/kernels/gluon_attn), original code; "
                "correct and timed on the H200 (docs/gluon-family.md)"},
)
