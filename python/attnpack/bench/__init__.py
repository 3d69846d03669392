"""`attnpack bench`: is the bundle faster on this GPU, by how much, and which kernel ran.

    shapes.py   shape files (bench/shapes.json, bench/model_shapes.json), row names, FLOPs
    timing.py   GPU timing shared with bench/*.py: L2 flush, CUDA events, median; matmul ceiling
    measure.py  one shape through plain F.sdpa: attnpack, PyTorch's default, flash, efficient
    served.py   which kernel served a row, from attnpack.torch.stats()
    dynamic.py  random-length request stream, first calls at new lengths, cold start
    cold.py     the child process of one cold start (python -m attnpack.bench.cold)
    run.py      the whole run on a GPU -> one results dict (results.json)
    report.py   results -> ratios, summary, tables, CSV, markdown, --compare (no torch, no GPU)
    plots.py    results -> PNG plots (matplotlib, Agg)

Importing this package imports neither torch nor matplotlib; the GPU modules do.
"""
