"""attnpack inspect: what an archive holds, per family / op / functional key."""
from __future__ import annotations

from collections import Counter

from attnpack.archive.elf import ElfError, kernel_facts
from attnpack.archive.format import tuning_tables
from attnpack.archive.reader import Archive
from attnpack.targets import TARGETS


def _static_lds(ar: Archive, image: int, symbol: str) -> int:
    """An AMD image's group segment (static LDS), allocated on top of the dynamic request; 0
    for CUDA images (their kernels here ask for dynamic shared memory only) or unreadable ones."""
    if ar.target.get("vendor") != "amd":
        return 0
    try:
        return kernel_facts(ar.image(image), symbol).resources.get("lds_bytes", 0)
    except (ElfError, ValueError):
        return 0


def summarize(ar: Archive) -> dict:
    images = ar.index["images"]
    row = TARGETS.get(ar.arch)
    tuning = ar.index.get("tuning", {})
    provenance = tuning.get("provenance") or {}
    tables = tuning_tables(tuning)
    tuned = Counter(e["kernel"] for _, entries in tables for e in entries)
    defaults = {sel["kernel"] for sel in ar.index["selection"]}
    rows = []
    for k in ar.kernels:
        image_ids = sorted({s["image"] for s in k["steps"]})
        rows.append({
            "name": k["name"], "family": k["family"], "op": k["op"], **k["key"],
            "config": k["config"], "deterministic": k["deterministic"],
            "steps": [s["name"] for s in k["steps"]],
            # dynamic shared memory plus, on AMD, the image's static LDS
            "shared": max(s["shared"] + _static_lds(ar, s["image"], s["symbol"])
                          for s in k["steps"]),
            "tuned_entries": tuned.get(k["name"], 0),
            "threads": max(s["block"][0] for s in k["steps"]),
            "raw_bytes": sum(images[i]["raw_size"] for i in image_ids),
            "compressed_bytes": sum(images[i]["size"] for i in image_ids),
        })
    raw = sum(i["raw_size"] for i in images)
    packed = sum(i["size"] for i in images)
    return {
        "file": ar.path.name, "file_bytes": ar.path.stat().st_size,
        "format": f"{ar.format_version[0]}.{ar.format_version[1]}", "arch": ar.arch,
        "target": {**ar.target, "gpus": row.gpus if row else "?",
                   "verified": row.verified if row else "unknown to this attnpack"},
        "bundle_version": ar.meta["bundle_version"], "compilers": ar.meta["compilers"],
        "kernels": rows, "images": len(images), "raw_image_bytes": raw,
        "compressed_image_bytes": packed, "compression_ratio": round(raw / packed, 2) if packed else 0,
        "dictionary_bytes": len(ar.dictionary),
        "index_bytes": ar.meta["index_size"], "raw_index_bytes": ar.meta["index_raw_size"],
        "selection": ar.index["selection"],
        "families": {name: {**fam, "default_keys": sum(r["name"] in defaults for r in rows
                                                        if r["family"] == name),
                            "tuned_entries": sum(r["tuned_entries"] for r in rows
                                                 if r["family"] == name)}
                     for name, fam in ar.index["families"].items()},
        "tuned_entries": sum(tuned.values()),
        "tuning": {"tuned_on": (None if provenance.get("status") == "untuned"
                                else provenance.get("gpu")),
                   "entries": len(tables[0][1]),
                   "by_gpu": {gpu: len(entries) for gpu, entries in tables[1:]}},
    }


def render(summary: dict) -> str:
    s = summary
    compilers = ", ".join(f"{k} {v}" for k, v in sorted(s["compilers"].items()))
    lines = [f"{s['file']}: format {s['format']}, bundle {s['bundle_version']}, arch {s['arch']}, "
             f"built with {compilers}",
             f"{len(s['kernels'])} kernels, {s['images']} images, "
             f"{s['raw_image_bytes'] / 1024:.0f} KiB raw -> {s['compressed_image_bytes'] / 1024:.0f} KiB "
             f"zstd ({s['compression_ratio']}x"
             + (f", with a {s['dictionary_bytes'] / 1024:.0f} KiB dictionary"
                if s["dictionary_bytes"] else "")
             + f"), index {s['raw_index_bytes'] / 1024:.0f} KiB -> {s['index_bytes'] / 1024:.0f} KiB, "
             f"file {s['file_bytes'] / 1024:.0f} KiB",
             f"target {s['arch']} ({s['target']['gpus']}, {s['target']['vendor']}): "
             f"{s['target']['verified']}",
             f"tuning: {s['tuning']['entries']} arch-wide entries"
             + (f" (tuned on {s['tuning']['tuned_on']})" if s["tuning"]["tuned_on"]
                else " (untuned)")
             + "".join(f"; {n} of {gpu}'s own, served first on that GPU"
                       for gpu, n in sorted(s["tuning"]["by_gpu"].items()))]
    for name, fam in sorted(s["families"].items()):
        prov = fam["provenance"]
        built = ", ".join(f"{c} {s['compilers'].get(c, '?')}" for c in fam.get("compilers", []))
        lines.append(f"family {name}: {fam['backend']} backend, default priority "
                     f"{fam['priority']}, {prov['license']} licence, {prov['origin']}"
                     + (f"; notice of {len(fam['notice'].splitlines())} lines "
                        "(attnpack inspect --notice)" if "notice" in fam else ""))
        lines.append(f"  {f'built with {built}; ' if built else ''}the default for "
                     f"{fam['default_keys']} functional key(s), selected by {fam['tuned_entries']} "
                     f"of {s['tuned_entries']} tuning entries; {s['target']['verified']}")
    lines.append("")
    selected = {sel["kernel"] for sel in s["selection"]}
    header = f"{'family':8} {'op':4} {'dtype':5} {'hd':>4} {'causal':6} {'steps':>5} " \
             f"{'smem':>7} {'KiB':>6} {'zKiB':>6} sel tuned det config"
    lines.append(header)
    for r in s["kernels"]:
        cfg = " ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"{r['family']:8} {r['op']:4} {r['dtype']:5} {r['head_dim']:>4} "
                     f"{str(r['causal']):6} {len(r['steps']):>5} {r['shared']:>7} "
                     f"{r['raw_bytes'] / 1024:>6.1f} {r['compressed_bytes'] / 1024:>6.1f} "
                     f"{'*' if r['name'] in selected else ' ':3} {r['tuned_entries']:>5} "
                     f"{'yes' if r['deterministic'] else 'no':3} {cfg}")
    return "\n".join(lines)
