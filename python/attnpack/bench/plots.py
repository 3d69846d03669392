"""PNG plots of a bench run, with matplotlib's Agg backend (no display needed).

- tflops_<op>.png: TFLOP/s per row per backend, one panel per shape set;
- speedup_<op>.png: attnpack / default per row, worst first, coloured by what served it;
- dynamic_stream.png: each request's latency over the random-length stream, per backend.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attnpack.bench.report import BACKENDS, STREAM_BACKENDS, worst_first  # noqa: E402

COLORS = {"attnpack": "#d62728", "default": "#1f77b4", "flash": "#2ca02c", "efficient": "#9467bd"}
FAMILY_COLORS = {"gluon": "#d62728", "triton": "#ff7f0e", "gluon+triton": "#e377c2",
                 "fallback": "#7f7f7f", "not reached": "#c7c7c7"}
ROW_HEIGHT_IN = 0.28


def _label(d: dict) -> str:
    return d["name"] + ("" if d["dtype"] == "bf16" else f" {d['dtype']}")


def _panels(analysis: dict, op: str) -> list[tuple[str, list[dict]]]:
    sets = list(dict.fromkeys(d["set"] for d in analysis["rows"] if d["op"] == op))
    return [(s, [d for d in analysis["rows"] if d["op"] == op and d["set"] == s]) for s in sets]


def _figure(panels, width: float = 11.0):
    heights = [max(2, len(rows)) for _, rows in panels]
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(width, 1.4 * len(panels) + ROW_HEIGHT_IN * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    return fig, [a[0] for a in axes]


def plot_tflops(analysis: dict, op: str, path: Path, subtitle: str) -> Path:
    panels = _panels(analysis, op)
    fig, axes = _figure(panels)
    bar = 0.8 / len(BACKENDS)
    for ax, (set_name, rows) in zip(axes, panels):
        for i, b in enumerate(BACKENDS):
            ys = [j + (i - (len(BACKENDS) - 1) / 2) * bar for j in range(len(rows))]
            ax.barh(ys, [d["tflops"].get(b, 0.0) for d in rows], height=bar, color=COLORS[b],
                    label=b)
        ax.set_yticks(range(len(rows)), [_label(d) for d in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("TFLOP/s")
        ax.set_title(f"{set_name}: {op}", fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(f"TFLOP/s per backend, {op} ({subtitle})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _status_key(d: dict) -> str:
    status = (d["served"] or {}).get("status")
    return d["family"] if status == "served" else (status or "not reached")


def plot_speedup(analysis: dict, op: str, path: Path, subtitle: str) -> Path:
    panels = [(s, worst_first(rows)) for s, rows in _panels(analysis, op)]
    fig, axes = _figure(panels, width=9.0)
    for ax, (set_name, rows) in zip(axes, panels):
        ratios = [d["vs_default"] or 0.0 for d in rows]
        keys = [_status_key(d) for d in rows]
        ax.barh(range(len(rows)), ratios, color=[FAMILY_COLORS.get(k, "#17becf") for k in keys])
        for j, r in enumerate(ratios):
            ax.text(r, j, f" {r:.2f}", va="center", fontsize=6)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlim(0, 1.15 * max(ratios + [1.0]))  # room for the value labels
        ax.set_yticks(range(len(rows)), [_label(d) for d in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("attnpack speed / PyTorch default speed (above 1: attnpack faster)")
        ax.set_title(f"{set_name}: {op}", fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
        seen = list(dict.fromkeys(keys))
        ax.legend([plt.Rectangle((0, 0), 1, 1, color=FAMILY_COLORS.get(k, "#17becf")) for k in seen],
                  [f"served by {k}" if k in FAMILY_COLORS and k not in ("fallback", "not reached")
                   else k for k in seen], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(f"attnpack against PyTorch's default, {op} ({subtitle})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_stream(results: dict, path: Path) -> Path:
    stream = results["dynamic"]["stream"]
    lengths = stream["lengths"]
    fig, (ax_len, ax_lat) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                         gridspec_kw={"height_ratios": [1, 3]})
    ax_len.plot(range(len(lengths)), lengths, color="#555555", linewidth=0.8)
    ax_len.set_ylabel("length")
    for name in [b for b in STREAM_BACKENDS if b in stream["backends"]]:
        lat = stream["backends"][name]["latency_ms"]
        ax_lat.plot(range(len(lat)), lat, label=name, color=COLORS.get(name), linewidth=0.9,
                    marker=".", markersize=3)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency, ms (log)")
    ax_lat.set_xlabel("request")
    ax_lat.grid(alpha=0.3)
    ax_lat.legend(fontsize=8)
    fig.suptitle("random-length causal prefill stream", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(analysis: dict, results: dict, out_dir: Path) -> dict[str, Path]:
    """Every plot the run has data for; {kind: path}."""
    env = results.get("environment", {})
    subtitle = env.get("gpu", "?") + (f", torch {env['torch']}" if env.get("torch") else "")
    written = {}
    for op in dict.fromkeys(d["op"] for d in analysis["rows"]):
        written[f"tflops_{op}"] = plot_tflops(analysis, op, out_dir / f"tflops_{op}.png", subtitle)
        written[f"speedup_{op}"] = plot_speedup(analysis, op, out_dir / f"speedup_{op}.png", subtitle)
    if (results.get("dynamic") or {}).get("stream", {}).get("backends"):
        written["dynamic_stream"] = plot_stream(results, out_dir / "dynamic_stream.png")
    return written
