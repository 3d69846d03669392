"""The `attnpack` command line. Thin: it parses, then calls the library."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from attnpack import __version__
from attnpack.targets import TARGETS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="attnpack")
def main():
    """attnpack: precompiled attention bundles.

    \b
    Example:
      attnpack build --arch sm_90 --arch gfx950 -o out/
      attnpack verify out/attnpack-0.1.0-sm_90.apk
    """


def _progress(total: int, label: str):
    bar = click.progressbar(length=total, label=label, show_eta=True, show_pos=True,
                            file=sys.stderr)
    bar.__enter__()
    state = {"done": 0}

    def advance(n: int) -> None:
        state["done"] += n
        bar.update(n)
        if state["done"] >= total:
            bar.__exit__(None, None, None)
    if total == 0:
        bar.__exit__(None, None, None)
    return advance


@main.command()
@click.option("--arch", "archs", multiple=True, required=True,
              type=click.Choice(list(TARGETS)), help="Target GPU arch; repeat for several.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("out"), show_default=True, help="Folder for the archives.")
@click.option("--all", "all_variants", is_flag=True,
              help="Build the whole declared variant space (a tuning archive).")
@click.option("--jobs", "-j", type=int, default=os.cpu_count() or 1, show_default=True,
              help="Parallel compiler processes.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Per-kernel compile timeout in seconds; a timeout fails the build.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Compile cache (default $ATTNPACK_CACHE_DIR or ~/.cache/attnpack).")
@click.option("--no-cache", is_flag=True, help="Compile everything afresh.")
@click.option("--family", "families", multiple=True, help="Only these families.")
@click.option("--op", "ops", multiple=True, type=click.Choice(["fwd", "bwd"]), help="Only these ops.")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp16", "bf16"]),
              help="Only these dtypes.")
@click.option("--head-dim", "head_dims", multiple=True, type=int, help="Only these head dims.")
@click.option("--kernels", "kernels_dir", default=None,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The family folders to build from (default: this checkout's aot/kernels); "
                   "the tuning database is read from tuning_db/ beside it. For an A/B: the "
                   "same kernel names built from a copy of aot/ holding an older kernel.")
def build(archs, out_dir, all_variants, jobs, timeout, cache_dir, no_cache, families, ops,
          dtypes, head_dims, kernels_dir):
    """Compile kernel families into one archive per arch (no GPU needed).

    \b
    Example:
      attnpack build --arch sm_90 --arch gfx942 --arch gfx950 -o out/
      attnpack build --arch sm_90 --all -o tuning/        # every declared variant
      attnpack build --arch sm_90 --all --family gluon --kernels /tmp/old-aot/kernels -o old/
    """
    from attnpack.builder import BuildError, BuildRequest, build_archives
    from attnpack.builder.build import default_cache_dir
    from attnpack.builder.compile import CompileFailure
    req = BuildRequest(archs=tuple(dict.fromkeys(archs)), out_dir=out_dir,
                       all_variants=all_variants, jobs=jobs, timeout=timeout,
                       cache_dir=None if no_cache else (cache_dir or default_cache_dir()),
                       families=families, ops=ops, dtypes=dtypes, head_dims=head_dims,
                       kernels_root=kernels_dir)
    start = time.monotonic()
    try:
        paths = build_archives(req, progress=_progress)
    except (BuildError, CompileFailure, ValueError) as e:
        raise click.ClickException(str(e))
    took = time.monotonic() - start
    for p in paths:
        click.echo(f"wrote {p} ({p.stat().st_size / 1024:.0f} KiB)")
    click.echo(f"{req.stats.compiled} compiled, {req.stats.cache_hits} from cache, "
               f"{took:.1f} s")


@main.command()
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--notice", is_flag=True,
              help="Print the notices (licence attributions) the archive's families carry.")
def inspect(archive, as_json, notice):
    """List the kernels of an archive per family/op/key, with sizes and compression.

    \b
    Example:
      attnpack inspect out/attnpack-0.1.0-sm_90.apk --json
      attnpack inspect out/attnpack-0.1.0-gfx942.apk --notice
    """
    from attnpack.archive import ArchiveError, read_archive
    from attnpack.archive.inspect import render, summarize
    try:
        summary = summarize(read_archive(archive))
    except ArchiveError as e:
        raise click.ClickException(str(e))
    if notice:
        notices = {n: f["notice"] for n, f in sorted(summary["families"].items()) if "notice" in f}
        click.echo(json.dumps(notices, indent=1) if as_json else
                   "\n".join(f"== family {n} ==\n{text}" for n, text in notices.items())
                   or "no family of this archive carries a notice")
        return
    if as_json:
        click.echo(json.dumps(summary, indent=1, default=lambda b: b.hex()))
    else:
        click.echo(render(summary))


@main.command()
@click.argument("archives", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--strict", is_flag=True,
              help="Warnings fail too (register spills that do not reach memory on AMD, "
                   "stack frames on sm_90).")
def verify(archives, as_json, strict):
    """Check header, versions, index, hashes and every image's ELF against the target.

    Exits non-zero and names each defect.

    \b
    Example:
      attnpack verify out/*.apk
    """
    from attnpack.archive.verify import verify_archive
    report, failed = [], False
    for path in archives:
        ar, problems, warnings = verify_archive(path)
        failed |= bool(problems) or (strict and bool(warnings))
        report.append({"file": str(path), "ok": not problems, "problems": problems,
                       "warnings": warnings, "kernels": len(ar.kernels) if ar else 0,
                       "images": len(ar.index["images"]) if ar else 0})
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        for r in report:
            for w in r["warnings"]:
                click.echo(f"warn {w}", err=True)
            for p in r["problems"]:
                click.echo(f"BAD {p}", err=True)
            if r["ok"]:
                click.echo(f"ok  {r['file']}: {r['kernels']} kernels, {r['images']} images verified"
                           + (f", {len(r['warnings'])} warning(s)" if r["warnings"] else ""))
    if failed:
        sys.exit(1)


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 6 or min(shape) < 1:
        raise click.BadParameter(f"{text!r}: expected B,Hq,Hkv,Sq,Sk,D (six positive integers)")
    return shape


@main.command()
@click.option("--arch", required=True, type=click.Choice(list(TARGETS)),
              help="The local GPU's arch; the archive must target it.")
@click.option("--archive", "archive_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A tuning archive with the full variant space (attnpack build --all); "
                   "required unless --list.")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The database to write (resumed if it exists), e.g. "
                   "aot/tuning_db/sm_90.jsonl; required unless --list.")
@click.option("--op", "ops", multiple=True, type=click.Choice(["fwd", "bwd"]))
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp16", "bf16"]))
@click.option("--head-dim", "head_dims", multiple=True, type=int)
@click.option("--gqa", "gqas", multiple=True, type=int, help="GQA classes (Hq/Hkv): 1, 2, 4, 8.")
@click.option("--shapes", "shapes", multiple=True,
              help="Sq,Sk pairs to tune (repeat); default: Sq=Sk over every bucket plus a few Sq!=Sk.")
@click.option("--keys", "keys_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON list of keys {op, dtype, head_dim, causal, gqa, sq, sk}, each with "
                   "an optional streams class.")
@click.option("--rows", "row_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Shape file in bench/shapes.json's format (repeat): tune the keys its rows "
                   "are served by, each in its row's streams class.")
@click.option("--minutes", type=float, default=None,
              help="Start no new key after this many minutes (re-run to go on).")
@click.option("--list", "list_only", is_flag=True,
              help="Print the keys and the shapes each is timed at, then stop (no GPU).")
def tune(arch, archive_path, out_path, ops, dtypes, head_dims, gqas, shapes, keys_file, row_files,
         minutes, list_only):
    """Measure every candidate per key on this GPU and write the winners (needs a GPU).

    Wrong candidates (NaN, or error > 3x the best) are rejected and recorded. Resumable.

    \b
    Example:
      attnpack build --arch sm_90 --all -o tuning/
      attnpack tune --arch sm_90 --archive tuning/attnpack-0.1.0-sm_90.apk \\
                    -o aot/tuning_db/sm_90.jsonl --op fwd --dtype bf16 --head-dim 128
      attnpack tune --arch sm_90 --rows my_model_shapes.json --list
    """
    from attnpack.tune.runner import keys_from_fields, standard_keys, tune as run_tune
    if keys_file or row_files:
        keys = []
        if keys_file:
            keys += [key for fields in json.loads(keys_file.read_text())
                     for key in keys_from_fields(fields)]
        if row_files:
            from attnpack.bench.shapes import ShapeFileError, load_shape_file, row_keys
            try:
                keys += row_keys([s for f in row_files for s in load_shape_file(f)])
            except ShapeFileError as e:
                raise click.ClickException(str(e))
        keys = list(dict.fromkeys(keys))
    else:
        options = {name: tuple(v) for name, v in (("ops", ops), ("dtypes", dtypes),
                                                  ("head_dims", head_dims), ("gqas", gqas)) if v}
        if shapes:
            try:
                options["pairs"] = [tuple(int(x) for x in s.split(",")) for s in shapes]
            except ValueError:
                raise click.BadParameter(f"{shapes}: expected Sq,Sk pairs such as 4096,4096")
        keys = standard_keys(**options)
    if list_only:
        from attnpack.tune.runner import timing_shapes
        for key in keys:
            try:
                timed = ", ".join(f"B={b} Hq={hq} Hkv={hkv} Sq={sq} Sk={sk}"
                                  for b, hq, hkv, sq, sk, _ in timing_shapes(key))
            except ValueError as e:
                timed = f"refused: {e}"
            click.echo(f"{key.text}  timed at {timed}")
        click.echo(f"{len(keys)} keys")
        return
    if archive_path is None or out_path is None:
        raise click.UsageError("--archive and -o/--out are required (unless --list)")
    from attnpack.archive import ArchiveError, read_archive
    try:
        archive_arch = read_archive(archive_path).arch
    except ArchiveError as e:
        raise click.ClickException(str(e))
    if archive_arch != arch:
        raise click.ClickException(f"{archive_path.name} targets {archive_arch}, not {arch}")
    state = {}

    def progress(total):
        bar = click.progressbar(length=total, label="tuning", show_eta=True, show_pos=True,
                                file=sys.stderr, item_show_func=lambda x: x)
        bar.__enter__()
        state["bar"] = bar
        return lambda label: bar.update(1, label)
    try:
        db = run_tune(archive_path, keys, out_path, progress=progress,
                      log=lambda line: click.echo(line, err=True), minutes=minutes)
    except (ValueError, RuntimeError) as e:
        raise click.ClickException(str(e))
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)
    click.echo(f"{out_path}: {len(db.entries)} entries")


@main.group()
def db():
    """Read, compare and query tuning databases (aot/tuning_db/<arch>.jsonl)."""


def _load_db(path):
    from attnpack.tune.db import DbError, load_db
    try:
        return load_db(path)
    except DbError as e:
        raise click.ClickException(str(e))


@db.command("show")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--summary", is_flag=True,
              help="One markdown row per op, dtype, head dim and causal instead of every entry.")
def db_show(file, as_json, summary):
    """Print every entry: key, winner, its speed and the native baseline.

    \b
    Example:
      attnpack db show aot/tuning_db/sm_90.jsonl
      attnpack db show --summary aot/tuning_db/sm_90.jsonl
    """
    from attnpack.tune.db import render_show, render_summary
    tdb = _load_db(file)
    if summary:
        click.echo(render_summary(tdb), nl=False)
    elif as_json:
        click.echo(json.dumps({"arch": tdb.arch, "provenance": tdb.provenance,
                               "entries": [e for _, e in sorted(tdb.entries.items())]}, indent=1))
    else:
        click.echo(render_show(tdb), nl=False)


@db.command("diff")
@click.argument("old", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def db_diff(old, new, as_json):
    """List every key whose kernel or family changed, with old/new times and the ratio (none
    between entries timed on two GPU models: the row names both).

    \b
    Example:
      attnpack db diff old/sm_90.jsonl aot/tuning_db/sm_90.jsonl
    """
    from attnpack.tune.db import diff_dbs, render_diff
    rows = diff_dbs(_load_db(old), _load_db(new))
    click.echo(json.dumps(rows, indent=1) if as_json else render_diff(rows), nl=as_json)


@db.command("explain")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--shape", required=True, help="B,Hq,Hkv,Sq,Sk,D")
@click.option("--dtype", type=click.Choice(["fp16", "bf16"]), default="bf16", show_default=True)
@click.option("--causal", is_flag=True)
@click.option("--op", type=click.Choice(["fwd", "bwd"]), default="fwd", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--gpu", default=None, metavar="NAME",
              help="On this GPU model (its name as PyTorch reports it): its own entries, "
                   "<arch>/<name>.jsonl beside FILE, serve first where they have the key.")
def db_explain(file, shape, dtype, causal, op, as_json, gpu):
    """Show the bucket a shape falls into and the entry chosen for it.

    \b
    Example:
      attnpack db explain aot/tuning_db/sm_90.jsonl --shape 4,32,8,4000,4000,128 --causal
      attnpack db explain aot/tuning_db/sm_90.jsonl --shape 1,32,4,8192,8192,128 --causal \\
          --op bwd --gpu "NVIDIA H100 80GB HBM3"
    """
    from attnpack.tune.db import gpu_file_name, problem_key, select_on_gpu
    b, hq, hkv, sq, sk, d = _parse_shape(shape)
    tdb = _load_db(file)
    gpu_path = gpu and Path(file).parent / tdb.arch / gpu_file_name(gpu)
    gpu_db = _load_db(gpu_path) if gpu and gpu_path.is_file() else None
    try:
        key = problem_key(op, dtype, d, causal, b, hq, hkv, sq, sk)
    except ValueError as e:
        raise click.ClickException(str(e))
    entry, rule = select_on_gpu(tdb, gpu_db, op, dtype, d, causal, b, hq, hkv, sq, sk)
    if as_json:
        click.echo(json.dumps({"bucket": key.as_dict(), "rule": rule, "entry": entry}, indent=1))
        return
    click.echo(f"shape B={b} Hq={hq} Hkv={hkv} Sq={sq} Sk={sk} D={d} {dtype} "
               f"{'causal' if causal else 'full'} {op}")
    click.echo(f"bucket: {key.text}")
    if gpu:
        click.echo(f"{gpu}'s own entries: {gpu_path if gpu_db else f'none ({gpu_path} absent)'}")
    if entry is None:
        click.echo("no entry for this functional key: the archive's per-functional default serves it")
    else:
        if rule == "tuned":
            origin = "entry: "
        elif rule == "nearest":
            origin = (f"no entry; nearest entry (gqa{entry['gqa']} sq{entry['sq']} "
                      f"sk{entry['sk']} streams{entry['streams']}): ")
        else:  # tuned for the GPU model
            origin = f"{gpu}'s own entry: "
        click.echo(f"{origin}{entry['family']} {entry['kernel']}"
                   + (f", {entry['time_us']:.1f} us" if entry.get("time_us") else ""))


@main.command("explain")
@click.option("--shape", required=True, help="B,Hq,Hkv,Sq,Sk,D")
@click.option("--dtype", type=click.Choice(["fp16", "bf16", "fp32"]), default="bf16", show_default=True)
@click.option("--causal", is_flag=True)
@click.option("--op", type=click.Choice(["fwd", "bwd"]), default="fwd", show_default=True)
@click.option("--dropout", "dropout_p", type=float, default=0.0, show_default=True)
@click.option("--deterministic", is_flag=True, help="As under torch.use_deterministic_algorithms(True).")
@click.option("--device", type=int, default=None, help="CUDA device index (default: the current one).")
@click.option("--archive", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Explain against this archive instead of the GPU's (no GPU needed).")
@click.option("--arch", default=None,
              help="The GPU arch to assume (sm_90, ...); without --archive, the installed "
                   "archive for it (`attnpack locate`), no GPU needed.")
@click.option("--num-sms", type=click.IntRange(1, 100000), default=None,
              help="With --archive: the device's multiprocessor / CU count to explain for "
                   "(kernels may require one: AITER's gfx942 forwards, 304 or 80); default 132.")
@click.option("--gpu-name", default=None, metavar="NAME",
              help="With --archive or --arch: the GPU model to explain for (its name as PyTorch "
                   "reports it, e.g. \"NVIDIA H100 80GB HBM3\"): the archive's entries for it "
                   "serve first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def explain_sdpa(shape, dtype, causal, op, dropout_p, deterministic, device, archive, arch, num_sms,
                 gpu_name, as_json):
    """Which kernel serves an F.sdpa call with attnpack enabled, or why PyTorch's own does.

    \b
    Example:
      attnpack explain --shape 2,32,8,4096,4096,128 --dtype bf16 --causal
      attnpack explain --shape 1,8,8,100,1000,64 --causal --op bwd --archive out/attnpack-0.1.0-sm_90.apk --arch sm_90
      attnpack explain --shape 1,8,8,128,128,64 --arch sm_90      # the installed sm_90 archive
      attnpack explain --shape 2,32,8,4096,4096,128 --causal --arch gfx942 --num-sms 304
      attnpack explain --shape 1,32,4,8192,8192,128 --causal --op bwd --arch sm_90 \\
          --gpu-name "NVIDIA H100 80GB HBM3"
    """
    if arch and not archive:
        archive = _packaged_archive(arch)
    # an archive is explained through the recording driver, which pretends these facts
    if num_sms is not None:
        os.environ["ATTNPACK_RECORDING_NUM_SMS"] = str(num_sms)
    if gpu_name is not None:
        if not archive:
            raise click.ClickException("--gpu-name explains an archive for a GPU model that is "
                                       "not here: name --archive or --arch too")
        os.environ["ATTNPACK_RECORDING_GPU_NAME"] = gpu_name
    try:
        import attnpack.torch as attnpack_torch
        result = attnpack_torch.explain(_parse_shape(shape), dtype, causal, op, dropout_p=dropout_p,
                                        deterministic=deterministic, device=device, archive=archive,
                                        arch=arch)
    except (RuntimeError, ValueError) as e:
        raise click.ClickException(str(e))
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    call = result["call"].split(" ", 1)[1] if result.get("entry") else result["call"]
    click.echo(f"F.sdpa {call} ({op})")
    click.echo(f"aten op:  {result.get('op', 'none (cuDNN or math)')}")
    if result.get("bundle"):
        click.echo(f"archive:  {result['bundle'].get('path')} ({result['bundle'].get('arch')})")
    if result["served"]:
        click.echo(f"kernel:   {result['kernel']} (family {result['family']})")
    else:
        click.echo(f"fallback: PyTorch's own kernel -- {result['reason']}")
    if result.get("runtime"):
        click.echo("\n" + result["runtime"].rstrip())


def _packaged_archive(arch: str) -> str:
    from attnpack import _locate
    found = [p for p in _locate.packaged_archives() if p.name.endswith(f"-{arch}.apk")]
    if len(found) != 1:
        where = _locate.bundle_directory() or "no archive folder (see `attnpack locate`)"
        raise click.ClickException(f"{len(found)} archives for {arch} in {where}; "
                                   "name one with --archive")
    return str(found[0])


@main.command("locate")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def locate(as_json):
    """Where this installation finds libattnpack, the PyTorch extension and the archives
    (override with ATTNPACK_RUNTIME_LIB, ATTNPACK_TORCH_LIB, ATTNPACK_BUNDLE_DIR).

    \b
    Example:
      attnpack locate
      attnpack inspect $(attnpack locate --json | python -c 'import json,sys; print(*json.load(sys.stdin)["archives"])')
    """
    from attnpack import _locate

    def first(candidates):
        return next((str(c) for c in candidates if c.is_file()), None)
    found = {"package": str(_locate.PACKAGE_DIR),
             "runtime": first(_locate.runtime_library_candidates()),
             "torch_extension": first(_locate.torch_library_candidates()),
             "bundle_dir": _locate.bundle_directory() or None,
             "archives": [str(p) for p in _locate.packaged_archives()]}
    if as_json:
        click.echo(json.dumps(found, indent=1))
    else:
        for key, value in found.items():
            if key == "archives":
                value = ", ".join(Path(v).name for v in value) or None
            click.echo(f"{key + ':':17}{value if value else 'not found'}")
    if not (found["runtime"] and found["archives"]):
        sys.exit(1)


@main.command("bench")
@click.option("--shapes", "shape_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Shape file (repeat); default bench/shapes.json and bench/model_shapes.json.")
@click.option("--ops", default="fwd,fwdbwd", show_default=True, help="Any of fwd,bwd,fwdbwd.")
@click.option("--dtype", "dtypes", default=None, help="bf16,fp16 (default: each shape's own).")
@click.option("--backends", default="attnpack,default,flash,efficient", show_default=True)
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Folder for results.json/.csv, report.md and plots "
                                 "[default: bench-out, or beside --report-only's file].")
@click.option("--max-rows", type=int, default=None, help="Only the first N shapes of each file.")
@click.option("--only", default=None, help="Only rows whose name contains this text.")
@click.option("--reps", type=int, default=30, show_default=True, help="Timed calls per backend (median).")
@click.option("--warmup", type=int, default=5, show_default=True, help="Untimed calls first.")
@click.option("--turn-calls", type=int, default=None,
              help="Timed calls a backend makes in one turn before the next backend's; the "
                   "backends take turns in alternating order until each made --reps "
                   "[default: 1, call by call].")
@click.option("--lead-cycles", type=int, default=None,
              help="Cycles the GPU spins after each flush, before a timed call's start "
                   "event, so the host has queued the call by then; 0 for none "
                   "[default: 200000, about 0.1 ms].")
@click.option("--dynamic/--no-dynamic", default=True, show_default=True,
              help="The dynamic-lengths report (request stream, new lengths, cold start).")
@click.option("--requests", type=int, default=200, show_default=True, help="Requests in the stream.")
@click.option("--new-lengths", type=int, default=10, show_default=True,
              help="Never-seen lengths timed per backend.")
@click.option("--cold/--no-cold", default=True, show_default=True,
              help="Cold starts in fresh processes (and the Triton compile of the kernel).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the stream's lengths.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where the markdown report goes [default: OUT/report.md].")
@click.option("--report-only", "results_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Regenerate tables, CSV, plots and markdown from a recorded results.json (no GPU).")
@click.option("--compare", nargs=2, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="OLD.json NEW.json: rows whose serving kernel changed, old and new speed.")
@click.option("--json", "as_json", is_flag=True, help="Print results (or the comparison) as JSON.")
def bench(shape_files, ops, dtypes, backends, out_dir, max_rows, only, reps, warmup, turn_calls,
          lead_cycles, dynamic, requests, new_lengths, cold, seed, no_plots, markdown,
          results_file, compare, as_json):
    """Is the bundle faster on this GPU, by how much, and which kernel served each shape.

    Times plain F.sdpa with attnpack enabled against PyTorch's default, flash and efficient,
    in one process (needs a GPU, the built extension and a bundle: ATTNPACK_TORCH_LIB,
    ATTNPACK_BUNDLE_DIR). Writes results.json, results.csv, report.md and PNG plots.

    \b
    Example:
      attnpack bench --ops fwd,fwdbwd --dtype bf16 --out bench-out/
      attnpack bench --report-only bench-out/results.json --out docs/performance \\
                     --markdown docs/performance.md
      attnpack bench --compare old/results.json bench-out/results.json
    """
    from attnpack.bench import command, report
    from attnpack.bench.shapes import ShapeFileError
    try:
        if compare:
            click.echo(command.compare_files(*compare, as_json), nl=as_json)
            return
        if results_file:
            results, written = command.report_only(results_file, out_dir, not no_plots, markdown)
        else:
            from attnpack.bench.run import BenchError
            try:
                results = command.measure(shape_files, ops, dtypes, backends, max_rows, only, reps,
                                          warmup, dynamic, requests, new_lengths, cold, seed,
                                          progress=_progress, turn_calls=turn_calls,
                                          lead_cycles=lead_cycles)
            except BenchError as e:
                raise click.ClickException(str(e))
            written = report.write_outputs(results, out_dir or Path("bench-out"),
                                           plots=not no_plots, markdown=markdown)
    except (ShapeFileError, report.ResultsError, command.UsageError) as e:
        raise click.ClickException(str(e))
    click.echo(json.dumps(results, indent=1) if as_json else report.render_text(results))
    for kind, path in written.items():
        click.echo(f"{kind}: {path}", err=True)


@db.command("seed")
@click.option("--arch", required=True, type=click.Choice(list(TARGETS)))
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
def db_seed(arch, out_path):
    """Write an `untuned` database for a GPU that cannot be measured here: every key of the
    standard grid gets its family's documented default. `attnpack tune` replaces it.

    \b
    Example:
      attnpack db seed --arch gfx950 -o aot/tuning_db/gfx950.jsonl
    """
    from attnpack.family import load_families
    from attnpack.tune.db import save_db, seed_untuned
    from attnpack.tune.runner import standard_keys
    tdb = seed_untuned(arch, standard_keys(), load_families())
    save_db(tdb, out_path)
    click.echo(f"{out_path}: {len(tdb.entries)} untuned entries")


@db.command("merge")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The merged database (may be one of FILES).")
@click.option("--min-gain", type=click.FloatRange(min=1.0), default=1.0, show_default=True,
              help="A later entry replaces an earlier one only if its kernel beat the earlier "
                   "entry's kernel, timed in the same run, by this factor (1.01: 1 %).")
@click.option("--mixed-gpus", is_flag=True,
              help="Merge entries timed on different GPU models of the arch (refused without "
                   "it); each kept entry then records its GPU.")
def db_merge(files, out_path, min_gain, mixed_gpus):
    """Merge databases of one arch, later FILES winning per key (a partial re-tune over the
    shipped database), except over an entry `held` by hand (its reason shows in `db show`).
    Entries without `deterministic` get it, and their fastest deterministic candidate, from the
    families' declarations. Entries timed on different GPUs (an H100's re-tune over an H200's
    database) are refused unless --mixed-gpus.

    \b
    Example:
      attnpack db merge aot/tuning_db/sm_90.jsonl retuned_bwd.jsonl -o aot/tuning_db/sm_90.jsonl
      attnpack db merge --min-gain 1.01 aot/tuning_db/sm_90.jsonl retuned.jsonl -o merged.jsonl
    """
    from attnpack.family import declared_variants, load_families
    from attnpack.tune.db import DbError, merge_dbs, record_determinism, save_db
    try:
        merged, held = merge_dbs([_load_db(f) for f in files], min_gain, mixed_gpus)
    except DbError as e:
        raise click.ClickException(str(e))
    declared = declared_variants(merged.arch, load_families())

    def is_deterministic(name):
        if name not in declared:
            raise click.ClickException(f"{name}: no family declares this kernel for {merged.arch}")
        return declared[name].deterministic
    for key, entry in merged.entries.items():
        if "deterministic" not in entry:
            merged.entries[key] = record_determinism(entry, is_deterministic)
    save_db(merged, out_path)
    nondet = sum(1 for e in merged.entries.values() if not e["deterministic"])
    by_hand = sum(1 for k in held if merged.entries[k].get("held"))
    click.echo(f"{out_path}: {len(merged.entries)} entries ({nondet} not deterministic), "
               f"status {merged.provenance['status']}"
               + (f"; {len(held) - by_hand} kept their earlier kernel (gain under {min_gain}x)"
                  if min_gain > 1.0 else "")
               + (f"; {by_hand} held by hand kept theirs" if by_hand else ""))



@db.command("prune")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--against", "base_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The arch-wide database (aot/tuning_db/<arch>.jsonl).")
@click.option("-o", "--out", "out_path", required=True, type=click.Path(path_type=Path))
@click.option("--min-gain", type=float, default=1.0, show_default=True,
              help="Drop an entry whose winner beat the arch-wide kernel, timed in the same run, "
                   "by less than this factor.")
def db_prune(file, base_path, out_path, min_gain):
    """Keep, of a GPU model's own entries (aot/tuning_db/<arch>/<gpu>.jsonl), those that change
    what that GPU gets: drop an entry whose kernel is the arch-wide pick for its key, or (with
    --min-gain) one that beat it by less than that factor on that GPU.

    \b
    Example:
      attnpack db prune aot/tuning_db/sm_90/nvidia-h100-80gb-hbm3.jsonl \\
          --against aot/tuning_db/sm_90.jsonl --min-gain 1.01 \\
          -o aot/tuning_db/sm_90/nvidia-h100-80gb-hbm3.jsonl
    """
    from attnpack.tune.db import prune_against, save_db
    kept, dropped = prune_against(_load_db(file), _load_db(base_path), min_gain)
    for key, reason in dropped:
        click.echo(f"dropped {key.text}: {reason}")
    save_db(kept, out_path)
    click.echo(f"{out_path}: {len(kept.entries)} entries kept, {len(dropped)} dropped")


if __name__ == "__main__":
    main()
