"""The tools that look into single bench rows, without a GPU: attnpack.bench.ncu and
bench/ncu_rows.py (rows chosen from a results.json, ncu's raw CSV read and cut at the marker
kernels, the table), and bench/decode_rows.py's report. The CSV below is written in the layout
of `ncu --page raw --csv --print-units base` (a header, a units row, a row a kernel, ncu's own
lines before them), with the metric names and units Nsight Compute 2025.3 wrote on the H200;
fixtures/bench/ncu_raw_decode_row.csv is the first row of that run (run81), as it came back."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest

from attnpack.bench import ncu

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
           "Block Size", "Grid Size", "Device", "CC", "gpu__time_duration.sum",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
           "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
           "launch__registers_per_thread", "smsp__average_warp_latency_per_inst_issued.ratio",
           "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
           "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"]
UNITS = ["", "", "", "", "", "", "", "", "", "", "", "ns", "%", "%", "%",
         "register/thread", "cycle", "byte", "byte", "inst", "inst", "inst", "inst"]


def kernel_line(i, name, ns, busy, tensor, dram, regs, ld, st, stalls):
    issue = f"{sum(float(s) for s in stalls) + 1:.2f}"  # every stall plus the issuing cycle
    values = [str(i), "4242", "python3", "127.0.0.1", name, "1", "7", "(384, 1, 1)",
              "(132, 1, 1)", "0", "9.0", ns, busy, tensor, dram, regs, issue, ld, st, *stalls]
    return ",".join(f'"{v}"' for v in values)


def raw_csv(kernels) -> str:
    lines = ["==PROF== Connected to process 4242", "==WARNING== unmodified GPU clocks",
             ",".join(f'"{c}"' for c in COLUMNS), ",".join(f'"{u}"' for u in UNITS)]
    return "\n".join(lines + [kernel_line(i, *k) for i, k in enumerate(kernels)]) + "\n"


MARK = ("at::cuda::(anonymous namespace)::spin_kernel(long)", "1,536", "0.1", "0", "0", "16",
        "0", "0", ("0", "0", "0", "1"))
OURS = raw_csv([
    MARK,
    ("attn_fwd_pingpong", "110,880", "37.96", "61.5", "48.46", "168", "0", "0",
     ("2.84", "0.9", "1.2", "0.4")),
    MARK,
    ("attn_fwd_split", "250,000.5", "20.1", "0", "88.8", "96", "1,024", "512",
     ("0.1", "3.5", "0", "0.2")),
    ("attn_fwd_merge", "3,700", "5", "0", "10", "32", "0", "0", ("0", "0.5", "0", "0.1")),
])
THEIRS = raw_csv([
    MARK,
    ("sm90_fprop_wgmma_64x128x128", "100,000", "43.2", "70.1", "50", "168", "0", "0",
     ("1.1", "0.5", "2.0", "0.3")),
    MARK,
    ("sm80_flash_fprop", "245,000", "16", "0", "91.2", "128", "0", "0",
     ("0", "4.0", "0", "0.1")),
])


def _bench_script(name: str):
    """bench/<name>.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results(*rows):
    return {"rows": [{"set": s, "name": n, "op": op, "shape": {"batch": 1},
                      "backends": {"attnpack": {"ms": ours}, "default": {"ms": theirs}}}
                     for s, n, op, ours, theirs in rows]}


def test_rows_below_the_ratio_come_worst_first():
    res = results(("model_shapes", "a", "fwd", 1.0, 0.9), ("model_shapes", "b", "fwd", 1.0, 0.8),
                  ("model_shapes", "c", "fwd", 1.0, 1.1), ("model_shapes", "d", "fwdbwd", 1.0, 0.5),
                  ("shapes", "e", "fwd", 1.0, 0.7))
    res["rows"].append({"set": "model_shapes", "name": "refused", "op": "fwd", "shape": {},
                        "backends": {"attnpack": {"ms": 1.0}, "default": {"refused": "x"}}})
    chosen = ncu.select_rows(res)
    assert [(r["name"], round(r["ratio"], 2)) for r in chosen] == [("b", 0.8), ("a", 0.9)]
    assert [r["name"] for r in ncu.select_rows(res, ("model_shapes", "shapes"), "fwd", 0.95)] == \
        ["e", "b", "a"]


def test_raw_csv_is_cut_into_rows_at_the_markers():
    kernels = ncu.read_raw_csv(OURS)
    assert len(kernels) == 5 and kernels[1]["Kernel Name"] == "attn_fwd_pingpong"
    assert kernels[1]["units"]["gpu__time_duration.sum"] == "ns"
    groups = ncu.split_at_markers(kernels)
    assert [[k["Kernel Name"] for k in g] for g in groups] == \
        [["attn_fwd_pingpong"], ["attn_fwd_split", "attn_fwd_merge"]]
    with pytest.raises(ValueError, match="no ncu raw CSV header"):
        ncu.read_raw_csv("==ERROR== the application returned an error\n")


def test_a_side_sums_its_kernels_and_reads_its_longest_kernels_metrics():
    first, second = ncu.split_at_markers(ncu.read_raw_csv(OURS))
    s = ncu.summarize(first)
    assert s["us"] == pytest.approx(110.88) and s["kernels"] == 1
    assert (s["SM busy %"], s["tensor pipe %"], s["DRAM %"], s["registers"]) == \
        (37.96, 61.5, 48.46, 168)
    assert s["warp cycles per issue"] == pytest.approx(6.34)
    assert s["stalls"] == [("barrier", 2.84), ("math_pipe_throttle", 1.2), ("long_scoreboard", 0.9)]
    s = ncu.summarize(second)
    assert s["us"] == pytest.approx(253.7005) and s["main"] == "attn_fwd_split"
    assert [n for n, _ in s["each"]] == ["attn_fwd_split", "attn_fwd_merge"]
    assert sum(us for _, us in s["each"]) == pytest.approx(s["us"])
    assert s["main_us"] == pytest.approx(250.0005)
    assert s["local bytes"] == 1536 and s["occupancy %"] is None  # not in this CSV
    assert ncu.summarize([]) == {"us": None, "kernels": 0}


