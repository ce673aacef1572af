"""The compiled swap loop's refresh "auto" (solvers.duhl.compiled_swaps): which stale gaps a round
refreshes, and when a round certifies.

The Python loop's rule (solvers.duhl.swaps: ``Certifier``, ``GapMemory.plan``), compiled: a round
refreshes the oldest stale gaps whose data fits what the device reads in the round (its passes over
the visited coordinates and the block's gaps: refresh ratio 1 in RAM), in the order of a cursor that
sweeps the coordinates, and its row is the memory's estimate (certified 0); a round refreshes every
stale gap, a certified row, on a doubling schedule of rounds, when the estimate reaches the
tolerance after the refreshes covered the stale data once, and when no gap is stale. With the same
proofs (solvers.duhl.gap_memory) both loops give the same rows and iterates, bit for bit
(tests/solvers/duhl/test_compiled_swaps.py).

The state is an array ``auto`` (A_SIZE floats), carried between the loop's calls.
"""

import numpy as np

from solvers.duhl.compiled_parts import loop_kernel

# auto[A_ON]: 1 plans (refresh "auto" without the Gram matrix), 0 every round refreshes every stale
# gap; the sweep's cursor; the certifier's wait and next round; the bytes refreshed since the last
# certified row; the last row's gap (certified or the estimate)
A_ON, A_CURSOR, A_WAIT, A_NEXT, A_REFRESHED, A_ESTIMATE = range(6)
A_SIZE = 6


def auto_state(on):
    """A fresh ``auto`` array: the Certifier's start (wait 2, the first scheduled row at round 2)."""
    auto = np.zeros(A_SIZE)
    auto[A_ON], auto[A_WAIT], auto[A_NEXT], auto[A_ESTIMATE] = float(on), 2.0, 2.0, np.inf
    return auto


@loop_kernel(inline="always")
def _bytes(coords, coord_bytes):
    """The data bytes of ``coords``."""
    total = 0
    for j in range(coords.shape[0]):
        total += coord_bytes[coords[j]]
    return total


@loop_kernel(inline="always")
def _full(auto, rnd, stale, coord_bytes, tol_abs):
    """Whether round ``rnd`` refreshes every ``stale`` gap, a certified row (Certifier.due)."""
    if auto[A_ON] == 0.0 or rnd >= auto[A_NEXT] or stale.shape[0] == 0:
        return True
    return auto[A_ESTIMATE] <= tol_abs and auto[A_REFRESHED] >= _bytes(stale, coord_bytes)


@loop_kernel(inline="always")
def _certified(auto, rnd):
    """A certified row at round ``rnd``: the next scheduled one twice as many rounds on."""
    auto[A_REFRESHED] = 0.0
    auto[A_WAIT] *= 2.0
    auto[A_NEXT] = rnd + auto[A_WAIT]


@loop_kernel(inline="always")
def _plan(stale, coord_bytes, budget, auto, todo):
    """GapMemory.plan: the oldest ``stale`` gaps (coordinate order) whose data fits ``budget`` (at
    least one), from the cursor on, wrapping, into ``todo``; their count (``stale`` not empty)."""
    n_stale = stale.shape[0]
    start = np.searchsorted(stale, auto[A_CURSOR])
    used, take = 0, 0
    while take < n_stale:
        i = stale[(start + take) % n_stale]
        if take > 0 and used + coord_bytes[i] > budget:
            break
        used += coord_bytes[i]
        todo[take] = i
        take += 1
    auto[A_CURSOR] = todo[take - 1] + 1
    auto[A_REFRESHED] += used
    return take
