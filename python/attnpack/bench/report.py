"""From a recorded `attnpack bench` run to numbers people read: derived rates and ratios, the
summary, terminal tables, CSV, markdown (docs/performance.md) and, with plots.py, PNG plots.
No torch and no GPU: everything is recomputed from the recorded times and shapes.

Conventions:
- TFLOP/s from the shared FLOP count (attnpack.tune.runner.flops: 4·B·Hq·D per visible
  (query, key) pair, causal top-left; backward 2.5x forward; fwdbwd is one of each);
- "x default" = default's time / attnpack's time, "x best native" = the fastest of PyTorch's
  backends that ran (default, flash, efficient) / attnpack's: above 1 attnpack is faster;
- geomeans over the rows that have the ratio; worst rows first everywhere rows are listed;
- "the backward alone" is derived, a shape's fwdbwd time less its fwd time per backend
  (backward_rows), never timed on its own.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from attnpack.bench.served import family_text, kernel_op, served_text
from attnpack.bench.shapes import REQUIRED, Shape, shape_flops

BACKENDS = ("attnpack", "default", "flash", "efficient")
NATIVE = ("default", "flash", "efficient")
STREAM_BACKENDS = ("attnpack", "default", "flash")


class ResultsError(ValueError):
    """A results file this code cannot read; the message names the file and the key."""


def geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    if any(v <= 0 for v in values):
        raise ValueError(f"geomean of non-positive values {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def percentile(values, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default): index p/100·(n-1)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _shape(row: dict) -> Shape:
    return Shape(**{k: row["shape"][k] for k in REQUIRED}, name=row.get("name", ""))


def derive_row(row: dict, matmul_tflops: float | None) -> dict:
    """One recorded row with its FLOPs, TFLOP/s per backend, ratios and serving kernel."""
    shape = _shape(row)
    flop = shape_flops(shape, row["op"])
    measured = row.get("backends", {})
    ms = {b: measured[b]["ms"] for b in BACKENDS if measured.get(b, {}).get("ms")}
    errors = {b: measured[b]["error"] for b in BACKENDS if measured.get(b, {}).get("error")}
    tflops = {b: flop / t / 1e9 for b, t in ms.items()}
    natives = {b: t for b, t in ms.items() if b in NATIVE}
    best = min(natives, key=natives.get) if natives else None
    mine = ms.get("attnpack")
    return {
        "set": row["set"], "name": row["name"], "op": row["op"], "dtype": shape.dtype,
        "shape": shape.as_dict(), "flop": flop, "ms": ms, "tflops": tflops, "errors": errors,
        "default_backend": measured.get("default", {}).get("backend"),
        "best_native": best,
        "vs_default": ms["default"] / mine if mine and "default" in ms else None,
        "vs_best": natives[best] / mine if mine and best else None,
        "matmul_fraction": tflops["attnpack"] / matmul_tflops
        if mine and matmul_tflops else None,
        "served": row.get("served"), "served_text": served_text(row.get("served")),
        "family": family_text(row.get("served")),
    }


def _sort_key(d: dict):
    """Worst first: a row attnpack could not run at all, then by x default (x best native
    where the default did not run), lowest first; ties keep file order."""
    ratio = d["vs_default"] if d["vs_default"] is not None else d["vs_best"]
    return (-math.inf if ratio is None else ratio)


def worst_first(derived: list[dict]) -> list[dict]:
    return sorted(derived, key=_sort_key)


def check_results(results: dict, source: str = "results") -> None:
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
        raise ResultsError(f"{source}: no \"rows\" list; is this the results.json of "
                           "`attnpack bench`?")
    if results.get("schema", 1) != 1:
        raise ResultsError(f"{source}: results schema {results.get('schema')}; this attnpack "
                           "reads schema 1")
    for i, row in enumerate(results["rows"]):
        for key in ("set", "name", "op", "shape", "backends"):
            if key not in row:
                raise ResultsError(f"{source}: rows[{i}] lacks {key!r}")
        missing = [k for k in REQUIRED if k not in row["shape"]]
        if missing:
            raise ResultsError(f"{source}: rows[{i}].shape lacks {', '.join(missing)}")


def load_results(path: Path) -> dict:
    path = Path(path)
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not JSON ({e})") from None
    check_results(results, str(path))
    return results


def analyze(results: dict) -> dict:
    """{"rows": derived rows in recorded order, "summary": one entry per (set, op) in order of
    first appearance, "dynamic": dynamic_summary or None}."""
    check_results(results)
    matmul = (results.get("matmul") or {}).get("tflops")
    derived = [derive_row(r, matmul) for r in results["rows"]]
    groups: dict[tuple[str, str], list[dict]] = {}
    for d in derived:
        groups.setdefault((d["set"], d["op"]), []).append(d)
    summary = []
    for (set_name, op), rows in groups.items():
        vs_default = [d["vs_default"] for d in rows if d["vs_default"] is not None]
        vs_best = [d["vs_best"] for d in rows if d["vs_best"] is not None]
        worst = worst_first(rows)[0]
        statuses = {}
        for d in rows:
            status = (d["served"] or {}).get("status", "not measured")
            statuses[status] = statuses.get(status, 0) + 1
        families = {}
        for d in rows:
            if (d["served"] or {}).get("status") == "served":
                families[d["family"]] = families.get(d["family"], 0) + 1
        summary.append({
            "set": set_name, "op": op, "rows": len(rows),
            "geomean_vs_default": geomean(vs_default), "geomean_vs_best": geomean(vs_best),
            "min_vs_default": min(vs_default, default=None),
            "max_vs_default": max(vs_default, default=None),
            "below_default": sum(1 for r in vs_default if r < 1.0),
            "worst": worst["name"], "statuses": statuses, "families": families,
            "geomean_matmul_fraction": geomean(d["matmul_fraction"] for d in rows),
        })
    return {"rows": derived, "summary": summary,
            "dynamic": dynamic_summary(results["dynamic"]) if results.get("dynamic") else None}


def backward_rows(derived: list[dict]) -> list[dict]:
    """The backward alone, derived: for each fwdbwd row with a fwd row of the same set, name,
    dtype and shape, each backend's forward + backward time less its forward time (backends
    whose difference is not positive are left out), the default's over attnpack's
    ("vs_default"), and the backward kernels that served the fwdbwd row. The two rows are
    timed apart, so a difference carries the noise of both."""
    forwards = {(d["set"], d["name"], d["dtype"]): d for d in derived if d["op"] == "fwd"}
    rows = []
    for d in derived:
        f = forwards.get((d["set"], d["name"], d["dtype"]))
        if d["op"] != "fwdbwd" or f is None or f["shape"] != d["shape"]:
            continue
        ms = {b: d["ms"][b] - f["ms"][b] for b in BACKENDS
              if b in d["ms"] and b in f["ms"] and d["ms"][b] > f["ms"][b]}
        mine = ms.get("attnpack")
        served = d["served"] or {}
        kernels = [k for k in served.get("kernels", {}) if kernel_op(k) == "bwd"]
        rows.append({"set": d["set"], "name": d["name"], "dtype": d["dtype"], "ms": ms,
                     "default_backend": d["default_backend"],
                     "vs_default": ms["default"] / mine if mine and "default" in ms else None,
                     "served_text": " + ".join(kernels) if served.get("status") == "served"
                     else d["served_text"]})
    return rows


def dynamic_summary(dynamic: dict) -> dict:
    """Per backend: the stream's total, p50, p99 and max latency; first/second call at new
    lengths (median, max); cold-start times, as recorded."""
    stream = {}
    for name, rec in dynamic.get("stream", {}).get("backends", {}).items():
        lat = rec["latency_ms"]
        stream[name] = {"requests": len(lat), "total_ms": sum(lat), "p50_ms": percentile(lat, 50),
                        "p99_ms": percentile(lat, 99), "max_ms": max(lat),
                        "kernels": rec.get("kernels", {}), "fallbacks": rec.get("fallbacks", {})}
    new = {}
    for name, rec in dynamic.get("new_lengths", {}).items():
        new[name] = {"lengths": len(rec["first_ms"]),
                     "first_median_ms": percentile(rec["first_ms"], 50),
                     "first_max_ms": max(rec["first_ms"]),
                     "second_median_ms": percentile(rec["second_ms"], 50),
                     "kernels": rec.get("kernels", {}), "fallbacks": rec.get("fallbacks", {})}
    return {"shape": dynamic.get("shape"), "stream": stream, "new_lengths": new,
            "cold_start": dynamic.get("cold_start", {}),
            "seed": dynamic.get("stream", {}).get("seed"),
            "range": (dynamic.get("stream", {}).get("low"), dynamic.get("stream", {}).get("high"))}


# ------------------------------------------------------------------------ formatting
def fmt_tflops(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def fmt_geomean(x: float | None) -> str:
    """A set's geomean to 0.001: at two decimals 1.0495x read as 1.05x, a target it missed."""
    return "-" if x is None else f"{x:.3f}x"


