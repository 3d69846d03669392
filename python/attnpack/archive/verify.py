"""attnpack verify: every check an archive must pass before it ships.

Structure and hashes (the reader), versions, index consistency, and for every image its ELF
machine and arch, entry symbol, parameter layout and resource use against the launch spec.
"""
from __future__ import annotations

from pathlib import Path

from attnpack import abi
from attnpack.archive.elf import ElfError, kernel_facts
from attnpack.archive.format import ArchiveError
from attnpack.archive.reader import Archive, read_archive

PARAM_SIZE = {t: size for t, (size, _align) in abi.WIRE_LAYOUT.items()}
# Per-arch resource ceilings: shared memory / LDS per block, registers, threads per block.
LIMITS = {
    "sm_90": {"shared": 232448, "registers": 255, "threads": 1024},
    "gfx942": {"shared": 65536, "vgpr": 512, "threads": 1024},
    "gfx950": {"shared": 163840, "vgpr": 512, "threads": 1024},
}
IMAGE_KIND = {"sm_90": "cubin", "gfx942": "hsaco", "gfx950": "hsaco"}


def _check_index(ar: Archive) -> list[str]:
    problems = []
    images = ar.index["images"]
    used = set()
    names = [k["name"] for k in ar.kernels]
    if len(set(names)) != len(names):
        problems.append("index: duplicate kernel names")
    if not ar.meta.get("compilers", {}).get("triton"):
        problems.append("meta: the triton compiler version is not recorded")
    for k in ar.kernels:
        where = f"kernel {k['name']}"
        key = k["key"]
        tag = f"{key['dtype']}-d{key['head_dim']}-{'causal' if key['causal'] else 'full'}"
        if not k["name"].startswith(f"{k['family']}/{k['op']}/{tag}/"):
            problems.append(f"{where}: name disagrees with its family/op/key ({tag})")
        if key["dtype"] not in abi.DTYPES:
            problems.append(f"{where}: dtype {key['dtype']!r} is not one of {abi.DTYPES}")
        ws = tuple(w["name"] for w in k["workspace"])
        for w in k["workspace"]:
            bad = [s for s in w["shape"] if s not in abi.WORKSPACE_SIZES]
            if bad:
                problems.append(f"{where}: workspace {w['name']} has unknown size words {bad}")
        if not k["steps"]:
            problems.append(f"{where}: no launch steps")
        for s in k["steps"]:
            here = f"{where} step {s['name']}"
            if not 0 <= s["image"] < len(images):
                problems.append(f"{here}: image {s['image']} is out of range")
                continue
            used.add(s["image"])
            if images[s["image"]]["symbol"] != s["symbol"]:
                problems.append(f"{here}: symbol {s['symbol']} differs from its image's "
                                f"{images[s['image']]['symbol']}")
            problems += [f"{here}: {p}" for p in _check_tensormaps(s)]
            for word, typ, _div in s["params"]:
                if typ == "tensormap":
                    continue  # checked with its expansion above
                try:
                    expect = abi.param_type(word, ws)
                except KeyError as e:
                    problems.append(f"{here}: {e.args[0]}")
                    continue
                if expect != typ:
                    problems.append(f"{here}: param {word} has type {typ}, vocabulary says {expect}")
            for dim in s["grid"]:
                for var, div in dim:
                    if var not in abi.GRID_VARS or div < 1:
                        problems.append(f"{here}: bad grid factor [{var}, {div}]")
    for i in range(len(images)):
        if i not in used:
            problems.append(f"index: image {i} ({images[i]['symbol']}) is used by no kernel")
    by_name = {k["name"]: k for k in ar.kernels}
    tables = [("selection", e, "") for e in ar.index["selection"]]
    tables += [("tuning", e, f" sq{e['sq']} sk{e['sk']}")
               for e in ar.index.get("tuning", {}).get("entries", [])]
    # Both tables map a key to a kernel, which must exist and serve exactly that key.
    for table, entry, buckets in tables:
        label = f"{table}: entry {entry['op']} {entry['dtype']} d{entry['head_dim']}{buckets}"
        k = by_name.get(entry["kernel"])
        if k is None:
            problems.append(f"{label} names missing kernel {entry['kernel']}")
        elif k["op"] != entry["op"] or any(k["key"][f] != entry[f]
                                           for f in ("dtype", "head_dim", "causal")):
            problems.append(f"{label} points at {entry['kernel']}, whose key differs")
    return problems


def _check_tensormaps(step: dict) -> list[str]:
    """Each descriptor parameter is declared in `tensormaps` and followed by Triton's expansion
    (the viewed tensor's shape and strides); each declaration is one the runtime can encode."""
    problems = []
    maps = {m["param"]: m for m in step.get("tensormaps", [])}
    words = [p[0] for p in step["params"]]
    types = [p[1] for p in step["params"]]
    for i, (word, typ) in enumerate(zip(words, types)):
        if typ != "tensormap":
            continue
        m = maps.get(word)
        if m is None:
            problems.append(f"tensormap param {word} has no tensormaps entry")
            continue
        if m["tensor"] not in abi.TENSORS:
            problems.append(f"tensor map {word} views {m['tensor']!r}, not an element tensor")
            continue
        want = abi.tensormap_params(word, m["tensor"])
        got = [tuple(p[:2]) for p in step["params"][i:i + len(want)]]
        if got != want:
            problems.append(f"tensor map {word} is followed by {got[1:]}, Triton passes {want[1:]}")
    for word, m in maps.items():
        if word not in words or types[words.index(word)] != "tensormap":
            problems.append(f"tensor map {word} is not a tensormap parameter")
        if len(m["box"]) != 4 or not all(1 <= e <= 256 for e in m["box"]):
            problems.append(f"tensor map {word} box {m['box']} is not 4 extents of 1..256")
        if m.get("swizzle", 0) not in abi.TENSORMAP_SWIZZLES or \
                m.get("l2_promotion", 0) not in abi.TENSORMAP_L2_PROMOTIONS or \
                m.get("oob_fill", "zero") not in abi.TENSORMAP_OOB_FILLS:
            problems.append(f"tensor map {word} has options the runtime cannot encode: {m}")
    return problems