def test_a_real_ncu_csv_reads_as_one_row_of_two_kernels():
    """run81's first row (Llama-3.2-1B decode B64 Sk4096), as Nsight Compute 2025.3 wrote it:
    the split-KV kernel and its combine after the marker, every table column found."""
    text = (ROOT / "tests/cpu/fixtures/bench/ncu_raw_decode_row.csv").read_text()
    (row,) = ncu.split_at_markers(ncu.read_raw_csv(text))
    assert [k["Kernel Name"] for k in row] == ["attn_fwd_decode_split", "attn_fwd_decode_combine"]
    s = ncu.summarize(row)
    assert s["us"] == pytest.approx(148.352 + 6.752) and s["main_us"] == pytest.approx(148.352)
    assert s["main"] == "attn_fwd_decode_split"
    memory = {"L2 hit %", "DRAM bytes"}  # MemoryWorkloadAnalysis's: not collected there
    assert all(s[col] is not None for col in ncu.PATTERNS if col not in memory), s
    assert all(s[col] is None for col in memory)
    split = {**row[0], "lts__t_sector_hit_rate.pct": "61.5", "dram__bytes_read.sum": "1000",
             "dram__bytes_write.sum": "24"}
    with_memory = ncu.summarize([split, row[1]])
    assert with_memory["L2 hit %"] == 61.5 and with_memory["DRAM bytes"] == 1024
    assert s["registers"] == 124 and s["local bytes"] == 0 and 0 < s["XU pipe %"] < 100
    assert 0 < s["DRAM %"] < 100 and s["warp cycles per issue"] > 1
    assert s["stalls"][0][0] == "short_scoreboard"


def test_table_puts_both_sides_of_each_row_together(tmp_path):
    manifest = [{"name": "Llama B1 S8192", "ratio": 0.913, "served": ["gluon/fwd/x"]},
                {"name": "Qwen decode", "ratio": 0.93, "served": ["triton/fwd/s", "triton/fwd/m"]}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in manifest))
    (tmp_path / "ours.csv").write_text(OURS)
    (tmp_path / "theirs.csv").write_text(THEIRS)
    ncu_rows = _bench_script("ncu_rows")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ncu_rows.main(["table", "--manifest", str(tmp_path / "m.jsonl"), "--ours",
                       str(tmp_path / "ours.csv"), "--theirs", str(tmp_path / "theirs.csv")])
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 + 4
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert cells[0][:7] == ["Llama B1 S8192", "0.91x", "attnpack", "1", "110.9", "gluon/fwd/x",
                            "38.0"]
    assert cells[1][:6] == ["", "", "default", "1", "100", "sm90_fprop_wgmma_64x128x128"]
    assert cells[1][-2] == "math_pipe_throttle 2.0, barrier 1.1, long_scoreboard 0.5"
    assert cells[0][-1] == "attn_fwd_pingpong 110.9"
    assert cells[2][-1] == "attn_fwd_split 250.0, attn_fwd_merge 3.7"
    assert cells[2][5] == "triton/fwd/s + triton/fwd/m" and cells[2][10] == "96"
    assert cells[3][4] == "245" and cells[3][8] == "91.2"


def test_run_lists_its_rows_without_a_gpu_and_asks_for_what_it_needs(tmp_path, capsys):
    ncu_rows = _bench_script("ncu_rows")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results(("model_shapes", "a", "fwd", 1.0, 0.9),
                                       ("shapes", "b", "fwd", 2.0, 1.0),
                                       ("model_shapes", "c", "fwd", 1.0, 1.2))))
    ncu_rows.main(["run", "--results", str(path), "--list", "--sets", "model_shapes", "shapes"])
    assert capsys.readouterr().out == "0.500 shapes b\n0.900 model_shapes a\n"
    with pytest.raises(SystemExit):
        ncu_rows.main(["run", "--results", str(path), "--backend", "default"])
    assert "run needs --backend and --manifest (or --list)" in capsys.readouterr().err


def test_decode_rows_prints_the_picked_and_the_fastest_kernel(capsys):
    """bench/decode_rows.py's report line (the measuring needs a GPU)."""
    decode_rows = _bench_script("decode_rows")
    row = {"name": "Llama-3.2-1B decode B64 Sk4096", "streams": 512,
           "picked": "triton/fwd/bf16-d64-full/decode1_split512",
           "times_us": {"triton/fwd/bf16-d64-full/decode1_split512": 158.8,
                        "triton/fwd/bf16-d64-full/decode1": 132.0},
           "natives_us": {"cudnn": 132.2}, "wrong": {"gluon/fwd/x": "error 0.5"}}
    decode_rows.print_row(row)
    out = capsys.readouterr().out
    assert "512 streams | picked decode1_split512 158.8 us | fastest decode1 132.0 us" in out
    assert "(1.203x the picked one's speed)" in out and "fastest/cuDNN 1.002x" in out
    assert "wrong or refused: {'gluon/fwd/x': 'error 0.5'}" in out
