"""Rewrite docs/tuning.md's two generated blocks from the committed database: the summary table
after `<!-- db summary sm_90 -->` (`attnpack db show --summary`) and the listing after
`<!-- db show sm_90 -->` (`attnpack db show`), which tests/cpu/test_tuning_db.py holds equal to
the database. Run after merging tuned entries; the prose around them is written by hand.
    usage: python build_tools/regen_tuning_doc.py [ARCH]        (default sm_90)
"""
from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from attnpack.cli import main
from attnpack.tune.db import load_db, render_show

ROOT = Path(__file__).resolve().parents[1]


def regenerate(doc: str, arch: str, db_path: Path) -> str:
    summary_mark, show_mark = f"<!-- db summary {arch} -->\n", f"<!-- db show {arch} -->\n```\n"
    result = CliRunner().invoke(main, ["db", "show", "--summary", str(db_path)])
    if result.exit_code != 0:
        raise SystemExit(f"attnpack db show --summary {db_path} failed:\n{result.output}")
    head, rest = doc.split(summary_mark, 1)
    doc = head + summary_mark + result.output + "\n" + rest.split("\n\n", 1)[1]
    head, rest = doc.split(show_mark, 1)
    return head + show_mark + render_show(load_db(db_path)) + "```" + rest.split("```", 1)[1]


if __name__ == "__main__":
    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    doc_path = ROOT / "docs" / "tuning.md"
    doc_path.write_text(regenerate(doc_path.read_text(), arch,
                                   ROOT / "aot" / "tuning_db" / f"{arch}.jsonl"))
    print(f"{doc_path}: {arch} blocks regenerated")
