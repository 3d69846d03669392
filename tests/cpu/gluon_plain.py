"""Run a Gluon kernel module's integer helpers as plain Python on the CPU.

The helpers that turn program ids into work (fwd._one_tile_unit, fwd._tile, bwd._block_and_head)
are integer arithmetic on `gl`'s program ids and a few of its functions. A test takes the
module as the family loader imported it (`kernel_module`), puts a `GridProgram` in place of its
`gl` and calls a helper's `.fn` once per program of a grid, in launch order.
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
    """gl's program ids and `where` for one program (x, y) of an (nx, ny) grid."""
    where = staticmethod(lambda condition, a, b: a if condition else b)

    def __init__(self, x, y, nx, ny):
        self.ids, self.sizes = (x, y), (nx, ny)

    def program_id(self, axis):
        return self.ids[axis]

    def num_programs(self, axis):
        return self.sizes[axis]


def launch_order(nx: int, ny: int):
    """(x, y) of an (nx, ny) grid's programs in the order the GPU starts them: x fastest."""
    for linear in range(nx * ny):
        y, x = divmod(linear, nx)
        yield x, y
