"""What `attnpack bench` does for each of its modes; cli.py only parses and prints."""
from __future__ import annotations

import json
from pathlib import Path

from attnpack.bench import report
from attnpack.bench.shapes import DEFAULT_SHAPE_FILES, DTYPES, OPS, plan_rows

BACKEND_NAMES = ("attnpack", "default", "flash", "efficient")


class UsageError(ValueError):
    """An option value `attnpack bench` cannot use; the message names the option."""


def split_list(text: str | None, allowed, option: str) -> tuple[str, ...] | None:
    """'fwd,fwdbwd' -> ("fwd", "fwdbwd"); UsageError naming the option on an unknown item."""
    if text is None:
        return None
    items = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UsageError(f"{option} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return items


def compare_files(old: Path, new: Path, as_json: bool) -> str:
    diff = report.compare(report.load_results(old), report.load_results(new))
    return json.dumps(diff, indent=1) if as_json else report.render_compare(diff)


def report_only(results_path: Path, out_dir: Path | None, plots: bool,
                markdown: Path | None = None) -> tuple[dict, dict]:
    """Regenerate every output from a recorded run; (results, written files)."""
    results = report.load_results(results_path)
    written = report.write_outputs(results, out_dir or Path(results_path).parent, plots=plots,
                                   markdown=markdown)
    return results, written


def measure(shape_files, ops: str, dtypes: str | None, backends: str, max_rows: int | None,
            only: str | None, reps: int, warmup: int, dynamic: bool, requests: int,
            new_lengths: int, cold: bool, seed: int, progress,
            turn_calls: int | None = None, lead_cycles: int | None = None) -> dict:
    """Run the bench on this GPU; the results dict (see attnpack.bench.run). `turn_calls` and
    `lead_cycles`: None for measure.TURN_CALLS and timing.HOST_LEAD_CYCLES."""
    from attnpack.bench.run import run_bench
    shape_files = [Path(p) for p in (shape_files or DEFAULT_SHAPE_FILES)]
    op_list = split_list(ops, OPS, "--ops")
    dtype_list = split_list(dtypes, DTYPES, "--dtype")
    backend_list = split_list(backends, BACKEND_NAMES, "--backends")
    if "attnpack" not in backend_list:
        raise UsageError("--backends must include attnpack: every ratio is against it")
    if reps < 1 or warmup < 0 or (max_rows is not None and max_rows < 0):
        raise UsageError("--reps must be >= 1, --warmup and --max-rows >= 0")
    if turn_calls is not None and not 1 <= turn_calls <= reps:
        raise UsageError(f"--turn-calls {turn_calls}: give 1 to {reps} (--reps), the timed calls "
                         "a backend makes before the next one's turn")
    if lead_cycles is not None and lead_cycles < 0:
        raise UsageError(f"--lead-cycles {lead_cycles}: give 0 (no spin) or more")
    planned = plan_rows(shape_files, dtype_list, max_rows, only)
    dyn = {"requests": requests, "seed": seed, "lengths_new": new_lengths, "cold": cold} \
        if dynamic else None
    return run_bench(planned, op_list, backend_list, reps, warmup, shape_files, dyn,
                     progress=progress, turn_calls=turn_calls, lead_cycles=lead_cycles)