def fmt_ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _backend_cell(d: dict, b: str) -> str:
    if b in d["tflops"]:
        return fmt_tflops(d["tflops"][b])
    return "refused" if b in d["errors"] else "-"


def _kernels_text(kernels: dict) -> str:
    return " + ".join(kernels) or "-"


def environment_line(env: dict) -> str:
    cudnn = env.get("cudnn")
    parts = [env.get("gpu", "?"), f"driver {env.get('driver', '?')}", f"torch {env.get('torch', '?')}"]
    if env.get("cuda"):
        parts.append(f"CUDA {env['cuda']}")
    if env.get("hip"):
        parts.append(f"HIP {env['hip']}")
    if cudnn:
        parts.append(f"cuDNN {cudnn}")
    parts += [f"triton {env.get('triton', '?')}",
              f"attnpack {env.get('attnpack', '?')}" + (f" ({env['commit']})" if env.get("commit") else ""),
              env.get("date", "?")]
    return ", ".join(parts)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_table(analysis: dict) -> str:
    rows = []
    for s in analysis["summary"]:
        statuses = ", ".join(f"{n} {k}" for k, n in s["statuses"].items())
        families = ", ".join(f"{k} {n}" for k, n in sorted(s["families"].items())) or "-"
        rows.append([s["set"], s["op"], str(s["rows"]), fmt_geomean(s["geomean_vs_default"]),
                     fmt_geomean(s["geomean_vs_best"]), fmt_ratio(s["min_vs_default"]),
                     fmt_ratio(s["max_vs_default"]), str(s["below_default"]),
                     _pct(s["geomean_matmul_fraction"]), statuses, families])
    return _table(["set", "op", "rows", "x default (geomean)", "x best native (geomean)",
                   "min", "max", "rows < 1x", "of matmul", "attnpack calls", "families"], rows)


