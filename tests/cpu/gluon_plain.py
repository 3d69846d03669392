"""Run a Gluon kernel module's integer helpers as plain Python on the CPU.

The helpers that turn program ids into work (fwd._one_tile_unit, fwd._tile, bwd._block_and_head,
grid.grouped_block_and_head) are integer arithmetic on `gl`'s program ids and a few of its
functions. A test takes the module as the family loader imported it (`kernel_module`) and, for
each program of a grid in launch order (`launch_order`), calls a helper's `.fn` with a
`GridProgram` in place of `gl`.
"""
import sys
from pathlib import Path

from attnpack.family import kernels_root, load_families


def kernel_module(name: str):
    """aot/kernels/gluon_attn/<name>.py as the family loader imported it."""
    load_families()
    path = (kernels_root() / "gluon_attn" / f"{name}.py").resolve()
    return next(m for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and Path(m.__file__).resolve() == path)


class GridProgram:
    """gl's program ids, `where` and `minimum` for one program (x, y) of an (nx, ny) grid."""
    where = staticmethod(lambda condition, a, b: a if condition else b)
    minimum = staticmethod(min)

    def __init__(self, x, y, nx, ny):
        self.ids, self.sizes = (x, y), (nx, ny)

    def program_id(self, axis):
        return self.ids[axis]

    def num_programs(self, axis):
        return self.sizes[axis]


def launch_order(monkeypatch, module, nx: int, ny: int):
    """(x, y) of an (nx, ny) grid's programs in the order the GPU starts them, x fastest, with
    `module` (and grid.py, whose grouped_block_and_head it calls, as plain Python too) seeing
    program (x, y) through a GridProgram in place of `gl` while the caller runs its helpers."""
    grid = kernel_module("grid")
    monkeypatch.setattr(grid, "HEAD_GROUP", grid.HEAD_GROUP.value)
    monkeypatch.setattr(module, "grouped_block_and_head", grid.grouped_block_and_head.fn)
    for linear in range(nx * ny):
        y, x = divmod(linear, nx)
        program = GridProgram(x, y, nx, ny)
        monkeypatch.setattr(module, "gl", program)
        monkeypatch.setattr(grid, "gl", program)
        yield x, y
