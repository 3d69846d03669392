"""The tuning keys behind benchmark rows, each in its row's streams class, as a `--keys` file
for `attnpack tune` (build_tools/tune_keys.sh): a device run then tunes exactly what the bench
measures. With --other-class only the prefill keys whose rows sit in another class than the
one the key is tuned in by default (docs/tuning.md, "Keys in the rows' classes").
    usage: PYTHONPATH=python python3 build_tools/row_keys.py [--other-class] [--dtype bf16]
               [SHAPE_FILE ...] > keys.json      (default: bench/shapes.json and
                                                  bench/model_shapes.json)
"""
from __future__ import annotations

import argparse
import json
import sys

from attnpack.bench.shapes import DEFAULT_SHAPE_FILES, load_shape_file, row_keys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape_files", nargs="*", default=[str(p) for p in DEFAULT_SHAPE_FILES])
    ap.add_argument("--other-class", action="store_true",
                    help="only keys whose rows' class is not their default one")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default=None,
                    help="the rows at this dtype (default: each row's own)")
    args = ap.parse_args(argv)
    shapes = [s.with_dtype(args.dtype) if args.dtype else s
              for path in args.shape_files for s in load_shape_file(path)]
    keys = row_keys(shapes, other_class_only=args.other_class)
    json.dump([k.as_dict() for k in keys], sys.stdout, indent=1)
    print()
    print(f"{len(keys)} keys from {len(shapes)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