def rows_table(rows: list[dict]) -> str:
    body = []
    for d in rows:
        default = _backend_cell(d, "default")
        if d["default_backend"] and "default" in d["tflops"]:
            default += f" ({d['default_backend']})"
        body.append([d["name"] + ("" if d["dtype"] == "bf16" else f" {d['dtype']}"),
                     _backend_cell(d, "attnpack"), default, _backend_cell(d, "flash"),
                     _backend_cell(d, "efficient"), _pct(d["matmul_fraction"]),
                     fmt_ratio(d["vs_default"]), fmt_ratio(d["vs_best"]) +
                     (f" ({d['best_native']})" if d["best_native"] else ""), d["served_text"]])
    return _table(["row", "attnpack TFLOP/s", "default", "flash", "efficient", "of matmul",
                   "x default", "x best native", "served by"], body)


def backward_tables(derived: list[dict]) -> list[tuple[str, str]]:
    """(set, table) per set with backward_rows: a line of geomean, min and rows below 1x, then
    the rows worst first."""
    tables = []
    rows = backward_rows(derived)
    for set_name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == set_name]
        ratios = [r["vs_default"] for r in mine if r["vs_default"] is not None]
        line = (f"{len(mine)} rows: x default geomean {fmt_geomean(geomean(ratios))}, "
                f"min {fmt_ratio(min(ratios, default=None))}, "
                f"{sum(1 for r in ratios if r < 1.0)} below 1x.")
        body = []
        for r in sorted(mine, key=lambda r: -math.inf if r["vs_default"] is None
                        else r["vs_default"]):
            default = fmt_ms(r["ms"].get("default"))
            if r["default_backend"] and "default" in r["ms"]:
                default += f" ({r['default_backend']})"
            body.append([r["name"] + ("" if r["dtype"] == "bf16" else f" {r['dtype']}"),
                         fmt_ms(r["ms"].get("attnpack")), default, fmt_ms(r["ms"].get("flash")),
                         fmt_ratio(r["vs_default"]), r["served_text"]])
        tables.append((set_name, line + "\n\n" + _table(
            ["row", "attnpack ms", "default ms", "flash ms", "x default", "backward served by"],
            body)))
    return tables


