"""`attnpack bench` without a GPU: shape sets, FLOP counts, the report generator on a recorded
(hand-made) run, --compare, and the command line.

The fixture tests/cpu/fixtures/bench/results.json is hand-made, with times in the range the
H200 shows; every expected number below is worked out from its times and shapes here.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnpack.bench import report
from attnpack.bench.served import served_summary, served_text
from attnpack.bench.shapes import (DEFAULT_SHAPE_FILES, Shape, ShapeFileError, load_shape_file,
                                   plan_rows, shape_flops)
from attnpack.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "bench" / "results.json"
MATMUL = 790.0


@pytest.fixture()
def results():
    return json.loads(FIXTURE.read_text())


def rows_of(analysis, set_name, op):
    return [d for d in analysis["rows"] if d["set"] == set_name and d["op"] == op]


def by_name(analysis, name, op):
    (row,) = [d for d in analysis["rows"] if d["name"] == name and d["op"] == op]
    return row


# ---------------------------------------------------------------- FLOPs
def test_flops_are_the_tuners_and_count_visible_pairs():
    import attnpack.bench.shapes as shapes
    import attnpack.tune.runner as runner
    assert shapes.flops is runner.flops  # one FLOP function, shared

    full = Shape(4, 16, 16, 4096, 4096, 128, False, "bf16")
    assert shape_flops(full, "fwd") == 4 * 4 * 16 * 4096 * 4096 * 128
    assert shape_flops(full, "bwd") == 2.5 * 4 * 4 * 16 * 4096 * 4096 * 128
    assert shape_flops(full, "fwdbwd") == 3.5 * 4 * 4 * 16 * 4096 * 4096 * 128
    causal = Shape(4, 16, 16, 4096, 4096, 128, True, "bf16")
    assert shape_flops(causal, "fwd") == 4 * 4 * 16 * 128 * (4096 * 4097 // 2)
    # Sq < Sk, top-left causal: query i sees keys 0..i, a sliver of Sq*Sk.
    short_q = Shape(2, 16, 16, 1024, 4096, 128, True, "bf16")
    assert shape_flops(short_q, "fwd") == 4 * 2 * 16 * 128 * (1024 * 1025 // 2)
    # Sq > Sk: the last Sq - Sk queries see every key.
    long_q = Shape(1, 8, 8, 300, 100, 64, True, "bf16")
    assert shape_flops(long_q, "fwd") == 4 * 8 * 64 * (100 * 101 // 2 + 200 * 100)
    # decode: one query, every key visible (not causal); GQA does not change the count (Hq).
    decode = Shape(64, 32, 8, 1, 1024, 128, False, "bf16")
    assert shape_flops(decode, "fwd") == 4 * 64 * 32 * 1 * 1024 * 128
    with pytest.raises(ValueError, match="op 'bwdd'"):
        shape_flops(full, "bwdd")


# ---------------------------------------------------------------- rows and summary
def test_row_rates_and_ratios_are_derived_from_recorded_times(results):
    analysis = report.analyze(results)
    row = by_name(analysis, "B4 H16 S4096 d128 full", "fwd")
    flop = 4 * 4 * 16 * 4096 * 4096 * 128
    assert row["flop"] == flop
    assert row["tflops"]["attnpack"] == pytest.approx(flop / 0.88 / 1e9, rel=1e-12)
    assert row["tflops"]["efficient"] == pytest.approx(flop / 2.30 / 1e9, rel=1e-12)
    assert row["vs_default"] == pytest.approx(0.90 / 0.88, rel=1e-12)
    assert row["vs_best"] == pytest.approx(0.90 / 0.88, rel=1e-12)
    assert row["best_native"] == "default" and row["default_backend"] == "cudnn"
    assert row["matmul_fraction"] == pytest.approx(flop / 0.88 / 1e9 / MATMUL, rel=1e-12)
    assert row["family"] == "gluon"

    fb = by_name(analysis, "B4 H16 S4096 d128 full", "fwdbwd")
    assert fb["flop"] == 3.5 * flop
    assert fb["vs_default"] == pytest.approx(3.50 / 4.40, rel=1e-12)
    assert fb["family"] == "gluon+triton"

    # causal Sq != Sk: flash refused (recorded, not timed); best native is the default.
    row = by_name(analysis, "B2 H16 S1024x4096 d128 causal", "fwd")
    assert row["flop"] == 4 * 2 * 16 * 128 * (1024 * 1025 // 2)
    assert "flash" not in row["tflops"] and "is_causal" in row["errors"]["flash"]
    assert row["vs_best"] == pytest.approx(0.045 / 0.030, rel=1e-12)

    # decode row: flash is faster than the default here, so "best native" is flash.
    row = by_name(analysis, "Llama-3.1-8B decode B64 Sk1024", "fwd")
    assert row["best_native"] == "flash"
    assert row["vs_best"] == pytest.approx(0.055 / 0.060, rel=1e-12)
    assert row["vs_default"] == pytest.approx(0.058 / 0.060, rel=1e-12)


def test_summary_geomeans_are_exact_and_count_what_served(results):
    analysis = report.analyze(results)
    ratios = [0.90 / 0.88, 0.52 / 0.52, 0.105 / 0.140, 0.045 / 0.030, 0.0250 / 0.0251]
    (summary,) = [s for s in analysis["summary"] if (s["set"], s["op"]) == ("shapes", "fwd")]
    assert summary["rows"] == 5
    assert summary["geomean_vs_default"] == pytest.approx(math.prod(ratios) ** (1 / 5), rel=1e-12)
    assert summary["min_vs_default"] == pytest.approx(0.105 / 0.140)
    assert summary["max_vs_default"] == pytest.approx(1.5)
    assert summary["below_default"] == 2  # 0.75 and 0.996; exactly 1.0 is not below
    assert summary["statuses"] == {"served": 4, "not reached": 1}
    assert summary["families"] == {"gluon": 3, "triton": 1}
    assert summary["worst"] == "B32 H16 S512 d128 causal"
    # vs best native: the decode row's best is flash, so the two geomeans differ there.
    (model,) = [s for s in analysis["summary"] if (s["set"], s["op"]) == ("model_shapes", "fwd")]
    best = [0.135 / 0.190, 0.56 / 0.95, 0.055 / 0.060, 0.22 / 0.36]
    assert model["geomean_vs_best"] == pytest.approx(math.prod(best) ** (1 / 4), rel=1e-12)
    assert model["statuses"] == {"served": 3, "fallback": 1}
    assert [(s["set"], s["op"]) for s in analysis["summary"]] == [
        ("shapes", "fwd"), ("shapes", "fwdbwd"), ("model_shapes", "fwd"), ("model_shapes", "fwdbwd")]
    # The table prints a set's geomean to 0.001, so a miss of a 1.05x target by 0.0005 shows.
    line = report.summary_table(analysis).splitlines()[2]
    assert line.startswith(f"| shapes | fwd | 5 | {math.prod(ratios) ** (1 / 5):.3f}x | ")
    assert report.fmt_geomean(1.0484) == "1.048x" and report.fmt_geomean(None) == "-"


def test_geomean_and_percentile():
    assert report.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert report.geomean([None, 3.0]) == pytest.approx(3.0)
    assert report.geomean([]) is None
    with pytest.raises(ValueError):
        report.geomean([1.0, 0.0])
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert report.percentile(values, 50) == 3.0
    assert report.percentile(values, 99) == pytest.approx(4.96)  # 4 + 0.96 * (5 - 4)
    assert report.percentile(values, 0) == 1.0 and report.percentile(values, 100) == 5.0


def test_worst_rows_come_first(results):
    analysis = report.analyze(results)
    order = [d["name"] for d in report.worst_first(rows_of(analysis, "shapes", "fwd"))]
    assert order == ["B32 H16 S512 d128 causal", "B1 H32/8 S512x2048 d128 causal",
                     "B4 H16 S4096 d128 causal", "B4 H16 S4096 d128 full",
                     "B2 H16 S1024x4096 d128 causal"]
    # A row attnpack could not run at all is worse than any ratio.
    broken = copy.deepcopy(results)
    broken["rows"][4]["backends"]["attnpack"] = {"error": "CUDA error: an illegal instruction"}
    order = [d["name"] for d in report.worst_first(rows_of(report.analyze(broken), "shapes", "fwd"))]
    assert order[0] == "B32 H16 S512 d128 causal" and report.analyze(broken)["rows"][4]["vs_default"] is None


def test_dynamic_summary(results):
    dyn = report.analyze(results)["dynamic"]
    attn = results["dynamic"]["stream"]["backends"]["attnpack"]["latency_ms"]
    default = results["dynamic"]["stream"]["backends"]["default"]["latency_ms"]
    assert dyn["stream"]["attnpack"]["total_ms"] == pytest.approx(sum(attn))
    assert dyn["stream"]["default"]["total_ms"] == pytest.approx(sum(default))
    ordered = sorted(default)  # 12 values: p50 between the 6th and 7th, p99 at 10.89
    assert dyn["stream"]["default"]["p50_ms"] == pytest.approx((ordered[5] + ordered[6]) / 2)
    assert dyn["stream"]["default"]["p99_ms"] == pytest.approx(
        ordered[10] + 0.89 * (ordered[11] - ordered[10]))
    assert dyn["new_lengths"]["default"]["first_median_ms"] == pytest.approx((70.2 + 71.5) / 2)
    assert dyn["new_lengths"]["attnpack"]["first_max_ms"] == 0.66
    assert dyn["cold_start"]["triton_compile"]["compile_ms"] == 2410.5


# ---------------------------------------------------------------- outputs
def test_csv_has_one_line_per_row_with_the_derived_values(results):
    lines = list(csv.DictReader(io.StringIO(report.render_csv(results))))
    assert len(lines) == len(results["rows"]) == 13
    first = lines[0]
    assert first["name"] == "B4 H16 S4096 d128 full" and first["op"] == "fwd"
    assert int(first["flop"]) == 4 * 4 * 16 * 4096 * 4096 * 128
    assert float(first["vs_default"]) == pytest.approx(0.90 / 0.88, rel=1e-5)
    assert first["kernels"] == "gluon/fwd/bf16-d128-full/M64_N128_stages3"
    phi = [line for line in lines if line["name"] == "Phi-3-mini prefill B4 S2048"][0]
    assert phi["status"] == "fallback" and phi["reason"] == "head_dim 96 not built"
    gqa = [line for line in lines if line["name"] == "B1 H32/8 S512x2048 d128 causal"][0]
    assert gqa["status"] == "not reached" and gqa["tflops_flash"] == ""
    assert "flash: Flash attention does not support" in gqa["errors"]


def test_markdown_tables_plots_and_files(results, tmp_path):
    written = report.write_outputs(results, tmp_path)
    for kind in ("tflops_fwd", "speedup_fwd", "tflops_fwdbwd", "speedup_fwdbwd", "dynamic_stream"):
        png = written[kind]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert json.loads((tmp_path / "results.json").read_text()) == results
    md = (tmp_path / "report.md").read_text()
    assert "NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130, CUDA 13.0, cuDNN 91900" in md
    assert "| shapes | fwd | 5 | 1.028x | 1.028x | 0.75x | 1.50x | 2 | 37% | 4 served, 1 not reached" in md
    assert "![attnpack / default, fwd](speedup_fwd.png)" in md
    assert "![latency over the request stream](dynamic_stream.png)" in md
    assert "fallback: head_dim 96 not built" in md
    assert "not reached: F.sdpa sends this call to neither" in md
    assert "| B2 H16 S1024x4096 d128 causal | 287 | 191 (cudnn) | refused | 143 |" in md
    # each refusal reason once, with its row count: efficient refused the 5 GQA rows
    assert "| efficient | Memory efficient attention does not support grouped query attention; " \
           "No available kernel. Aborting execution. | 5 |" in md
    # rows of a section, worst first
    section = md.split("## model_shapes: fwd (worst first)")[1].split("##")[0]
    positions = [section.index(n) for n in ("Gemma-2-9B prefill B2 S4096", "Phi-3-mini prefill B4 S2048",
                                            "Llama-3.1-8B prefill B64 S256",
                                            "Llama-3.1-8B decode B64 Sk1024")]
    assert positions == sorted(positions)
    # dynamic report: stream totals and cold start, the JIT's refusal stated, not hidden
    assert "| default | 611 | 54.8 | 61.9 | 62.0 | - |" in md
    assert "| Triton compile of the same kernel (empty cache) | 2410 |" in md
    assert "not measured: takes TMA descriptors" in md


def test_backward_alone_is_each_backends_fwdbwd_less_its_fwd(results):
    """Pairs of a set's fwd and fwdbwd rows of one shape only; per backend the difference of
    their times, the default's over attnpack's, and the fwdbwd row's backward kernels."""
    analysis = report.analyze(results)
    rows = {(r["set"], r["name"]): r for r in report.backward_rows(analysis["rows"])}
    # 4 pairs: 3 in shapes, 1 in model_shapes (Gemma-2-9B has no fwdbwd row)
    assert sorted(rows) == [("model_shapes", "Llama-3.1-8B prefill B64 S256"),
                            ("shapes", "B32 H16 S512 d128 causal"),
                            ("shapes", "B4 H16 S4096 d128 causal"),
                            ("shapes", "B4 H16 S4096 d128 full")]
    full = rows[("shapes", "B4 H16 S4096 d128 full")]
    assert full["ms"] == pytest.approx({"attnpack": 4.4 - 0.88, "default": 3.5 - 0.90,
                                        "flash": 5.1 - 1.72, "efficient": 7.9 - 2.30})
    assert full["vs_default"] == pytest.approx((3.5 - 0.90) / (4.4 - 0.88))
    assert full["default_backend"] == "cudnn"
    assert full["served_text"] == \
        "triton/bwd/bf16-d128-full/kvN64_kvM32_kvW4_kvS3_qM64_qN32_qW4_qS3"
    llama = rows[("model_shapes", "Llama-3.1-8B prefill B64 S256")]
    assert set(llama["ms"]) == {"attnpack", "default", "flash"}  # efficient refused both
    # a shape that differs (another dtype) is not a pair; a difference that is not positive
    # leaves its backend out
    other = copy.deepcopy(results)
    fwd = next(r for r in other["rows"] if r["name"] == "B4 H16 S4096 d128 full")
    fwd["shape"]["dtype"] = "fp16"
    slow = next(r for r in other["rows"] if r["name"] == "B4 H16 S4096 d128 causal"
                and r["op"] == "fwd")
    slow["backends"]["flash"]["ms"] = 3.4
    again = {r["name"]: r for r in report.backward_rows(report.analyze(other)["rows"])}
    assert "B4 H16 S4096 d128 full" not in again
    assert "flash" not in again["B4 H16 S4096 d128 causal"]["ms"]
    # the report: a line per set, worst first
    (shapes, table), (models, _) = report.backward_tables(analysis["rows"])
    assert (shapes, models) == ("shapes", "model_shapes")
    ratios = sorted(r["vs_default"] for (s, _), r in rows.items() if s == "shapes")
    assert table.startswith(f"3 rows: x default geomean {report.fmt_geomean(report.geomean(ratios))}"
                            f", min {report.fmt_ratio(ratios[0])}, 3 below 1x.")
    order = [table.index(n) for n in sorted(
        ("B32 H16 S512 d128 causal", "B4 H16 S4096 d128 causal", "B4 H16 S4096 d128 full"),
        key=lambda n: rows[("shapes", n)]["vs_default"])]
    assert order == sorted(order)
    md = report.render_markdown(results)
    assert "## shapes: the backward alone (worst first)" in md and "Derived, not timed" in md
    assert "## model_shapes backward alone (fwdbwd less fwd, worst first)" in \
        report.render_text(results)


