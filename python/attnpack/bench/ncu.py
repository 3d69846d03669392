"""Rows of an `attnpack bench` run profiled with Nsight Compute, side by side with PyTorch's.

`bench/ncu_rows.py` runs the rows a results.json has below some ratio under
`ncu --profile-from-start off`, one process per backend. Each row is one profiler range that
starts with a marker kernel (`torch.cuda._sleep`, which ncu names `spin_kernel`), so the
kernels of ncu's raw CSV (`--page raw --csv`) fall into rows at the markers, in the order the
rows ran. What needs no GPU is here: choosing the rows, reading the CSV, and the table that
docs/performance.md quotes ("Rows below 1x").

Metric names are matched by pattern and a metric ncu did not report reads "-": the sections a
run asks for decide which are there.
"""
from __future__ import annotations

import csv
import io
import math
import re

MARKER = "spin_kernel"
# ncu's units for durations, in microseconds (Nsight Compute 2025.3 writes "ns")
TIME_UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
DURATION = "gpu__time_duration.sum"
PATTERNS = {  # table column -> the raw metric it reads (first match; every match for SUMMED)
    "SM busy %": r"^sm__throughput\.avg\.pct_of_peak_sustained_elapsed$",
    "tensor pipe %": r"^sm__pipe_tensor_op_(gmma|hmma)_cycles_active\.avg\.pct_of_peak_sustained_"
                     r"(active|elapsed)$",
    "DRAM %": r"^gpu__dram_throughput\.avg\.pct_of_peak_sustained_elapsed$",
    "warp cycles per issue": r"^smsp__average_warp_latency_per_inst_issued\.ratio$",
    "registers": r"^launch__registers_per_thread$",
    "occupancy %": r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$",
    "local bytes": r"^l1tex__t_bytes_pipe_lsu_mem_local_op_(ld|st)\.sum$",
    # the MUFU pipe, where exp2 runs: is the softmax bound by its exponentials?
    "XU pipe %": r"^sm__inst_executed_pipe_xu\.avg\.pct_of_peak_sustained_active$",
    # with the MemoryWorkloadAnalysis section: does the kernel's traffic stay in L2 (the fp32 dQ
    # adds of the GQA-8 causal backward, docs/gluon-bwd.md), and how much reaches DRAM
    "L2 hit %": r"^lts__t_sector_hit_rate\.pct$",
    "DRAM bytes": r"^dram__bytes_(read|write)\.sum$",
}
SUMMED = {"local bytes", "DRAM bytes"}  # the columns whose metrics add up: loads and stores
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def select_rows(results: dict, sets=("model_shapes",), op: str = "fwd",
                below: float = 1.0) -> list[dict]:
    """The rows of `sets` and `op` where attnpack took longer than below x the default's time
    (default ms / attnpack ms < below), worst first: name, set, op, shape, ratio."""
    chosen = []
    for row in results["rows"]:
        times = row.get("backends", {})
        if row["set"] not in sets or row["op"] != op or "ms" not in times.get("attnpack", {}) \
                or "ms" not in times.get("default", {}):
            continue
        ratio = times["default"]["ms"] / times["attnpack"]["ms"]
        if ratio < below:
            chosen.append({"name": row["name"], "set": row["set"], "op": op,
                           "shape": row["shape"], "ratio": ratio})
    return sorted(chosen, key=lambda r: r["ratio"])