def _halves(timing: dict | None) -> list[float] | None:
    """The medians of a backend's first and second half of calls: `half_ms`, or in runs from
    before call-by-call turns (run105) the two rounds' `round_ms`."""
    timing = timing or {}
    halves = timing.get("half_ms") or timing.get("round_ms")
    return halves if halves and len(halves) == 2 else None


def halves_table(results: dict) -> str:
    """Per set and op, over the rows that kept them (_halves): x default (its time over
    attnpack's) from each half of the calls alone, and each backend's second half over its
    first. A ratio that differs by half says the clocks moved the two sides apart within a row;
    with two rounds of turns (run105) each half is a round, attnpack first in one and last in
    the other. "" when no row has them."""
    groups: dict[tuple, list[dict]] = {}
    for row in results.get("rows", []):
        b = row.get("backends", {})
        if all(_halves(b.get(n)) for n in ("attnpack", "default")):
            groups.setdefault((row["set"], row["op"]), []).append(
                {n: _halves(b[n]) for n in ("attnpack", "default")})
    body = []
    for (set_name, op), rows in groups.items():
        per_half = [geomean(h["default"][i] / h["attnpack"][i] for h in rows) for i in (0, 1)]
        drift = [geomean(h[n][1] / h[n][0] for h in rows) for n in ("attnpack", "default")]
        body.append([set_name, op, str(len(rows))] + [fmt_ratio(x) for x in per_half]
                    + [f"{x:.3f}" for x in drift])
    return _table(["set", "op", "rows", "x default, first half alone",
                   "x default, second half alone", "attnpack second half / first",
                   "default second half / first"], body) if body else ""


def _turns_text(settings: dict) -> str:
    """How the backends took turns, for "How it is measured"."""
    if settings.get("turn_calls"):
        n = settings["turn_calls"]
        order = ", ".join(settings.get("backends") or ("attnpack", "default", "flash", "efficient"))
        lead = settings.get("lead_cycles") or 0
        return ((" The backends take turns call by call" if n == 1 else
                 f" The backends take turns of {n} calls")
                + f" in alternating order ({order}, then back), one op after the other, so the "
                "clocks the GPU runs at reach every backend alike; each backend's warm-up calls "
                "come before the turns."
                + (f" Each timed call waits behind a GPU spin of {lead:,} cycles after its flush, "
                   "so the host's switch between backends stays out of the timing." if lead else ""))
    if (settings.get("rounds") or 1) > 1:
        return (f" The backends take turns in {settings['rounds']} rounds, in alternating order "
                f"(attnpack first, then last{', and so on' if settings['rounds'] > 2 else ''}), "
                "each with its warm-up calls and its share of the timed ones.")
    return ""


def refusal_table(rows: list[dict]) -> str:
    """Each backend's distinct reasons for refusing shapes, with how many rows each."""
    counts: dict[tuple[str, str], int] = {}
    for d in rows:
        for b, reason in d["errors"].items():
            counts[(b, reason)] = counts.get((b, reason), 0) + 1
    if not counts:
        return ""
    body = [[b, reason, str(n)] for (b, reason), n in sorted(counts.items())]
    return _table(["backend", "reason (PyTorch's words)", "rows"], body)