def test_markdown_elsewhere_links_its_plots_relative_to_itself(results, tmp_path):
    """As for docs: --out docs/performance --markdown docs/performance.md."""
    docs = tmp_path / "docs"
    written = report.write_outputs(results, docs / "performance", markdown=docs / "performance.md")
    assert written["markdown"] == docs / "performance.md" and not (docs / "performance" / "report.md").exists()
    md = (docs / "performance.md").read_text()
    assert "![attnpack / default, fwd](performance/speedup_fwd.png)" in md
    assert "[`performance/results.json`](performance/results.json)" in md
    assert (docs / "performance" / "speedup_fwd.png").is_file()


def test_report_without_dynamic_section_or_plots(results, tmp_path):
    del results["dynamic"]
    written = report.write_outputs(results, tmp_path, plots=False)
    assert not list(tmp_path.glob("*.png")) and "dynamic_stream" not in written
    md = (tmp_path / "report.md").read_text()
    assert "Dynamic lengths" not in md and "![" not in md


def test_results_errors_name_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": [{"set": "s", "name": "n", "op": "fwd", "backends": {},
                                         "shape": {"batch": 1}}]}))
    with pytest.raises(report.ResultsError, match=r"bad.json: rows\[0\].shape lacks heads_q"):
        report.load_results(bad)
    bad.write_text("{}")
    with pytest.raises(report.ResultsError, match="bad.json: no \"rows\" list"):
        report.load_results(bad)


