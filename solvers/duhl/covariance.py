"""Covariance updates for the all-resident Lasso family (glmnet's "covariance mode", scikit-learn's
``precompute=True``): with the Gram matrix G = A A^T of the coordinates (features), a pass over the
working set W keeps each coordinate's dot <A_i, z> up to date from G, |W| flops an update instead of
a read of A_i twice (its dot and its axpy); z catches up with W's moves once a round (one read of
the moved coordinates), so the round's certificate and the next global pass read the data as before.

When it pays is a bet on the rounds to come (:func:`gram_pays`): G costs about ``gram_cost`` entries
of data work to build, and it is built once the rate of the last two certificates predicts at least
GRAM_PAYS times that much data work before the tolerance. w8a's Lasso (49,749 x 300): G in ~13 ms,
about eleven epochs on the data, where 1e-6 took ~27 (47.0 -> 23.1 ms to 1e-6 with G); diabetes: G in
~1 us; a dense Lasso that stops after one epoch never builds it.
"""

import numpy as np
from numba import njit
from numba.extending import overload

from solvers.glm.models import coord_update
from solvers.kernels import cpu

# G is built when the data work the rate predicts to the tolerance is at least this many times its cost
GRAM_PAYS = 2.0
# a pair of a sample's nonzeros in G costs about this many entries of an epoch's work (the sparse
# build's scattered adds: w8a 2.2 ns a pair, an epoch's entry ~1.1 ns), a dense pair 0.15 (BLAS)
PAIR_COST = {True: 2.0, False: 0.15}


def gram_cost(problem):
    """G's estimated cost in entries of data work (an epoch reads each entry twice: its dot and axpy)."""
    A = problem.A
    if problem.sparse:
        per_sample = np.bincount(A.indices, minlength=A.shape[1]).astype(np.float64)  # nonzeros of each sample
        pairs = float((per_sample * (per_sample + 1) / 2).sum())
    else:
        n, m = A.shape
        pairs = m * n * (n + 1) / 2
    return PAIR_COST[bool(problem.sparse)] * pairs


def fits(problem):
    """Whether covariance updates apply: the Lasso family in the primal, G (8 n^2 bytes) at most the data's."""
    n = problem.n_coords
    return not problem.dual_form and not problem.on_disk and 8 * n * n <= int(problem.coord_bytes.sum())


@njit(nogil=True, cache=True)
def _sparse_gram(indptr, indices, data, n):
    """A A^T for A (n x m) given sample-major (CSR of A^T): each sample's outer product of its
    nonzeros, the upper triangle accumulated, then mirrored."""
    G = np.zeros((n, n))
    for r in range(indptr.shape[0] - 1):
        lo, hi = indptr[r], indptr[r + 1]
        for k in range(lo, hi):
            i = indices[k]
            x = np.float64(data[k])
            for e in range(k, hi):
                j = indices[e]
                if j >= i:
                    G[i, j] += x * np.float64(data[e])
                else:
                    G[j, i] += x * np.float64(data[e])
    for i in range(n):
        for j in range(i + 1, n):
            G[j, i] = G[i, j]
    return G


def gram_matrix(problem):
    """G = A A^T of the coordinates (float64, n x n): for sparse data from the samples' nonzeros
    (w8a[20000], 300 features: 7 ms with the transpose, scipy's A @ A.T 21 ms), for dense data BLAS."""
    A = problem.A
    if problem.sparse:
        T = A.T.tocsr()
        return _sparse_gram(T.indptr, T.indices, T.data, problem.n_coords)
    A64 = np.asarray(A, dtype=np.float64)
    return A64 @ A64.T


@njit(nogil=True, cache=True)
def gram_pays(g_cost, schedule, rounds, gap, tol_abs, round_work):
    """Whether G pays now: the rate between the last certificate (round schedule[0], gap schedule[1])
    and this one predicts rounds to ``tol_abs`` whose data work (``round_work`` entries each) is at
    least GRAM_PAYS times ``g_cost``."""
    last_round, last_gap = schedule[0], schedule[1]
    if g_cost <= 0.0 or not (0.0 < gap < last_gap) or rounds <= last_round:
        return False
    per_round = np.log(gap / last_gap) / (rounds - last_round)
    left = np.log(max(tol_abs, 1e-300) / gap) / per_round
    return left * round_work >= GRAM_PAYS * g_cost


def _csr(D):
    """Whether the (typed) data D is a CSR triple (indptr, indices, data), not (rows,)."""
    return len(getattr(D, "types", ())) == 3 or getattr(D, "count", 0) == 3


def _entries(D, i):
    """Entries of coordinate i in the data D (a CSR triple or (rows,))."""


@overload(_entries)
def _entries_for(D, i):
    if _csr(D):
        return lambda D, i: D[0][i + 1] - D[0][i]
    return lambda D, i: D[0].shape[1]


def _add(D, i, cd, z):
    """z += cd * A_i (a CSR triple or (rows,))."""


@overload(_add)
def _add_for(D, i, cd, z):
    if _csr(D):
        return lambda D, i, cd, z: cpu.sparse_axpy(D[0], D[1], D[2], i, cd, z)

    def dense(D, i, cd, z):
        rows = D[0]
        for k in range(rows.shape[1]):
            z[k] += cd * rows[i, k]
    return dense


@njit(nogil=True, inline="always")
def work_entries(D, work):
    """The working set's entries: a pass's reads of its data."""
    total = 0
    for i in work:
        total += _entries(D, i)
    return total


@njit(nogil=True, inline="always")
def cov_epoch(G, row_coord, order, work, a, off, mu, sqnorm, c, theta, dots, n_samples):
    """A pass over the rows ``order`` (coordinates row_coord[order]) from the dots <A_i, z> of the
    coordinates ``work``, kept up to date by G: the kernels' exact coordinate update, without reading
    the data (the same updates in the same order as an epoch on it, up to rounding). Returns the updates."""
    for p in order:
        i = row_coord[p]
        ai = a[i]
        x = coord_update(theta, ai, dots[i] - c * off[0] * n_samples * mu[i], c * sqnorm[i])
        d = x - ai
        if d != 0.0:
            cd = c * d
            for j in work:
                dots[j] += cd * G[i, j]
            off[0] += d * mu[i]
            a[i] = x
    return order.shape[0]


@njit(nogil=True, inline="always")
def catch_up(D, work, a, a_ref, z, c):
    """z moved by the working set's moves since ``a_ref`` (then a_ref = a there)."""
    for i in work:
        d = a[i] - a_ref[i]
        if d != 0.0:
            _add(D, i, c * d, z)
            a_ref[i] = a[i]
