"""Archives and helpers shared by the runtime's CPU tests (test_runtime_*.py import this).

Two kinds of archive:
- real ones, compiled by the builder from the toy family (tests/cpu/fixtures/kernels, about two
  seconds) and, for the launch-spec check, one head dim of the Triton family;
- synthetic ones, written by the archive writer with stand-in image bytes, whose index says
  exactly what a test needs (head dims, dtypes, clusters, scratch, tensor maps). The runtime
  never runs an image on the CPU, so any bytes do: it checks their sha256, as on a GPU.

$ATTNPACK_TEST_ARCHIVE_DIR, when set, holds the compiled archives from an earlier run (the
AddressSanitizer run uses it, so that no compiler runs under the sanitizer).
"""
from __future__ import annotations

import hashlib
import os
import random
import threading
from pathlib import Path

import pytest

from attnpack import abi
from attnpack import runtime as rt
from attnpack.keys import FunctionalKey
from attnpack.targets import target

FIXTURE_KERNELS = Path(__file__).parent / "fixtures" / "kernels"
PARAM_SIZE = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4, "tensormap": 128}
PARAM_ALIGN = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4, "tensormap": 64}


# sm_90 kernels' parameters start at constant-bank offset 0x210 (the cubin's EIATTR_PARAM_CBANK)
# and ptxas aligns each against that absolute address: a descriptor's `.align 64` puts it at an
# argument offset of 48 mod 64 (measured on triton 3.6 cubins, tests/cpu/test_gluon_family.py).
CUDA_PARAM_BASE = 0x210