def dynamic_tables(dyn: dict) -> str:
    out = []
    shape = dyn.get("shape") or {}
    stream = dyn["stream"]
    if stream:
        n = max(s["requests"] for s in stream.values())
        low, high = dyn["range"]
        out.append(f"### A stream of {n} causal prefill requests\n\n"
                   f"{shape.get('name') or ''} attention (B={shape.get('batch')}, "
                   f"Hq={shape.get('heads_q')}, Hkv={shape.get('heads_kv')}, "
                   f"D={shape.get('head_dim')}, {shape.get('dtype')}), lengths drawn uniformly "
                   f"from {low}..{high} (seed {dyn['seed']}), run back to back; a request's "
                   "latency is its wall time to completion.\n")
        rows = []
        for name in [b for b in STREAM_BACKENDS if b in stream] + \
                [b for b in stream if b not in STREAM_BACKENDS]:
            s = stream[name]
            note = _kernels_text(s["kernels"]) if name == "attnpack" else ""
            if s["fallbacks"]:
                note += " ; fallbacks: " + ", ".join(f"{r} ({c})" for r, c in s["fallbacks"].items())
            rows.append([name, fmt_ms(s["total_ms"]), fmt_ms(s["p50_ms"]),
                         fmt_ms(s["p99_ms"]), fmt_ms(s["max_ms"]), note or "-"])
        out.append(_table(["backend", "total ms", "p50 ms", "p99 ms", "max ms", "served by"], rows))
    if dyn["new_lengths"]:
        out.append("\n### First call at a never-seen length\n\nAfter one warm-up call; each "
                   "backend gets lengths none has seen.\n")
        rows = [[name, str(s["lengths"]), fmt_ms(s["first_median_ms"]), fmt_ms(s["first_max_ms"]),
                 fmt_ms(s["second_median_ms"])] for name, s in dyn["new_lengths"].items()]
        out.append(_table(["backend", "lengths", "first call median ms", "first call max ms",
                           "second call median ms"], rows))
    cold = dyn.get("cold_start") or {}
    if cold:
        out.append("\n### Cold start: the first call in a fresh process\n")
        rows = []
        labels = {"attnpack": "attnpack (archive open, image inflate + load, launch)",
                  "default": "PyTorch default", "flash": "PyTorch flash",
                  "triton_compile": "Triton compile of the same kernel (empty cache)",
                  "triton_jit": "Triton JIT first launch of the same kernel (empty cache)"}
        for name, rec in cold.items():
            label = labels.get(name, name)
            if rec.get("error"):
                rows.append([label, "-", f"not measured: {rec['error'].splitlines()[-1][:200]}"])
                continue
            ms = rec.get("first_call_ms", rec.get("compile_ms"))
            note = []
            if "enable_ms" in rec:
                note.append(f"enable() {fmt_ms(rec['enable_ms'])} ms before it")
            if rec.get("kernels"):
                note.append(_kernels_text(rec["kernels"]))
            if rec.get("kernel"):
                note.append(rec["kernel"])
            if "driver_init_ms" in rec:
                note.append(f"Triton driver setup {fmt_ms(rec['driver_init_ms'])} ms before it")
            if "second_call_ms" in rec:
                note.append(f"second call {fmt_ms(rec['second_call_ms'])} ms")
            rows.append([label, fmt_ms(ms), "; ".join(note) or "-"])
        out.append(_table(["what", "ms", "notes"], rows))
    return "\n".join(out)


