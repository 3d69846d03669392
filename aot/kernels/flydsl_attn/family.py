"""The FlyDSL dual-wave forward for gfx950 (MI350/MI355X) as an attnpack family.

Compiled offline by FlyDSL (its own compiler, so its own compile backend: backend.FlyDSLBackend,
registered here) into plain AMDGPU code objects that libattnpack launches through HIP. FlyDSL is
a build-time dependency only. No AMD GPU exists where this is built: built, not run.

Policy:
- `serves`: every bucket with Sq and Sk of at least 256 (bucket 256 holds 129..256). A
  workgroup owns 256 query rows (8 waves x 32) and steps over keys in 32/64-key tiles behind a
  two-phase prologue, so below that most of its waves compute padding and the stagger between
  the two wave groups is not amortised; the triton family (128-row tiles) serves there. Sq =
  Sk = 128 buckets hold decode (Sq = 1) and short prompts.
- `priority` 50, below triton's 100: where both serve, the dual-wave kernel is the untuned
  default. That is a design choice (the two groups keep the matrix cores busy during each
  other's softmax, the schedule the Gluon ping-pong runs on the H200), not a measurement on
  gfx950; `attnpack tune` on an MI350 replaces it key by key.
- The triton family stays the catch-all per functional key (a family with `serves` never is),
  and its backward serves after this forward: the LSE here is the triton family's (natural
  log, float32, contiguous [B, Hq, Sq]).
"""
from attnpack.builder import backends
from attnpack.family import FamilySpec, FunctionalKey, Step

from . import tiles
from .backend import SUPPORTED_ARCHS, FlyDSLBackend, FlyDSLKernel, grid_rule, words_in_order

# Register the backend once per process; a second copy of this folder (a test's) reuses it:
# the backend only dispatches to the step's FlyDSLKernel, which runs its own folder's code.
try:
    backends.backend(FlyDSLBackend.name)
except KeyError:
    backends.register(FlyDSLBackend())

MIN_SEQ_BUCKET = 256

# Declared order matters: the config tag (kernel name) follows it. Which pairs a head dim can
# take is tiles.check_config's rule (whole 16-byte loads per wave group, no register spills).
CONFIGS = tuple({"waves_per_group": w, "block_n": n} for w in (4, 2) for n in (64, 32))


def excluded(arch: str, op: str, key: FunctionalKey, config) -> str | None:
    try:
        tiles.check_config(key.head_dim, key.dtype, dict(config))
    except ValueError as e:
        return str(e)
    return None


def default_config(arch: str, op: str, key: FunctionalKey):
    """tiles.DEFAULT_CONFIGS: 4 waves per group; 64-key tiles at d64, 32-key at d128 (a 64-key
    tile would spill at 256 registers per wave). Chosen by register/LDS fit, not measured."""
    want = tiles.DEFAULT_CONFIGS[key.head_dim]
    return next(c for c in CONFIGS if c == want)


def serves(arch: str, key) -> str | None:
    if key.sq < MIN_SEQ_BUCKET or key.sk < MIN_SEQ_BUCKET:
        return (f"Sq bucket {key.sq}, Sk bucket {key.sk}: below {MIN_SEQ_BUCKET} most of a "
                "256-row workgroup computes padding; triton serves short sequences")
    return None


def steps(arch: str, op: str, key: FunctionalKey, config) -> tuple[Step, ...]:
    full = tiles.check_config(key.head_dim, key.dtype, dict(config))
    kernel = FlyDSLKernel(key.dtype, key.head_dim, key.causal, tuple(sorted(full.items())))
    return (Step("fwd", words_in_order(), grid_rule(full), kernel),)


SPEC = FamilySpec(
    name="flydsl",
    backend=FlyDSLBackend.name,
    archs=SUPPORTED_ARCHS,
    ops=("fwd",),
    functional={"dtype": ("fp16", "bf16"), "head_dim": tiles.HEAD_DIMS, "causal": (False, True)},
    configs={"fwd": CONFIGS},
    steps=steps,
    default_config=default_config,
    excluded=excluded,
    priority=50,
    serves=serves,
    provenance={"license": "MIT", "origin": "attnpack (aot/kernels/flydsl_attn), original code; "
                "compiled by FlyDSL (Apache-2.0, PyPI flydsl) at build time, not shipped"},
)