def param_offsets(types, base=CUDA_PARAM_BASE) -> list[int]:
    """The documented rule: natural alignment against the parameters' base address."""
    offsets, offset = [], 0
    for t in types:
        offset = -(-(base + offset) // PARAM_ALIGN[t]) * PARAM_ALIGN[t] - base
        offsets.append(offset)
        offset += PARAM_SIZE[t]
    return offsets


def kernarg_size(types) -> int:
    """The end of the last parameter, padded to 8."""
    types = list(types)
    if not types:
        return 0
    end = param_offsets(types)[-1] + PARAM_SIZE[types[-1]]
    return -(-end // 8) * 8


def strides_of(*tensors):
    return [abi.stride_name(t, a) for t in tensors for a in abi.STRIDE_AXES]


def step(name, image, words, grid, *, workspace=(), block=(128, 1, 1), shared=0,
         cluster=(1, 1, 1), scratch=None, tensormaps=(), divisible=(), kernarg=None) -> dict:
    """A launch-spec step record as the builder writes it (params typed by the vocabulary and
    placed at the offsets ptxas would give them; a real build reads them from the image)."""
    params = []
    for word in list(words) + list(abi.TRITON_SCRATCH):
        tm = next((m for m in tensormaps if m["param"] == word), None)
        typ = "tensormap" if tm else abi.param_type(word, tuple(workspace))
        div = 16 if (typ == "ptr" and word not in abi.TRITON_SCRATCH) or word in divisible else 1
        params.append([word, typ, div])
    for param, offset in zip(params, param_offsets([p[1] for p in params])):
        param.append(offset)
    return {"name": name, "image": image, "symbol": f"sym{image}", "params": params,
            "grid": [[list(f) for f in dim] for dim in grid], "block": list(block),
            "shared": shared, "cluster": list(cluster),
            "scratch": scratch or {"global_size": 0, "global_align": 1, "profile_size": 0,
                                   "profile_align": 1},
            "tensormaps": list(tensormaps),
            "kernarg_size": kernarg_size([p[1] for p in params]) if kernarg is None else kernarg}


FWD_WORDS = ["q", "k", "v", "o", "lse", *strides_of("q", "k", "v", "o"),
             "Hq", "Hkv", "Sq", "Sk", "sm_scale_log2"]
BWD_PRE_WORDS = ["o", "do", "delta", *strides_of("o", "do"), "Hq", "Sq"]
BWD_WORDS = ["q", "k", "v", "do", "dq", "dk", "dv", "lse", "delta",
             *strides_of("q", "k", "v", "do", "dq", "dk", "dv"),
             "Hq", "Hkv", "Sq", "Sk", "sm_scale", "sm_scale_log2"]
PER_Q_TILE = ((("Sq", 128),), (("B", 1), ("Hq", 1)), ())
PER_KV_TILE = ((("Sk", 64),), (("B", 1), ("Hkv", 1)), ())


def kernel(family, op, dtype, head_dim, causal, steps, config="M128", workspace=()) -> dict:
    tag = FunctionalKey(dtype, head_dim, causal).tag
    return {"name": f"{family}/{op}/{tag}/{config}", "family": family, "op": op,
            "key": {"dtype": dtype, "head_dim": head_dim, "causal": causal},
            "deterministic": True,
            "config": {"tile": config}, "steps": steps,
            "workspace": [{"name": n, "shape": ["B", "Hq", "Sq"]} for n in workspace]}


def attention_kernels(dtypes=("fp16", "bf16"), head_dims=(64, 128), image=0) -> list[dict]:
    """Forward and backward kernels shaped like the Triton family's, over one stand-in image."""
    out = []
    for dtype in dtypes:
        for d in head_dims:
            for causal in (False, True):
                out.append(kernel("synth", "fwd", dtype, d, causal, [
                    step("fwd", image, FWD_WORDS, PER_Q_TILE, shared=98304,
                         divisible=strides_of("q", "k", "v", "o"))]))
                out.append(kernel("synth", "bwd", dtype, d, causal, [
                    step("bwd_preprocess", image, BWD_PRE_WORDS, PER_Q_TILE, workspace=["delta"]),
                    step("bwd", image, BWD_WORDS, PER_KV_TILE, workspace=["delta"],
                         divisible=strides_of("q", "k", "v", "do", "dq", "dk", "dv"))],
                    workspace=["delta"]))
    return out


def write_synthetic(path: Path, kernels: list[dict], *, arch="sm_90", images=None,
                    selection=None, tuning=None) -> Path:
    """An archive through the real writer, with stand-in images; every kernel is selected."""
    from attnpack.archive import Image, write_archive
    kind = target(arch).image_kind
    count = 1 + max(s["image"] for k in kernels for s in k["steps"])
    images = images or [Image(kind, f"sym{i}", bytes(range(256)) * (40 + i)) for i in range(count)]
    if selection is None:
        selection = [{"op": k["op"], **k["key"], "kernel": k["name"]} for k in kernels]
    families = {k["family"]: {"backend": "triton", "compilers": ["triton"], "priority": 100,
                              "provenance": {"license": "MIT", "origin": "test fixture"}}
                for k in kernels}
    return write_archive(path, arch=arch, target=target(arch).meta(), bundle_version="0.1.0",
                         compilers={"triton": "3.6.0"}, images=images, kernels=kernels,
                         selection=selection, families=families, tuning=tuning)


def resealed(src: Path, dst: Path, edit_meta=None, edit_index=None) -> Path:
    """A copy whose meta and index were edited, with the index re-compressed and the meta's
    sizes, offsets and hashes made consistent again (then `edit_meta` applied, so an edit of
    those fields stands), as a buggy or hostile writer would leave it."""
    import zstandard
    from attnpack.archive.format import PREAMBLE, ZSTD_LEVEL, pack, unpack
    data = src.read_bytes()
    magic, major, minor, meta_size, _ = PREAMBLE.unpack_from(data)
    meta = unpack(data[PREAMBLE.size:PREAMBLE.size + meta_size])
    start, size = meta["index_offset"], meta["index_size"]
    index = unpack(zstandard.ZstdDecompressor().decompress(data[start:start + size]))
    if edit_index:
        edit_index(index)
    raw_index = pack(index)
    index_bytes = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False,
                                           write_content_size=True).compress(raw_index)
    meta.update(index_size=len(index_bytes), index_raw_size=len(raw_index),
                index_sha256=hashlib.sha256(index_bytes).digest())
    meta_bytes = b""
    for _ in range(3):  # the meta's size depends on the offsets it records
        meta["index_offset"] = PREAMBLE.size + len(meta_bytes)
        meta["images_offset"] = meta["index_offset"] + len(index_bytes)
        edited = unpack(pack(meta))
        if edit_meta:
            edit_meta(edited)
        meta_bytes = pack(edited)
    preamble = PREAMBLE.pack(magic, major, minor, len(meta_bytes), hashlib.sha256(meta_bytes).digest())
    dst.write_bytes(preamble + meta_bytes + index_bytes + data[start + size:])  # + the images
    return dst


def patched(src: Path, dst: Path, offset: int, data: bytes) -> Path:
    """A copy of `src` with `data` written over it at `offset` (negative: from the end)."""
    raw = bytearray(src.read_bytes())
    offset = offset % len(raw)
    raw[offset:offset + len(data)] = data
    dst.write_bytes(bytes(raw))
    return dst


def flipped(src: Path, dst: Path, offset: int) -> Path:
    raw = src.read_bytes()
    return patched(src, dst, offset, bytes([raw[offset % len(raw)] ^ 0x55]))


def expect_error(status: rt.Status, call, *args, **kwargs) -> str:
    """Runs `call`, asserts it fails with `status`, returns the message."""
    with pytest.raises(rt.AttnpackError) as info:
        call(*args, **kwargs)
    assert info.value.status == status, info.value
    return info.value.message


def build_toy(root: Path) -> dict[str, Path]:
    """arch -> toy archive compiled into root/toy, for sm_90 and gfx950."""
    from attnpack.builder import BuildRequest, build_archives
    req = BuildRequest(archs=("sm_90", "gfx950"), out_dir=root / "toy", kernels_root=FIXTURE_KERNELS,
                       cache_dir=root / "cache", jobs=2, all_variants=True)
    return {p.name.split("-")[-1][:-4]: p for p in build_archives(req)}


TOY_FWD = ("BLOCK16_warps1", "BLOCK32_warps2")  # the toy family's forward configs on sm_90


def toy_tuning_db(seed: int = 7):
    """A tuning database for the toy family on sm_90: about two thirds of every bucketed key
    (op, causal, gqa class, Sq and Sk bucket, streams class) get an entry, forward entries
    alternating between the two forward configs; the other keys are left to the defaults."""
    from attnpack.tune.buckets import GQA_BOUNDS, SEQLEN_BOUNDS, STREAM_BOUNDS
    from attnpack.tune.db import TuningDb
    rng = random.Random(seed)
    db = TuningDb("sm_90", {"gpu": "none (test fixture)", "status": "untuned"})
    fwd_count = 0
    for op in ("fwd", "bwd"):
        for causal in (False, True):
            for gqa in GQA_BOUNDS:
                for sq in SEQLEN_BOUNDS:
                    for sk in SEQLEN_BOUNDS:
                        for streams in STREAM_BOUNDS:
                            if rng.random() < 1 / 3:
                                continue
                            config = TOY_FWD[fwd_count % 2] if op == "fwd" else "BLOCK16_warps1"
                            fwd_count += op == "fwd"
                            tag = FunctionalKey("fp16", 32, causal).tag
                            db.put({"op": op, "dtype": "fp16", "head_dim": 32, "causal": causal,
                                    "gqa": gqa, "sq": sq, "sk": sk, "streams": streams,
                                    "family": "toy", "kernel": f"toy/{op}/{tag}/{config}",
                                    "time_us": 1.0 + sq / 1000})
    return db


def build_toy_tuned(root: Path) -> tuple[Path, Path]:
    """(sm_90 toy archive built with toy_tuning_db, the database's text file): the database
    goes text -> builder -> the archive's msgpack index, as `attnpack build` does it."""
    from attnpack.builder import BuildRequest, build_archives
    from attnpack.tune.db import save_db
    (root / "tuning_db").mkdir(parents=True, exist_ok=True)
    db_path = root / "tuning_db" / "sm_90.jsonl"
    save_db(toy_tuning_db(), db_path)
    req = BuildRequest(archs=("sm_90",), out_dir=root / "toy_tuned", kernels_root=FIXTURE_KERNELS,
                       cache_dir=root / "cache", jobs=2, tuning_db_dir=root / "tuning_db")
    return build_archives(req)[0], db_path


def build_triton_fwd(root: Path) -> Path:
    """The Triton family's forward, fp16, head dim 64, causal and full, for sm_90."""
    from attnpack.builder import BuildRequest, build_archives
    req = BuildRequest(archs=("sm_90",), out_dir=root / "triton", cache_dir=root / "cache", jobs=2,
                       families=("triton",), ops=("fwd",), dtypes=("fp16",), head_dims=(64,))
    return build_archives(req)[0]


def build_fuzz_target(root: Path) -> Path:
    """The shipped sm_90 bundle cut to bf16 head dim 128: tuned entries, Gluon kernels with
    tensor maps and persistent grids, triton forwards and backwards with workspaces. The
    user's compile cache is used, which the setup's default bundle build has filled."""
    from attnpack.builder import BuildRequest, build_archives
    from attnpack.builder.build import default_cache_dir
    req = BuildRequest(archs=("sm_90",), out_dir=root / "fuzz", cache_dir=default_cache_dir(),
                       jobs=2, dtypes=("bf16",), head_dims=(128,))
    return build_archives(req)[0]


def build_aiter_fuzz_target(root: Path) -> Path:
    """The aiter_asm family's gfx950 forwards with a database seeded for them: kernels with
    `requires`, `padding`, a family `notice` and the parametric words const:<literal> and
    <word>*<n>, prebuilt (nothing compiles; the wheel comes from the attnpack cache)."""
    from attnpack.builder import BuildRequest, build_archives
    from attnpack.builder.build import default_cache_dir
    from attnpack.family import load_families
    from attnpack.tune.db import save_db, seed_untuned
    from attnpack.tune.runner import standard_keys
    folder = root / "aiter_tuning_db"
    folder.mkdir(parents=True, exist_ok=True)
    families = {"aiter_asm": load_families()["aiter_asm"]}
    # (300, 1000): the shape fuzz_archive.cpp's exercise() launches, so mutants launch too
    keys = standard_keys(ops=("fwd",), dtypes=("bf16",), head_dims=(128,),
                         pairs=((300, 1000), (1024, 1024)))
    save_db(seed_untuned("gfx950", keys, families), folder / "gfx950.jsonl")
    req = BuildRequest(archs=("gfx950",), out_dir=root / "aiter", cache_dir=default_cache_dir(),
                       jobs=1, families=("aiter_asm",), ops=("fwd",), tuning_db_dir=folder)
    return build_archives(req)[0]


def prebuild(root: str) -> None:
    """Compiles every archive the tests need into `root`, for $ATTNPACK_TEST_ARCHIVE_DIR."""
    build_toy(Path(root))
    build_toy_tuned(Path(root))
    build_triton_fwd(Path(root))
    build_fuzz_target(Path(root))
    build_aiter_fuzz_target(Path(root))


def _prebuilt(sub: str) -> list[Path]:
    ready = os.environ.get("ATTNPACK_TEST_ARCHIVE_DIR")
    return sorted((Path(ready) / sub).glob("*.apk")) if ready else []


@pytest.fixture(scope="session")
def toy_archives(tmp_path_factory) -> dict[str, Path]:
    """arch -> toy archive (compiled), for sm_90 and gfx950."""
    ready = _prebuilt("toy")
    if ready:
        return {p.name.split("-")[-1][:-4]: p for p in ready}
    return build_toy(tmp_path_factory.mktemp("runtime_toy"))


@pytest.fixture(scope="session")
def toy_tuned_archive(tmp_path_factory) -> tuple[Path, Path]:
    """(sm_90 toy archive with a many-entry tuning database, that database's text file)."""
    ready = _prebuilt("toy_tuned")
    if ready:
        return ready[0], Path(os.environ["ATTNPACK_TEST_ARCHIVE_DIR"]) / "tuning_db" / "sm_90.jsonl"
    return build_toy_tuned(tmp_path_factory.mktemp("runtime_toy_tuned"))


@pytest.fixture(scope="session")
def triton_fwd_archive(tmp_path_factory) -> Path:
    """The Triton family's forward, fp16, head dim 64, causal and full, compiled for sm_90."""
    ready = _prebuilt("triton")
    return ready[0] if ready else build_triton_fwd(tmp_path_factory.mktemp("runtime_triton"))


@pytest.fixture(scope="session")
def fuzz_target_archive(tmp_path_factory) -> Path:
    """The sm_90 bf16 d128 slice of the shipped bundle (build_fuzz_target)."""
    ready = _prebuilt("fuzz")
    return ready[0] if ready else build_fuzz_target(tmp_path_factory.mktemp("runtime_fuzz"))


@pytest.fixture(scope="session")
def aiter_fuzz_target_archive(tmp_path_factory) -> Path:
    """The aiter_asm family's gfx950 forwards, tuned in (build_aiter_fuzz_target)."""
    ready = _prebuilt("aiter")
    return ready[0] if ready else build_aiter_fuzz_target(tmp_path_factory.mktemp("runtime_aiter"))


@pytest.fixture(scope="session")
def synthetic_archive(tmp_path_factory) -> Path:
    """fwd+bwd, fp16+bf16, head dims 64 and 128, causal and full, for sm_90."""
    return write_synthetic(tmp_path_factory.mktemp("runtime_synth") / "attnpack-0.1.0-sm_90.apk",
                           attention_kernels())


def run_threads(worker, count: int) -> None:
    """Runs worker(0) .. worker(count - 1) on their own threads and waits for all of them."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