def render_text(results: dict) -> str:
    """The terminal report: environment, summary, each (set, op) worst first, dynamic."""
    analysis = analyze(results)
    parts = [f"# {environment_line(results.get('environment', {}))}"]
    matmul = results.get("matmul") or {}
    if matmul.get("tflops"):
        parts.append(f"# dense bf16 matmul {matmul.get('n', 8192)}^3: {matmul['tflops']:.0f} TFLOP/s")
    parts += ["", summary_table(analysis)]
    for s in analysis["summary"]:
        rows = [d for d in analysis["rows"] if (d["set"], d["op"]) == (s["set"], s["op"])]
        parts += ["", f"## {s['set']} {s['op']} (worst first)", rows_table(worst_first(rows))]
    for set_name, table in backward_tables(analysis["rows"]):
        parts += ["", f"## {set_name} backward alone (fwdbwd less fwd, worst first)", table]
    by_half = halves_table(results)
    if by_half:
        parts += ["", "## the halves apart", by_half]
    if analysis["dynamic"]:
        parts += ["", "## dynamic lengths", dynamic_tables(analysis["dynamic"])]
    return "\n".join(parts) + "\n"


def _own_entries_clause(env: dict) -> str:
    """The first line's clause on the entries the archive has of the bench GPU's own model (the
    bench's `gpu_entries`, from its `tuning.by_gpu`), "" where it has none."""
    n = (env.get("gpu_entries") or {}).get(env.get("gpu"), 0)
    return (f", and {n} entr{'y' if n == 1 else 'ies'} tuned on this GPU model serve"
            f"{'s' if n == 1 else ''} first" if n else "")


def render_markdown(results: dict, plots: dict[str, str] | None = None,
                    results_name: str = "results.json") -> str:
    """The report that becomes docs/performance.md; `plots` maps plot kinds
    ("speedup_fwd", "tflops_fwd", ..., "dynamic_stream") to file names beside it."""
    plots = plots or {}
    analysis = analyze(results)
    env = results.get("environment", {})
    settings = results.get("settings", {})
    matmul = results.get("matmul") or {}
    bundle = env.get("bundle") or {}
    # bundle_info()'s {"bundle": {path, tuned_on, ...}, ...}, or the archive's map itself
    archive_info = bundle["bundle"] if isinstance(bundle.get("bundle"), dict) else bundle
    bundle_path, tuned_on = archive_info.get("path"), archive_info.get("tuned_on")
    out = ["# Performance: attnpack against PyTorch's own SDPA backends", "",
           f"Measured by `attnpack bench` on {environment_line(env)}."
           + (f" Archive: `{Path(bundle_path).name}`." if bundle_path else "")
           + (f" Its tuning database was measured on {tuned_on}"
              + (f", not on this GPU" if tuned_on != env.get("gpu") else "")
              + _own_entries_clause(env) + "." if tuned_on else ""),
           f"The recorded run is [`{results_name}`]({results_name}) (and its `.csv`); "
           "`attnpack bench --report-only` on it regenerates this page.", "",
           "## How it is measured",
           "- Every row runs through plain `torch.nn.functional.scaled_dot_product_attention`, "
           "on the same tensors, in one process: **attnpack** (`attnpack.torch.enable()`), "
           "PyTorch's **default** choice (attnpack disabled; the backend it picked is named), "
           "and **flash** (FA2) and **efficient** forced with `sdpa_kernel`. Grouped-query "
           "heads go as they are (`enable_gqa`). A backend that refuses a shape says "
           "\"refused\".",
           f"- Steady state: {settings.get('warmup', '?')} warm-up calls, then the median of "
           f"{settings.get('reps', '?')} calls, each timed with CUDA events after writing "
           f"{(settings.get('flush_bytes') or 0) >> 20} MiB to flush the L2 cache."
           + _turns_text(settings)
           + (" The first row is run once, untimed, before the rows." if settings.get("settle")
              else ""),
           "- TFLOP/s: forward 4·B·Hq·D per visible (query, key) pair, so 4·B·Hq·Sq·Sk·D without "
           "a mask and about half with a causal (top-left) one; backward 2.5x the forward; "
           "fwdbwd one of each.",
           "- \"of matmul\": attnpack's rate against the dense bf16 matmul rate measured in the "
           "same run"
           + (f" ({matmul['tflops']:.0f} TFLOP/s at {matmul.get('n', 8192)}^3"
              + (f", {matmul['tflops_end']:.0f} at the end" if matmul.get("tflops_end") else "")
              + ")" if matmul.get("tflops") else "") + ".",
           "- \"x default\" is the default's time over attnpack's, \"x best native\" the "
           "fastest PyTorch backend's time over attnpack's: above 1 attnpack is faster.",
           "- \"served by\" is what `attnpack.torch.stats()` counted during the row: the kernels, "
           "or the fallback and its reason, or \"not reached\" when F.sdpa never asked "
           "attnpack (it chose cuDNN or math).", "",
           "## Summary", "", summary_table(analysis), ""]
    for kind in ("speedup", "tflops"):
        for op in settings.get("ops", []) or sorted({d["op"] for d in analysis["rows"]}):
            if f"{kind}_{op}" in plots:
                what = "attnpack / default" if kind == "speedup" else "TFLOP/s per backend"
                out += [f"![{what}, {op}]({plots[f'{kind}_{op}']})", ""]
    for s in analysis["summary"]:
        rows = [d for d in analysis["rows"] if (d["set"], d["op"]) == (s["set"], s["op"])]
        out += [f"## {s['set']}: {s['op']} (worst first)", "", rows_table(worst_first(rows)), ""]
    for set_name, table in backward_tables(analysis["rows"]):
        out += [f"## {set_name}: the backward alone (worst first)", "",
                "Derived, not timed on its own: each backend's forward + backward time less its "
                "forward time, from this set's two rows of the same shape (timed apart, so "
                "each difference carries the noise of both). \"x default\" is the default's "
                "backward over attnpack's.", "", table, ""]
    by_half = halves_table(results)
    if by_half:
        out += ["## The halves apart", "", "Each row's calls per backend, split into the first "
                "and the second half as they ran (the medians of each; geomean over the rows). "
                "A ratio that differs between the halves says the clocks moved it within the "
                "rows.", "", by_half, ""]
    refusals = refusal_table(analysis["rows"])
    if refusals:
        out += ["## Shapes a backend refused", "", refusals, ""]
    if analysis["dynamic"]:
        out += ["## Dynamic lengths", "", dynamic_tables(analysis["dynamic"]), ""]
        if "dynamic_stream" in plots:
            out += [f"![latency over the request stream]({plots['dynamic_stream']})", ""]
    return "\n".join(out)