# ---------------------------------------------------------------- --compare
def changed_run(results):
    new = copy.deepcopy(results)
    new["environment"]["torch"] = "2.12.0+cu130"
    row = new["rows"][8]  # Llama-3.1-8B prefill B64 S256 fwd: gluon persistent -> triton
    assert row["name"] == "Llama-3.1-8B prefill B64 S256" and row["op"] == "fwd"
    row["served"] = served_summary({"calls": {"triton/fwd/bf16-d128-causal/M128_N64_warps8_stages3": 36},
                                    "ops": {"flash_fwd": {"served": 36, "fallback": 0}}}, "fwd", "flash")
    row["backends"]["attnpack"]["ms"] = 0.230  # slower: the regression --compare is for
    row = new["rows"][12]  # Phi-3-mini: the fallback is now served
    row["served"] = served_summary({"calls": {"triton/fwd/bf16-d96-causal/M64_N64_warps4_stages3": 36},
                                    "ops": {"flash_fwd": {"served": 36, "fallback": 0}}}, "fwd", "flash")
    row["backends"]["attnpack"]["ms"] = 0.30
    new["rows"][0]["backends"]["attnpack"]["ms"] = 0.80  # faster, same kernel: not a change
    new["rows"].append(copy.deepcopy(new["rows"][0]) | {"name": "B4 H16 S4096 d128 full (new)"})
    return new


