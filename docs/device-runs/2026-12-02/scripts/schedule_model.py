"""A list-scheduling model of a causal backward grid on 132 SMs (one program per SM at a time,
the next program in launch order starting wherever one ends), for bwd_lpt.patch.

A dK/dV program of 128 keys from key block kb visits the GQA group's query heads over the
query tiles of 64 rows from the diagonal on: work ~ gqa * ceil((S - 128 kb) / 64) + 2 (the
+2 stands for its K/V load and epilogue). The model compares the makespan, over the ideal
(total work / 132), of the launch order of a grid (blocks, B*Hkv) (x fastest: every key block
of head 0, then of head 1, ...) with longest first across the grid (bwd_lpt.patch's
(B*Hkv, blocks)).  Run: python3 schedule_model.py
"""
import heapq
import math

SMS = 132


def makespan(works):
    finish = [0.0] * SMS
    heapq.heapify(finish)
    for w in works:
        heapq.heappush(finish, heapq.heappop(finish) + w)
    return max(finish)


def grid(S, B, hkv, gqa, keys=128, rows=64):
    """Works in launch order of grid (blocks, B*Hkv), causal."""
    return [gqa * math.ceil((S - kb * keys) / rows) + 2
            for _ in range(B * hkv) for kb in range(math.ceil(S / keys))]


if __name__ == "__main__":
    print("S, B, Hkv, GQA: makespan / ideal, head by head | longest first")
    for S, B, hkv, gqa in [(8192, 1, 8, 8), (4096, 2, 8, 8), (4096, 4, 8, 8), (2048, 8, 8, 8),
                           (3000, 4, 4, 7), (8192, 2, 4, 7), (8192, 2, 8, 4), (4096, 4, 8, 4),
                           (4096, 4, 16, 1), (8192, 2, 16, 1), (16384, 1, 16, 1)]:
        works = grid(S, B, hkv, gqa)
        ideal = sum(works) / SMS
        print(f"{S:6d} {B:2d} {hkv:3d} {gqa}: {makespan(works) / ideal:.3f} | "
              f"{makespan(sorted(works, reverse=True)) / ideal:.3f}")


def grouped(S, B, hkv, gqa, group=8, keys=128, rows=64):
    """Works in launch order of the same grid read in head groups (bwd._block_and_head,
    fourteenth session): within `group` heads block by block, group after group; a last group
    of fewer heads in the grid's order."""
    blocks, heads = math.ceil(S / keys), B * hkv
    work = lambda kb: gqa * math.ceil((S - kb * keys) / rows) + 2
    order = []
    for first in range(0, heads, group):
        if first + group <= heads:
            order += [work(kb) for kb in range(blocks) for _ in range(group)]
        else:
            order += [work(kb) for _ in range(first, heads) for kb in range(blocks)]
    return order


def grouped_report():
    """python3 -c 'import schedule_model as m; m.grouped_report()': the three orders."""
    print("S, B, Hkv, GQA: makespan / ideal, head by head | longest first | groups of 8")
    for S, B, hkv, gqa in [(8192, 1, 8, 8), (4096, 4, 8, 8), (2048, 8, 8, 8), (3000, 4, 4, 7),
                           (8192, 2, 4, 7), (4096, 4, 8, 4), (2048, 8, 8, 4), (2048, 8, 16, 1),
                           (4096, 4, 32, 1)]:
        works = grid(S, B, hkv, gqa)
        ideal = sum(works) / SMS
        print(f"{S:6d} {B:2d} {hkv:3d} {gqa}: {makespan(works) / ideal:.3f} | "
              f"{makespan(sorted(works, reverse=True)) / ideal:.3f} | "
              f"{makespan(grouped(S, B, hkv, gqa)) / ideal:.3f}")