CSV_FIELDS = (["set", "name", "op", "dtype"] + [k for k in REQUIRED if k != "dtype"] + ["flop"]
              + [f"ms_{b}" for b in BACKENDS] + [f"tflops_{b}" for b in BACKENDS]
              + ["default_backend", "best_native", "vs_default", "vs_best", "matmul_fraction",
                 "status", "family", "kernels", "reason", "errors"])


def render_csv(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for d in analyze(results)["rows"]:
        served = d["served"] or {}
        line = {"set": d["set"], "name": d["name"], "op": d["op"], "dtype": d["dtype"],
                **{k: d["shape"][k] for k in REQUIRED if k != "dtype"}, "flop": f"{d['flop']:.0f}",
                "default_backend": d["default_backend"] or "", "best_native": d["best_native"] or "",
                "status": served.get("status", ""), "family": d["family"],
                "kernels": " ".join(served.get("kernels", {})), "reason": served.get("reason") or "",
                "errors": "; ".join(f"{b}: {e}" for b, e in d["errors"].items())}
        for b in BACKENDS:
            line[f"ms_{b}"] = f"{d['ms'][b]:.6g}" if b in d["ms"] else ""
            line[f"tflops_{b}"] = f"{d['tflops'][b]:.6g}" if b in d["tflops"] else ""
        for k in ("vs_default", "vs_best", "matmul_fraction"):
            line[k] = "" if d[k] is None else f"{d[k]:.6g}"
        writer.writerow(line)
    return buffer.getvalue()


# ------------------------------------------------------------------------ --compare
def _row_key(d: dict) -> tuple:
    return d["set"], d["name"], d["op"], d["dtype"]


def compare(old: dict, new: dict) -> dict:
    """Rows (by set, name, op, dtype) whose serving kernel changed between two runs, with the
    old and new speed; ratios against the default of the same run are what compare across
    machines and driver versions, TFLOP/s are shown beside them."""
    before = {_row_key(d): d for d in analyze(old)["rows"]}
    after = {_row_key(d): d for d in analyze(new)["rows"]}
    changed = []
    for key, d_new in after.items():
        d_old = before.get(key)
        if d_old is None or d_old["served_text"] == d_new["served_text"]:
            continue
        t_old, t_new = d_old["tflops"].get("attnpack"), d_new["tflops"].get("attnpack")
        changed.append({
            "set": key[0], "name": key[1], "op": key[2], "dtype": key[3],
            "old_served": d_old["served_text"], "new_served": d_new["served_text"],
            "old_tflops": t_old, "new_tflops": t_new,
            "speed_new_over_old": t_new / t_old if t_old and t_new else None,
            "old_vs_default": d_old["vs_default"], "new_vs_default": d_new["vs_default"]})
    # The worst change first: the biggest loss against the default of its own run.
    changed.sort(key=lambda c: (c["new_vs_default"] / c["old_vs_default"])
                 if c["new_vs_default"] and c["old_vs_default"] else -math.inf)
    return {"old": environment_line(old.get("environment", {})),
            "new": environment_line(new.get("environment", {})),
            "changed": changed, "rows_compared": len(set(before) & set(after)),
            "only_old": sorted(" ".join(k) for k in set(before) - set(after)),
            "only_new": sorted(" ".join(k) for k in set(after) - set(before))}


def render_compare(diff: dict) -> str:
    lines = [f"old: {diff['old']}", f"new: {diff['new']}",
             f"{len(diff['changed'])} of {diff['rows_compared']} rows changed their serving kernel"]
    if diff["changed"]:
        rows = [[f"{c['set']} {c['name']} {c['op']} {c['dtype']}", c["old_served"], c["new_served"],
                 fmt_tflops(c["old_tflops"]), fmt_tflops(c["new_tflops"]),
                 fmt_ratio(c["speed_new_over_old"]), fmt_ratio(c["old_vs_default"]),
                 fmt_ratio(c["new_vs_default"])] for c in diff["changed"]]
        lines += ["", _table(["row", "old kernel", "new kernel", "old TFLOP/s", "new TFLOP/s",
                              "new/old", "old x default", "new x default"], rows)]
    for side in ("only_old", "only_new"):
        if diff[side]:
            lines.append(f"{len(diff[side])} rows only in the {side[5:]} run: "
                         + ", ".join(diff[side][:10]) + (" ..." if len(diff[side]) > 10 else ""))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ files
def write_outputs(results: dict, out_dir: Path, plots: bool = True,
                  markdown: Path | None = None) -> dict[str, Path]:
    """results.json, results.csv, the PNG plots and the markdown report (`markdown`, default
    <out_dir>/report.md; its image links are relative to its own folder, so
    `--out docs/performance --markdown docs/performance.md` works). Plots need matplotlib;
    without it they are skipped and the returned dict says so under "plots_skipped"."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = Path(markdown) if markdown else out_dir / "report.md"
    written: dict = {}
    results_path = out_dir / "results.json"
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    written["results"] = results_path
    (out_dir / "results.csv").write_text(render_csv(results))
    written["csv"] = out_dir / "results.csv"
    plot_files: dict[str, str] = {}
    if plots:
        try:
            from attnpack.bench import plots as plotting
        except ImportError as e:
            written["plots_skipped"] = (f"{e}; install matplotlib (pip install matplotlib) and "
                                        f"rerun with --report-only {results_path}")
        else:
            for kind, path in plotting.write_plots(analyze(results), results, out_dir).items():
                plot_files[kind] = Path(os.path.relpath(path, markdown.parent)).as_posix()
                written[kind] = path
    markdown.parent.mkdir(parents=True, exist_ok=True)
    results_link = Path(os.path.relpath(results_path, markdown.parent)).as_posix()
    markdown.write_text(render_markdown(results, plot_files, results_link))
    written["markdown"] = markdown
    return written
