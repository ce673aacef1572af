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

from solvers.duhl.compiled_parts import _row, loop_kernel
from solvers.duhl.gram import _gram_due, _round_certify

# auto[A_ON]: 1 plans (refresh "auto" without the Gram matrix), 0 every round refreshes every stale
# gap; the sweep's cursor; the certifier's wait and next round; the bytes refreshed since the last
# certified row; the last row's gap (certified or the estimate); the bytes the last round's device read
A_ON, A_CURSOR, A_WAIT, A_NEXT, A_REFRESHED, A_ESTIMATE, A_BUDGET = range(7)  # (the next round's plan)
A_SIZE = 7


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


@loop_kernel(inline="always")
def _start_row(rnd, A, G, everyone, stale, fresh, a, z, off, model, gaps, s, counters, gram_dots, out_g, out_s,
               tol_abs, auto, coord_bytes, scratch, proofs, rows, resident):
    """Round ``rnd``'s start state certified (solvers.duhl.compiled_swaps): the ``stale`` gaps
    refreshed, all of them (with the block's, its certificate) or refresh "auto"'s plan (the oldest
    that fit auto[A_BUDGET]: a row of the memory's estimate), then its row. ``model`` = (mu, c, b,
    theta, tight, l1, carry_dual), ``gram_dots`` = (dots, a_ref, zero_off, gstate), ``proofs`` =
    (proving, path, at), ``rows`` = (history, iterates): tuples, as a call of 30 arguments or more
    compiles to one with *args, which Numba cannot inline. Returns (the gap, whether it is certified)."""
    mu, c, b, theta, tight, l1, carry_dual = model
    dots, a_ref, zero_off, gstate = gram_dots
    proving, path, at = proofs
    history, iterates = rows
    full, todo = True, stale
    if auto[A_ON] == 1.0:
        full = _full(auto, rnd, todo, coord_bytes, tol_abs)
        todo = todo if full else scratch[: _plan(todo, coord_bytes, auto[A_BUDGET], auto, scratch)]
    for j in range(todo.shape[0] if proving else 0):  # refreshed at u's path now
        at[todo[j], 0], at[todo[j], 1] = path[0], path[1]
    carried, counters[7] = counters[7], counters[7] if full else -np.inf  # an estimate: its own dual point
    primal, dual, gap = _round_certify(A, G, everyone, todo, fresh, a, z, off, mu, c, b, theta, tight, l1, carry_dual,
                                       gaps, s, counters, dots, a_ref, zero_off, gstate, out_g, out_s, tol_abs)
    counters[7] = counters[7] if full else carried  # ... and it never feeds the best dual value
    if gap < np.inf:  # a row (with G, not every round: gram.ROWS_EVERY)
        _row(history, iterates, counters, a, primal, dual, gap, rnd - 1, np.sum(resident), full)
        _gram_due(gstate, rnd, gap, tol_abs)
        auto[A_ESTIMATE] = gap
    if full and auto[A_ON] == 1.0:
        _certified(auto, rnd)
    return gap, full