def test_compare_lists_rows_whose_kernel_changed(results):
    diff = report.compare(results, changed_run(results))
    assert diff["rows_compared"] == 13 and diff["only_new"] == ["shapes B4 H16 S4096 d128 full (new) fwd bf16"]
    # the worst change first: Llama lost against the default (0.83x), Phi gained (1.2x)
    assert [c["name"] for c in diff["changed"]] == ["Llama-3.1-8B prefill B64 S256",
                                                    "Phi-3-mini prefill B4 S2048"]
    llama = diff["changed"][0]
    flop = 4 * 64 * 32 * 128 * (256 * 257 // 2)
    assert llama["old_served"] == "gluon/fwd/bf16-d128-causal/M64_N128_stages3_overlap1_persistent1"
    assert llama["new_served"] == "triton/fwd/bf16-d128-causal/M128_N64_warps8_stages3"
    assert llama["old_tflops"] == pytest.approx(flop / 0.190 / 1e9)
    assert llama["new_tflops"] == pytest.approx(flop / 0.230 / 1e9)
    assert llama["speed_new_over_old"] == pytest.approx(0.190 / 0.230)
    assert llama["old_vs_default"] == pytest.approx(0.135 / 0.190)
    assert llama["new_vs_default"] == pytest.approx(0.135 / 0.230)
    phi = diff["changed"][1]
    assert phi["old_served"] == "fallback: head_dim 96 not built"
    text = report.render_compare(diff)
    assert "2 of 13 rows changed their serving kernel" in text and "torch 2.12.0+cu130" in text


# ---------------------------------------------------------------- served-by attribution
def test_served_summary_from_stats():
    fwd = "gluon/fwd/bf16-d128-causal/M64_N128_stages3"
    bwd = "triton/bwd/bf16-d128-causal/kvN64_kvM32_kvW4_kvS3_qM64_qN32_qW4_qS3"
    stats = {"calls": {fwd: 1, bwd: 36}, "fallbacks": {},
             "ops": {"flash_fwd": {"served": 1, "fallback": 0}, "flash_bwd": {"served": 36, "fallback": 0}}}
    # a bwd timing runs one forward to build its graph; only the backward counts
    got = served_summary(stats, "bwd", "flash")
    assert got == {"status": "served", "kernels": {bwd: 36}, "families": ["triton"], "fallbacks": {},
                   "reason": None}
    assert served_summary(stats, "fwdbwd", "flash")["families"] == ["gluon", "triton"]
    fallback = {"calls": {}, "fallbacks": {"dropout_p > 0": 36},
                "ops": {"flash_fwd": {"served": 0, "fallback": 36}}}
    got = served_summary(fallback, "fwd", "flash")
    assert got["status"] == "fallback" and got["reason"] == "dropout_p > 0"
    assert served_text(got) == "fallback: dropout_p > 0"
    # partly served: both the reason and the kernel are said
    partial = {"calls": {fwd: 36}, "fallbacks": {"deterministic mode: the gluon backward is not known to be deterministic": 36},
               "ops": {"flash_fwd": {"served": 36, "fallback": 0}, "flash_bwd": {"served": 0, "fallback": 36}}}
    text = served_text(served_summary(partial, "fwdbwd", "flash"))
    assert text.startswith("fallback: deterministic mode") and f"(served: {fwd})" in text
    none = served_summary({"calls": {}, "fallbacks": {}, "ops": {}}, "fwd", None)
    assert none["status"] == "not reached" and "neither the flash nor the efficient op" in none["reason"]


# ---------------------------------------------------------------- shape sets
def test_shape_sets_load_and_model_set_covers_the_models():
    public = load_shape_file(DEFAULT_SHAPE_FILES[0])
    assert len(public) == 22
    models = load_shape_file(DEFAULT_SHAPE_FILES[1])
    assert 30 <= len(models) <= 40
    heads = {(s.heads_q, s.heads_kv, s.head_dim) for s in models}
    for need in ((32, 8, 128), (64, 8, 128), (28, 4, 128), (32, 32, 96)):
        assert need in heads
    assert any(s.head_dim == 256 for s in models)
    for model in ("Llama-3.1-8B", "Llama-3.3-70B", "Qwen2.5-72B", "Qwen2-7B", "Gemma-2-9B", "Phi-3-mini"):
        assert any(s.name.startswith(model + " ") for s in models), model
    prefill = [s for s in models if s.seqlen_q > 1]
    decode = [s for s in models if s.seqlen_q == 1]
    assert all(s.causal and s.seqlen_q == s.seqlen_k and 256 <= s.seqlen_q <= 8192 for s in prefill)
    assert all(8192 <= s.batch * s.seqlen_q <= 32768 for s in prefill)
    assert {s.seqlen_q for s in prefill} >= {256, 1024, 2048, 4096, 8192}
    assert all(not s.causal and s.ops == ("fwd",) for s in decode)
    assert min(s.seqlen_k for s in decode) == 1024 and max(s.seqlen_k for s in decode) == 32768
    assert all(s.name.split()[1] in ("prefill", "decode") for s in models)


def test_plan_rows_dtypes_limits_and_ops(tmp_path):
    planned = plan_rows(DEFAULT_SHAPE_FILES, ("bf16", "fp16"), max_rows=2)
    assert [(s, sh.label, sh.dtype) for s, sh in planned][:3] == [
        ("shapes", "B32 H16 S512 d128 full", "bf16"), ("shapes", "B32 H16 S512 d128 full", "fp16"),
        ("shapes", "B32 H16 S512 d128 causal", "bf16")]
    assert len(planned) == 8
    decode = plan_rows(DEFAULT_SHAPE_FILES[1:], only="decode B64 Sk1024")
    assert [sh.label for _, sh in decode] == ["Llama-3.1-8B decode B64 Sk1024"]
    assert decode[0][1].wanted_ops(("fwd", "fwdbwd")) == ["fwd"]


@pytest.mark.parametrize("entry, message", [
    ({"batch": 1}, r"shapes\[0\]: missing heads_q"),
    ({"batch": 1, "heads_q": 6, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": True, "dtype": "bf16"}, "heads_q 6 is not a multiple of heads_kv 4"),
    ({"batch": 0, "heads_q": 4, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": True, "dtype": "bf16"}, "batch is 0; it must be a positive integer"),
    ({"batch": 1, "heads_q": 4, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": "yes", "dtype": "bf16"}, "causal is 'yes'"),
    ({"batch": 1, "heads_q": 4, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": True, "dtype": "fp32"}, "dtype 'fp32'"),
    ({"batch": 1, "heads_q": 4, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": True, "dtype": "bf16", "ops": ["decode"]}, "ops \\['decode'\\]"),
    ({"batch": 1, "heads_q": 4, "heads_kv": 4, "seqlen_q": 8, "seqlen_k": 8, "head_dim": 64,
      "causal": True, "dtype": "bf16", "heads": 4}, "unknown key 'heads'"),
])
def test_bad_shape_files_name_the_file_and_entry(tmp_path, entry, message):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"about": "", "shapes": [entry]}))
    with pytest.raises(ShapeFileError, match=message) as caught:
        load_shape_file(path)
    assert str(path) in str(caught.value)


# ---------------------------------------------------------------- the command line
def test_cli_report_only_and_json(tmp_path):
    runner = CliRunner()
    done = runner.invoke(main, ["bench", "--report-only", str(FIXTURE), "--out", str(tmp_path),
                                "--no-plots"])
    assert done.exit_code == 0, done.output
    assert "| shapes | fwdbwd | 3 | 0.790x |" in done.output
    assert (tmp_path / "report.md").is_file() and (tmp_path / "results.csv").is_file()
    done = runner.invoke(main, ["bench", "--report-only", str(FIXTURE), "--out", str(tmp_path),
                                "--no-plots", "--json"])
    assert done.exit_code == 0 and json.loads(done.stdout)["rows"][0]["name"] == "B4 H16 S4096 d128 full"


def test_cli_compare(results, tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(results))
    new.write_text(json.dumps(changed_run(results)))
    done = CliRunner().invoke(main, ["bench", "--compare", str(old), str(new)])
    assert done.exit_code == 0, done.output
    assert "2 of 13 rows changed their serving kernel" in done.output
    done = CliRunner().invoke(main, ["bench", "--compare", str(old), str(new), "--json"])
    assert [c["name"] for c in json.loads(done.stdout)["changed"]][0] == "Llama-3.1-8B prefill B64 S256"


def test_cli_refuses_bad_options_and_a_missing_gpu(tmp_path):
    runner = CliRunner()
    done = runner.invoke(main, ["bench", "--ops", "fwd,backward", "--out", str(tmp_path)])
    assert done.exit_code != 0 and "--ops 'fwd,backward': choose from fwd, bwd, fwdbwd" in done.output
    done = runner.invoke(main, ["bench", "--backends", "default,flash", "--out", str(tmp_path)])
    assert done.exit_code != 0 and "--backends must include attnpack" in done.output
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    done = runner.invoke(main, ["bench", "--report-only", str(bad)])
    assert done.exit_code != 0 and "bad.json: no \"rows\" list" in done.output
    import torch
    if not torch.cuda.is_available():
        done = runner.invoke(main, ["bench", "--max-rows", "1", "--out", str(tmp_path)])
        assert done.exit_code != 0 and "no CUDA/ROCm GPU here" in done.output


# ---------------------------------------------------------------- measuring helpers without a GPU
def test_refusal_reason_comes_from_pytorchs_warnings():
    import warnings

    from attnpack.bench.measure import refusal
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("Memory efficient kernel not used because: (Triggered internally at "
                      "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:859.)")
        warnings.warn("For dense inputs, both fused kernels require query, key and value to have "
                      "the same num_heads. Query.sizes(): [2, 8, 256, 64], Key sizes(): [2, 2, 256, 64]"
                      " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:385.)")
    text = refusal(RuntimeError("No available kernel. Aborting execution."), caught)
    assert text == ("Memory efficient kernel not used because: For dense inputs, both fused kernels "
                    "require query, key and value to have the same num_heads. Query.sizes(): "
                    "[2, 8, 256, 64], Key sizes(): [2, 2, 256, 64] No available kernel. Aborting execution.")


def test_cold_start_child_times_the_compile_of_a_kernel_with_no_gpu(tmp_path):
    """The child that times the Triton compile the bundle saves; compiling needs no GPU."""
    from attnpack.bench import dynamic
    kernel = "triton/fwd/bf16-d64-causal/M64_N64_warps4_stages3"
    env = dynamic.child_env({"TRITON_CACHE_DIR": str(tmp_path / "triton")})
    got = dynamic.run_child(["--backend", "triton_compile", "--arch", "sm_90", "--kernel", kernel,
                             "--shape", "1,2,2,64,64,64", "--causal"], env)
    assert got["kernel"] == kernel and got["compile_ms"] > 0, got
    assert list(got["steps_ms"]) == ["fwd"] and got["compile_ms"] == got["steps_ms"]["fwd"]
    # a child that fails hands back its error, never nothing
    got = dynamic.run_child(["--backend", "triton_compile", "--shape", "1,2,2,64,64,64"], env)
    assert "--backend triton_compile needs --kernel" in got["error"]


def test_markdown_says_which_gpu_the_tuning_database_was_measured_on(results):
    """The page's first line names the archive's `tuned_on` (bundle_info), and says so when it
    is not the GPU the bench ran on (an H100 running the H200's database); nothing where the
    bundle info predates the field."""
    bundle = results["environment"].setdefault("bundle", {})
    bundle.setdefault("bundle", {})["tuned_on"] = "NVIDIA H200"
    first = report.render_markdown(results).split("\n")[2]
    assert first.endswith("Its tuning database was measured on NVIDIA H200.")
    results["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    first = report.render_markdown(results).split("\n")[2]
    assert first.endswith("Its tuning database was measured on NVIDIA H200, not on this GPU.")
    # the archive's own entries for the bench's GPU model (tuning.by_gpu), where it has some
    results["environment"]["gpu_entries"] = {"NVIDIA H100 80GB HBM3": 3, "NVIDIA H100 PCIe": 1}
    first = report.render_markdown(results).split("\n")[2]
    assert first.endswith("Its tuning database was measured on NVIDIA H200, not on this GPU, and "
                          "3 entries tuned on this GPU model serve first.")
    results["environment"]["gpu"] = "NVIDIA H100 PCIe"
    assert report.render_markdown(results).split("\n")[2].endswith(
        "not on this GPU, and 1 entry tuned on this GPU model serves first.")
    del bundle["bundle"]["tuned_on"]
    assert "tuning database" not in report.render_markdown(results).split("\n")[2]
