"""Programmatic dependent launch: PTX `griddepcontrol` for the family's kernels, which Gluon
3.6 has no op for.

The runtime launches every kernel of this family with CUDA's programmatic stream
serialization (the launch spec's `pdl`, set from Triton's `launch_pdl` option in family.py).
Such a grid may start before the kernel ahead of it in the stream has finished: its blocks can
be resident and set up while the other's last blocks drain. So every kernel here calls
`wait_for_previous` before it touches global memory, read or write: the wait returns once the
grid ahead has completed and its writes are visible. A buffer this kernel writes may be one the
grid ahead still reads (the caching allocator hands memory on), so writes wait too. Launched
without the attribute, the wait returns at once. One kernel waits late:
bwd.attn_bwd_dq_convert_ready reads what the dK/dV programs ahead of it publish on per-tile
counters as it arrives (those programs waited for the grids before them), and only one of its
programs waits for the dK/dV grid, at its end.

`allow_dependents` (after the wait) lets the next grid in the stream start its blocks as soon
as every block of this one has started: those blocks then only wait for this grid to end.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def wait_for_previous():
    """Block until the grid ahead in the stream has completed and its memory is visible."""
    gl.inline_asm_elementwise("griddepcontrol.wait;\n\tmov.b32 $0, 0;", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def allow_dependents():
    """Let the next grid in the stream launch once every block of this one has called this."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents;\n\tmov.b32 $0, 0;", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def enter():
    """What every kernel of the family does first: wait, then let the next grid launch."""
    wait_for_previous()
    allow_dependents()
