"""`attnpack bench` on a GPU, small: two tiny shapes, a short request stream and the cold starts.

Checks that every row was timed on every backend that accepts it (positive times), that
attnpack's rows name the kernel that served them (from attnpack.torch.stats()), and that the
report, CSV, markdown (and plots, with matplotlib) come out of the recorded run. Needs the
extension and a bundle for this GPU (build_tools/run_gpu_tests.sh sets ATTNPACK_TORCH_LIB,
ATTNPACK_BUNDLE_DIR, ATTNPACK_RUNTIME_LIB). About a minute, most of it in the fresh processes
of the cold starts.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import attnpack.torch as attnpack_torch  # noqa: E402
from attnpack.bench import command, report  # noqa: E402
from attnpack.torch import _build, _extension  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHAPES = [
    {"name": "tiny GQA causal", "batch": 2, "heads_q": 8, "heads_kv": 2, "seqlen_q": 256,
     "seqlen_k": 256, "head_dim": 64, "causal": True, "dtype": "bf16"},
    {"name": "tiny full d128", "batch": 1, "heads_q": 4, "heads_kv": 4, "seqlen_q": 300,
     "seqlen_k": 300, "head_dim": 128, "causal": False, "dtype": "bf16"},
]


@pytest.fixture(scope="module", autouse=True)
def extension():
    """The built extension (run_gpu_tests.sh builds it); built here if it is missing."""
    try:
        ext = _extension.load()
    except _extension.ExtensionError:
        lib = _build.build(REPO / "build-gpu" / "torch-tests", copy_to_package=False)
        os.environ["ATTNPACK_TORCH_LIB"] = str(lib)
        ext = _extension.load()
    info = ext.bundle_info(torch.cuda.current_device())
    assert info["ok"], f"no bundle for this GPU: {info}"
    yield ext
    attnpack_torch.disable()


@pytest.fixture(scope="module")
def shape_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("shapes") / "tiny.json"
    path.write_text(json.dumps({"about": "two tiny shapes for the smoke test", "shapes": SHAPES}))
    return path


def measure(shape_file, dynamic: bool):
    return command.measure([shape_file], "fwd,fwdbwd", None, "attnpack,default,flash,efficient",
                           None, None, reps=5, warmup=2, dynamic=dynamic, requests=6,
                           new_lengths=2, cold=dynamic, seed=1,
                           progress=lambda n, label: (lambda k: None))


def test_rows_have_a_served_kernel_and_positive_times(shape_file, tmp_path):
    results = measure(shape_file, dynamic=False)
    assert [(r["name"], r["op"]) for r in results["rows"]] == [
        ("tiny GQA causal", "fwd"), ("tiny GQA causal", "fwdbwd"),
        ("tiny full d128", "fwd"), ("tiny full d128", "fwdbwd")]
    assert results["matmul"]["tflops"] > 50
    for row in results["rows"]:
        backends = row["backends"]
        for name in ("attnpack", "default", "flash"):
            assert backends[name]["ms"] > 0 and backends[name]["reps"] == 5, (row["name"], name)
        if row["shape"]["heads_q"] != row["shape"]["heads_kv"]:
            assert "error" in backends["efficient"]  # PyTorch's efficient op takes no GQA
        else:
            assert backends["efficient"]["ms"] > 0
        served = row["served"]
        assert served["status"] == "served", served
        ops = {name.split("/")[1] for name in served["kernels"]}
        assert ops == ({"fwd"} if row["op"] == "fwd" else {"fwd", "bwd"})
        # the stats count every attnpack call of the op: its first (checking) call, the
        # warm-up and the reps, each served
        assert all(n == 1 + 2 + 5 for n in served["kernels"].values()), served
        # the backends took turns call by call: each keeps its two halves' medians
        assert all(len(backends[name]["half_ms"]) == 2 for name in ("attnpack", "default"))
    assert results["settings"]["turn_calls"] == 1 and results["settings"]["lead_cycles"] > 0
    analysis = report.analyze(results)
    assert all(d["vs_default"] > 0 and d["tflops"]["attnpack"] > 0 for d in analysis["rows"])
    written = report.write_outputs(results, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "tiny GQA causal" in md and torch.cuda.get_device_name() in md
    assert "results" in written and "csv" in written


def test_dynamic_report_and_cold_start(shape_file, tmp_path):
    results = measure(shape_file, dynamic=True)
    dyn = results["dynamic"]
    stream = dyn["stream"]
    assert len(stream["lengths"]) == 6 and all(64 <= n <= 4096 for n in stream["lengths"])
    for name in ("attnpack", "default", "flash"):
        assert all(ms > 0 for ms in stream["backends"][name]["latency_ms"])
        assert all(ms > 0 for ms in dyn["new_lengths"][name]["first_ms"])
    assert stream["backends"]["attnpack"]["kernels"] and not stream["backends"]["attnpack"]["fallbacks"]
    cold = dyn["cold_start"]
    assert cold["attnpack"]["first_call_ms"] > 0 and cold["attnpack"]["kernels"], cold["attnpack"]
    assert cold["default"]["first_call_ms"] > 0 and cold["flash"]["first_call_ms"] > 0
    assert cold["triton_compile"].get("compile_ms", 0) > 0, cold["triton_compile"]
    jit = cold["triton_jit"]
    assert jit.get("first_call_ms", 0) > 0 or "TMA descriptors" in jit.get("error", ""), jit
    summary = report.analyze(results)["dynamic"]
    assert summary["stream"]["attnpack"]["p99_ms"] >= summary["stream"]["attnpack"]["p50_ms"] > 0
    report.write_outputs(results, tmp_path, plots=False)
    assert "Cold start" in (tmp_path / "report.md").read_text()


def test_command_line_run_writes_the_report(shape_file, tmp_path):
    """`attnpack bench` as the lead runs it, in its own process, small."""
    import subprocess
    import sys
    out = tmp_path / "bench"
    done = subprocess.run([sys.executable, "-m", "attnpack.cli", "bench", "--shapes", str(shape_file),
                           "--ops", "fwd", "--reps", "5", "--warmup", "2", "--no-dynamic",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "python") + os.pathsep
                               + os.environ.get("PYTHONPATH", "")})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results["rows"]] == ["tiny GQA causal", "tiny full d128"]
    assert all(r["served"]["status"] == "served" for r in results["rows"])
    assert results["environment"]["gpu"] == torch.cuda.get_device_name()
    assert "| tiny GQA causal |" in done.stdout and (out / "report.md").is_file()


def test_clocks_script_reports_clock_and_cycles_per_regime(shape_file):
    """bench/clocks.py, small: every (regime, backend, turn) once, with a clock an H100/H200
    can run at (0.5-2.5 GHz) and cycles = time x clock."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(REPO / "bench" / "clocks.py"), "--shapes",
                           str(shape_file), "--only", "tiny full d128", "--reps", "3",
                           "--seconds", "0.05", "--probe-every", "2", "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "python") + os.pathsep
                               + os.environ.get("PYTHONPATH", "")})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    turns = ("attnpack", "default", "default", "attnpack")
    assert [(r["regime"], r["backend"]) for r in rows] == [
        (g, b) for g in ("bench", "sustained") for b in turns]
    for r in rows:
        assert r["ms"] > 0 and 0.5 < r["ghz"] < 2.5, r
        assert abs(r["mcycles"] - r["ms"] * r["ghz"]) <= 0.25 * r["mcycles"], r
