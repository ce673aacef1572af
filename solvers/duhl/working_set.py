"""The all-resident loop's working set (solvers.duhl.inmemory): how it grows (the Lasso's, as
celer's and skglm's), whether it changed, and when the next global gap pass is due without one."""

import numpy as np
from numba import njit


@njit(nogil=True)
def _grow_cap(work, n_work, a, gaps, least):
    """celer's and skglm's growing working set: keep every coordinate of ``work[:n_work]``
    that is non-zero, and of the rest the largest gaps, up to max(least, 2 x non-zeros) in
    all, when that is at most a quarter of all n coordinates (on w8a's Lasso, a third of
    the features in the support, the growth's extra global passes cost more than they
    saved). Returns the new size (the kept coordinates first, in their order)."""
    nnz = 0
    for k in range(n_work):
        if a[work[k]] != 0.0:
            nnz += 1
    size = max(least, 2 * nnz)
    if n_work <= size or 4 * size > a.shape[0]:
        return n_work
    zeros = np.empty(n_work - nnz)
    m = 0
    for k in range(n_work):
        if a[work[k]] == 0.0:
            zeros[m] = gaps[work[k]]
            m += 1
    room = size - nnz
    threshold = np.partition(zeros, m - room)[m - room]  # the room-th largest gap at 0
    kept = 0
    for k in range(n_work):
        i = work[k]
        if a[i] != 0.0 or (gaps[i] >= threshold and room > 0):
            if a[i] == 0.0:
                room -= 1
            work[kept] = i
            kept += 1
    return kept


@njit(nogil=True)
def _same_set(old, new, n):
    if old.shape[0] != new.shape[0]:
        return False
    member = np.zeros(n, np.bool_)
    for i in old:
        member[i] = True
    for i in new:
        if not member[i]:
            return False
    return True


@njit(nogil=True)
def _plan_next_pass(schedule, rounds, gap, tol_abs):
    """With every coordinate visited, when to pay for the next global gap pass: from the
    last two passes' gaps, the linear rate per round predicts the rounds to the target;
    wait half of them, at most twice the last wait (and 64 rounds), so a run overshoots
    its target by a bounded share of its rounds."""
    last_round, last_gap = schedule[0], schedule[1]
    wait = 1.0
    if 0.0 < gap < last_gap and rounds > last_round:
        per_round = np.log(gap / last_gap) / (rounds - last_round)
        remaining = np.log(max(tol_abs, 1e-300) / gap) / per_round
        wait = min(max(0.5 * remaining, 1.0), 2.0 * (rounds - last_round), 64.0)
    schedule[0], schedule[1], schedule[2] = rounds, gap, rounds + wait