def _check_image(ar: Archive, i: int, steps: list[dict], warnings: list[str]) -> list[str]:
    """Problems of one image (fatal); findings worth a look go to `warnings`."""
    rec = ar.index["images"][i]
    where = f"image {i} ({rec['symbol']})"
    try:
        raw = ar.image(i)
    except ArchiveError as e:
        return [f"{where}: {e.problem}"]
    if rec["kind"] != IMAGE_KIND[ar.arch]:
        return [f"{where}: is a {rec['kind']}, a {ar.arch} archive holds {IMAGE_KIND[ar.arch]}"]
    try:
        facts = kernel_facts(raw, rec["symbol"])
    except ElfError as e:
        return [f"{where}: {e}"]
    problems = []
    if facts.arch != ar.arch:
        problems.append(f"{where}: ELF is built for {facts.arch}, the archive targets {ar.arch}")
    if rec["symbol"] not in facts.symbols:
        problems.append(f"{where}: entry symbol missing from the ELF symbol table")
    limits = LIMITS[ar.arch]
    res = facts.resources
    if facts.machine == "cuda":
        # Spilled registers live in the per-thread stack frame (local memory): slower, still
        # correct, and the sm_90 kernels are proven on the GPU, so this is a warning.
        stack = max(res.get("stack_bytes", 0), res.get("local_bytes", 0))
        if stack:
            warnings.append(f"{where}: {stack}-byte stack frame (register spills to local memory)")
        if res.get("registers", 0) > limits["registers"]:
            problems.append(f"{where}: {res['registers']} registers > {limits['registers']}")
    else:
        # VGPR spills and scratch go to memory; AMD targets are never run here, so they fail.
        if res["vgpr_spills"] or res["scratch_bytes"]:
            problems.append(f"{where}: spills to memory ({res['vgpr_spills']} VGPR, "
                            f"{res['scratch_bytes']} scratch bytes)")
        # SGPR spills go to VGPR lanes (v_writelane), not memory: reported, not fatal.
        if res["sgpr_spills"]:
            warnings.append(f"{where}: {res['sgpr_spills']} SGPRs spilled to VGPR lanes "
                            f"({res['sgpr']} SGPRs in use)")
        if res["vgpr"] + res["agpr"] > limits["vgpr"]:
            problems.append(f"{where}: {res['vgpr']}+{res['agpr']} VGPR/AGPR > {limits['vgpr']}")
        if res["wavefront_size"] != 64:
            problems.append(f"{where}: wavefront size {res['wavefront_size']}, expected 64")
    for s in steps:
        sizes = [PARAM_SIZE[t] for _, t, _ in s["params"]]
        if [size for _, size in facts.params] != sizes:
            problems.append(f"{where}: ELF parameters {[sz for _, sz in facts.params]} bytes "
                            f"disagree with the launch spec's {sizes}")
        elif facts.machine == "cuda":
            if facts.param_base not in (None, abi.CUDA_PARAM_BASE):
                problems.append(f"{where}: parameters start at constant-bank offset "
                                f"{facts.param_base:#x}, the launch layout assumes "
                                f"{abi.CUDA_PARAM_BASE:#x}")
            # The offsets too: a descriptor's .align 64 is where a wrong layout model shows.
            offsets, _ = abi.kernarg_layout([t for _, t, _ in s["params"]], ar.arch)
            if [off for off, _ in facts.params] != offsets:
                problems.append(f"{where}: ELF parameter offsets {[o for o, _ in facts.params]} "
                                f"disagree with the launch layout's {offsets}")
        if facts.kernarg_size != s["kernarg_size"]:
            problems.append(f"{where}: ELF kernarg size {facts.kernarg_size} != launch spec "
                            f"{s['kernarg_size']}")
        if s["shared"] > limits["shared"]:
            problems.append(f"{where}: {s['shared']} bytes of shared memory > {limits['shared']}")
        if s["block"][0] > limits["threads"]:
            problems.append(f"{where}: {s['block'][0]} threads per block > {limits['threads']}")
    return problems


def verify_archive(path: Path | str) -> tuple[Archive | None, list[str], list[str]]:
    """Returns (archive, problems, warnings); no problems means the archive is sound."""
    name = Path(path).name
    try:
        ar = read_archive(path)
    except ArchiveError as e:
        return None, [str(e)], []
    problems, warnings = _check_index(ar), []
    steps_by_image: dict[int, list[dict]] = {}
    for k in ar.kernels:
        for s in k["steps"]:
            steps_by_image.setdefault(s["image"], []).append(s)
    for i in range(len(ar.index["images"])):
        problems += _check_image(ar, i, steps_by_image.get(i, []), warnings)
    return ar, [f"{name}: {p}" for p in problems], [f"{name}: {w}" for w in warnings]
