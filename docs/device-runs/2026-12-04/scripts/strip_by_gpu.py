"""Prepared in the thirty-seventh session (runEW.sh): the archive SRC re-packed into the folder
DST without its tuning map's `by_gpu`, so that every device of the arch gets the arch-wide
entries: the A/B baseline for a GPU model's own entries.
    usage: python3 strip_by_gpu.py SRC.apk DST_DIR"""
import sys
from pathlib import Path

from attnpack.archive import read_archive
from attnpack.archive.writer import Image, write_archive

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
ar = read_archive(src)
tuning = {k: v for k, v in ar.index["tuning"].items() if k != "by_gpu"}
images = [Image(r["kind"], r["symbol"], ar.image(i)) for i, r in enumerate(ar.index["images"])]
dst.mkdir(parents=True, exist_ok=True)
out = write_archive(dst / src.name, arch=ar.arch, target=ar.target,
                    bundle_version=ar.meta["bundle_version"], compilers=ar.meta["compilers"],
                    images=images, kernels=ar.kernels, selection=ar.index["selection"],
                    families=ar.index["families"], tuning=tuning)
print(f"{out}: {len(ar.index['tuning'].get('by_gpu', []))} by_gpu list(s) dropped")
