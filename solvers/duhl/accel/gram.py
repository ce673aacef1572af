"""Covariance updates: coordinate descent from the Gram matrix G = A A^T of the coordinates.

For the Lasso family (coordinates = features) with few features, glmnet's "covariance mode" and
scikit-learn's ``precompute=True``: with G, a pass over a working set W keeps each coordinate's
dot <A_i, z> up to date from G (|W| flops an update instead of reading A_i twice: its dot and its
axpy), and z catches up with W's moves once a round (one read of the moved coordinates), so
certificates read the data as before. G costs about :func:`gram_cost` entries of data work, so
building it is a bet on the rounds to come: it pays when the rate of the last two certificates
predicts at least GRAM_PAYS times that much data work before the tolerance (:func:`gram_pays`).

The all-resident loop builds G when it pays; the swap loop keeps the stale gaps' dots from it
(a read of the stale data otherwise) and runs the block's epochs from it (GRAM_EPOCHS times as
many: the block's subproblem solved further takes fewer rounds).
"""

import numpy as np

from solvers.duhl.gaps.schedule import rounds_left
from solvers.glm.models import coord_gap, coord_update
from solvers.kernels.cache import compiled
from solvers.kernels.layouts import add, entries

GRAM_PAYS = 2.0  # G is built once the data work predicted to the tolerance is this many times its cost
# a pair of a sample's nonzeros in G costs about this many entries of an epoch's work (the sparse
# build's scattered adds), a dense pair this (BLAS)
PAIR_COST = {True: 2.0, False: 0.15}
# the swap loop reads the stale gaps from the data until it has read about GRAM_AFTER times G's cost
# (a ski rental: at most twice the better choice), and builds G before the first round when it costs
# at most GRAM_AT_ONCE rounds' stale reads (a return to Python to build it later costs more)
GRAM_AFTER, GRAM_AT_ONCE = 1.0, 4
GRAM_EPOCHS = 2  # the swap loop's block epochs from G per epoch from the data
ANCHOR_EVERY = 16  # the swap loop's certified rows between two data passes that re-anchor the dots
# where a certified row costs at least ROW_SHARE of a round's pass over the block, a row comes at most
# every ROWS_EVERY rounds (sooner as the gap nears tol)
ROWS_EVERY, ROW_SHARE = 8, 0.1
COV_ROUNDS = 16  # the all-resident loop's global pass at least this many rounds after the last (G's drift)
GRAM_BYTES_SHARE = 1.0  # G (8 n^2 bytes) at most this share of the data's bytes


def gram_fits(problem):
    """Whether covariance updates apply: the Lasso family (coordinates: features, the quadratic data
    term) in RAM, G
    (8 n^2 bytes) at most the data's bytes."""
    n = problem.n_coords
    return (not problem.dual_form and not problem.loss and not problem.on_disk
            and 8 * n * n <= GRAM_BYTES_SHARE * int(problem.coord_bytes.sum()))


def gram_cost(problem):
    """G's estimated cost in entries of data work (an epoch reads each entry twice)."""
    A = problem.A
    if problem.sparse:
        per_sample = np.bincount(A.indices, minlength=A.shape[1]).astype(np.float64)  # nonzeros of each sample
        pairs = float((per_sample * (per_sample + 1) / 2).sum())
    else:
        n, m = A.shape
        pairs = m * n * (n + 1) / 2
    return PAIR_COST[bool(problem.sparse)] * pairs


@compiled
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
    (faster than scipy's A @ A.T), for dense data BLAS."""
    A = problem.A
    if problem.sparse:
        T = A.T.tocsr()
        return _sparse_gram(T.indptr, T.indices, T.data, problem.n_coords)
    A64 = np.asarray(A, dtype=np.float64)
    return A64 @ A64.T


@compiled
def gram_pays(g_cost, last_round, last_gap, rounds, gap, tol_abs, round_work):
    """Whether G pays now: the rate since the last certificate (``last_round``, ``last_gap``)
    predicts rounds to ``tol_abs`` whose data work (``round_work`` entries each) is at least
    GRAM_PAYS times ``g_cost``."""
    if g_cost <= 0.0:
        return False
    return rounds_left(last_round, last_gap, rounds, gap, tol_abs) * round_work >= GRAM_PAYS * g_cost


@compiled(inline="always")
def work_entries(D, work):
    """The working set's entries: a pass's reads of its data."""
    total = 0
    for i in work:
        total += entries(D, i)
    return total


@compiled
def gram_epoch(G, row_coord, order, work, a, off, mu, sqnorm, c, theta, dots, n_samples):
    """A pass over the rows ``order`` (coordinates row_coord[order]) from the dots <A_i, z> of the
    coordinates ``work``, kept up to date by G: the kernels' exact coordinate update, without reading
    the data (the same updates in the same order as an epoch on it, up to rounding). Returns the
    updates."""
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


@compiled
def catch_up(D, work, a, a_ref, z, c):
    """z moved by the working set's moves since ``a_ref`` (then a_ref = a there)."""
    for i in work:
        d = a[i] - a_ref[i]
        if d != 0.0:
            add(D, i, c * d, z)
            a_ref[i] = a[i]


@compiled
def gram_block_end(B, positions, block, a, a_ref, z, off, mu, c, theta, t, gaps, s):
    """After the block's epochs from G: z moved by the block's moves since a_ref (the round's start
    state: the certificate's), and the block's gaps and s from t."""
    shift = c * off[0] * z.shape[0]
    for jj in range(block.shape[0]):
        i = block[jj]
        d = a[i] - a_ref[i]
        if d != 0.0:
            add(B, positions[jj], c * d, z)
        s[i] = t[i] - shift * mu[i]
        gaps[i] = coord_gap(theta, a[i], s[i])


def stale_entries(problem, stale_bytes):
    """The data entries ``stale_bytes`` of the data's bytes hold."""
    A = problem.A
    total = float(A.nnz) if problem.sparse else float(A.shape[0] * A.shape[1])
    return stale_bytes / max(1, int(problem.coord_bytes.sum())) * total


def gram_after(problem, stale_bytes):
    """The swap loop's round to build G at the latest (the ski rental: its estimated cost over the
    stale entries a round reads)."""
    return int(np.ceil(GRAM_AFTER * gram_cost(problem) / max(1.0, stale_entries(problem, stale_bytes))))


def rows_every(problem, block_bytes):
    """At most how many rounds apart the swap loop's rows come with G: ROWS_EVERY where a row's pass
    over z costs ROW_SHARE of the block's entries or more, else 1."""
    A = problem.A
    per_entry = A.data.itemsize + A.indices.itemsize if problem.sparse else A.itemsize
    return ROWS_EVERY if A.shape[1] >= ROW_SHARE * block_bytes / per_entry else 1