def read_raw_csv(text: str) -> list[dict]:
    """ncu's `--page raw --csv` as one dict a kernel, metric name -> value, plus "units". Lines
    before the header (ncu's own messages) are skipped; the units row follows the header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV header (a line starting with \"ID\") in the text")
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, rows = table[0], table[1:]
    units = {}
    if rows and not rows[0][header.index("ID")]:
        units = dict(zip(header, rows[0]))
        rows = rows[1:]
    return [{**dict(zip(header, row)), "units": units} for row in rows if len(row) == len(header)]


def number(text) -> float | None:
    """A CSV value as a float ("1,234.5" -> 1234.5); None where it is not a number."""
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def duration_us(kernel: dict) -> float | None:
    value = number(kernel.get(DURATION, ""))
    scale = TIME_UNITS.get(kernel["units"].get(DURATION, "ns"))
    return None if value is None or scale is None else value * scale


def split_at_markers(kernels: list[dict]) -> list[list[dict]]:
    """The kernels after each marker, up to the next: one list a profiled row. Kernels before
    the first marker (none, with the ranges bench/ncu_rows.py opens) are dropped."""
    groups = None
    for kernel in kernels:
        if MARKER in kernel.get("Kernel Name", ""):
            groups = (groups or []) + [[]]
        elif groups is not None:
            groups[-1].append(kernel)
    return groups or []


def metric(kernel: dict, pattern: str, summed: bool = False) -> float | None:
    """The first metric whose name matches `pattern`, as a number, or with `summed` the sum of
    every match (a column made of several metrics, SUMMED)."""
    found = [number(v) for k, v in kernel.items() if k != "units" and re.search(pattern, k)]
    found = [v for v in found if v is not None]
    if not found:
        return None
    return sum(found) if summed else found[0]


def stalls(kernel: dict, top: int = 3) -> list[tuple[str, float]]:
    """The `top` stall reasons, in cycles a warp spends on each per issued instruction."""
    found = []
    for name, value in kernel.items():
        m = STALL.match(name)
        if m and number(value) is not None:
            found.append((m.group(1), number(value)))
    return sorted(found, key=lambda s: -s[1])[:top]


def summarize(kernels: list[dict]) -> dict:
    """A row's side: its kernels' total time, each kernel's (name, µs) in launch order (where
    a backward's time goes between its preprocess, main kernel and convert), and its longest
    kernel's metrics."""
    if not kernels:
        return {"us": None, "kernels": 0}
    timed = [(duration_us(k) or 0.0, k) for k in kernels]
    longest_us, main = max(timed, key=lambda t: t[0])
    side = {"us": sum(t for t, _ in timed), "kernels": len(kernels), "main": main["Kernel Name"],
            "main_us": longest_us, "stalls": stalls(main),
            "each": [(k["Kernel Name"], t) for t, k in timed]}
    side.update({col: metric(main, pattern, col in SUMMED) for col, pattern in PATTERNS.items()})
    return side


def _cell(value, digits=1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isclose(value, round(value)):
        return f"{value:.{digits}f}"
    return f"{value:,.0f}"


def render_table(rows: list[dict], ours: list[list[dict]], theirs: list[list[dict]],
                 served: dict[str, dict] | None = None) -> str:
    """A markdown table, two lines a row (attnpack, then the default), from the kernels
    split_at_markers gave each side in the order `rows` ran. A side with fewer groups than
    rows (its run stopped early) ends the table there."""
    columns = ["row", "bench ratio", "side", "kernels", "µs", "main kernel"] + list(PATTERNS) \
        + ["top stalls (cycles per issue)", "each kernel (µs)"]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row, mine, native in zip(rows, ours, theirs):
        for side, kernels in (("attnpack", mine), ("default", native)):
            s = summarize(kernels)
            main = s.get("main", "-")
            if side == "attnpack" and served and row["name"] in served:
                main = " + ".join(served[row["name"]]) or main
            cells = [row["name"] if side == "attnpack" else "",
                     f"{row['ratio']:.2f}x" if side == "attnpack" else "", side,
                     str(s["kernels"]), _cell(s["us"]), main]
            cells += [_cell(s.get(col)) for col in PATTERNS]
            cells.append(", ".join(f"{n} {v:.1f}" for n, v in s.get("stalls", [])) or "-")
            cells.append(", ".join(f"{n} {_cell(us)}" for n, us in s.get("each", [])) or "-")
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
