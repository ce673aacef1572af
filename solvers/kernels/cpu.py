"""CPU kernels: stochastic coordinate descent epochs and coordinate gaps.

All kernels release the GIL (``nogil=True``) so that DuHL's host thread can
refresh gaps while the "device" thread runs its epochs, and are cached on disk
(``cache=True``) so that a new process compiles in a fraction of a second.

Data is coordinate-major: row ``j`` of a dense block (or of a CSR block) holds
the entries of one coordinate ``A_i``, with ``i = coords[j]``. The shared state
is ``z = c (v - b)``, ``off = [mean of v]`` (only non-zero with an intercept),
so that ``u = z - c off`` and

    <A_i, u> = <A_i, z> - c off m mu_i,     L_i = c ||A_i - mu_i||^2

where ``mu_i`` is the mean of coordinate i's entries (zero without intercept).
Sparse indices are read as unsigned: Numba then drops its negative-index
wraparound from the gather and scatter loops (~15% on w8a).
"""

from pathlib import Path

import numpy as np
from numba import njit

from solvers import models
from solvers.models import coord_gap, coord_update


def _drop_stale_cache():
    """Numba's on-disk cache is keyed on this file alone: when the scalar math in
    models.py is newer than a cached kernel, drop that kernel so it recompiles."""
    here = Path(__file__)
    newest_source = max(here.stat().st_mtime, Path(models.__file__).stat().st_mtime)
    for cached in (here.parent / "__pycache__").glob(f"{here.stem}.*.nb[ci]"):
        try:
            if cached.stat().st_mtime < newest_source:
                cached.unlink()
        except OSError:  # another process got there first
            pass


_drop_stale_cache()

# reassociation lets LLVM vectorise the dot products; no NaN/inf assumptions
_FAST = {"reassoc", "contract"}
_OPTS = dict(nogil=True, cache=True, fastmath=_FAST, error_model="numpy")


@njit(**_OPTS)
def scd_epoch_dense(block, coords, order, a, z, off, mu, sqnorm, c, model, p0, p1, p2):
    """One pass of exact coordinate minimisation over ``block[order]``; returns updates made."""
    m = z.shape[0]
    n_cols = block.shape[1]
    for j in order:
        i = coords[j]
        s = 0.0
        for k in range(n_cols):
            s += block[j, k] * z[k]
        s -= c * off[0] * m * mu[i]
        ai = a[i]
        x = coord_update(model, ai, s, c * sqnorm[i], p0, p1, p2)
        d = x - ai
        if d != 0.0:
            cd = c * d
            for k in range(n_cols):
                z[k] += cd * block[j, k]
            off[0] += d * mu[i]
            a[i] = x
    return order.shape[0]


@njit(**_OPTS)
def scd_epoch_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c,
                     model, p0, p1, p2):
    """Same as :func:`scd_epoch_dense` for a CSR block of coordinates."""
    m = z.shape[0]
    for j in order:
        i = coords[j]
        start = indptr[j]
        stop = indptr[j + 1]
        s = 0.0
        for k in range(start, stop):
            s += data[k] * z[np.uint64(indices[k])]
        s -= c * off[0] * m * mu[i]
        ai = a[i]
        x = coord_update(model, ai, s, c * sqnorm[i], p0, p1, p2)
        d = x - ai
        if d != 0.0:
            cd = c * d
            for k in range(start, stop):
                z[np.uint64(indices[k])] += cd * data[k]
            off[0] += d * mu[i]
            a[i] = x
    return order.shape[0]


@njit(**_OPTS)
def gaps_dense(block, rows, coords, a, z, off, mu, c, model, p0, p1, p2, out):
    """out[j] = gap of coordinate coords[j], whose data is block[rows[j]]."""
    m = z.shape[0]
    n_cols = block.shape[1]
    shift = c * off[0] * m
    for j in range(rows.shape[0]):
        r = rows[j]
        i = coords[j]
        s = 0.0
        for k in range(n_cols):
            s += block[r, k] * z[k]
        s -= shift * mu[i]
        out[j] = coord_gap(model, a[i], s, p0, p1, p2)


@njit(**_OPTS)
def gaps_sparse(indptr, indices, data, rows, coords, a, z, off, mu, c, model, p0, p1, p2, out):
    """Same as :func:`gaps_dense` for a CSR block."""
    m = z.shape[0]
    shift = c * off[0] * m
    for j in range(rows.shape[0]):
        r = rows[j]
        i = coords[j]
        s = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            s += data[k] * z[np.uint64(indices[k])]
        s -= shift * mu[i]
        out[j] = coord_gap(model, a[i], s, p0, p1, p2)


def warmup():
    """Compile every kernel for float32/float64 dense and sparse data on a tiny problem.

    Returns the seconds it took; callers time it and report it apart from solves.
    """
    import time

    import scipy.sparse as sp

    from solvers.duhl import DuHL
    from solvers.problems import make_problem

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        X = rng.standard_normal((12, 6)).astype(dtype)
        y = np.where(rng.standard_normal(12) > 0, 1.0, -1.0)
        for Xv in (X, sp.csr_matrix(X)):
            for name in ("lasso", "svm"):
                problem = make_problem(name, Xv, y)
                DuHL(memory_budget=0.5, max_epochs=2, tol=0.0).solve(problem)
    return time.perf_counter() - t0
