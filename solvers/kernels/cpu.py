"""CPU kernels: stochastic coordinate descent epochs, coordinate gaps, sum of g.

All kernels release the GIL (``nogil=True``), so a host thread can refresh gaps
while another runs epochs, and are cached on disk (``cache=True``), so a new
process loads them in a fraction of a second. Each is specialised to one model
by the type of ``theta`` (see :mod:`solvers.glm.models`), whose scalar math it
inlines.

Data is coordinate-major: row ``j`` of ``rows`` (dense) or of a CSR matrix
holds the entries of one coordinate ``A_i``, with ``i = coords[j]``. The
shared state is ``z = c (v - b)``, ``off = [mean of v]`` (non-zero only with
an intercept), so that ``u = z - c off`` and

    <A_i, u> = <A_i, z> - c off m mu_i,     L_i = c ||A_i - mu_i||^2

where ``mu_i`` is the mean of coordinate i's entries (zero without intercept).
Sparse indices are read as unsigned: Numba then drops its negative-index
wraparound from the gather and scatter loops (~15% on w8a).
"""

import numpy as np
from numba import njit

from solvers.glm.models import coord_gap, coord_update, g_value, source_digest

# reassociation lets LLVM vectorise the dot products; no NaN/inf assumptions
_OPTS = dict(nogil=True, cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")


def _kernels(model_code):
    """The kernels, closed over ``model_code``, a hash of the model math they inline.

    Numba keys a cached function on its own source file and on the values of its
    closure, not on the functions it inlines from other files (numba#1833). The
    closure makes an edit to solvers/glm/models.py compile anew instead of loading
    stale machine code; nothing is ever deleted.
    """

    @njit(**_OPTS)
    def scd_epoch_dense(rows, coords, order, a, z, off, mu, sqnorm, c, theta):
        """One pass of exact coordinate minimisation over ``rows[order]``; returns updates made."""
        model_code  # noqa: B018 (see _kernels)
        m = z.shape[0]
        n_cols = rows.shape[1]
        for j in order:
            i = coords[j]
            s = 0.0
            for k in range(n_cols):
                s += rows[j, k] * z[k]
            s -= c * off[0] * m * mu[i]
            ai = a[i]
            x = coord_update(theta, ai, s, c * sqnorm[i])
            d = x - ai
            if d != 0.0:
                cd = c * d
                for k in range(n_cols):
                    z[k] += cd * rows[j, k]
                off[0] += d * mu[i]
                a[i] = x
        return order.shape[0]

    @njit(**_OPTS)
    def scd_epoch_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c, theta):
        """Same as :func:`scd_epoch_dense` for a CSR matrix of coordinates."""
        model_code  # noqa: B018 (see _kernels)
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
            x = coord_update(theta, ai, s, c * sqnorm[i])
            d = x - ai
            if d != 0.0:
                cd = c * d
                for k in range(start, stop):
                    z[np.uint64(indices[k])] += cd * data[k]
                off[0] += d * mu[i]
                a[i] = x
        return order.shape[0]

    @njit(**_OPTS)
    def gaps_dense(rows, positions, coords, a, z, off, mu, c, theta, out):
        """out[j] = gap of coordinate coords[j], whose data is rows[positions[j]]."""
        model_code  # noqa: B018 (see _kernels)
        m = z.shape[0]
        n_cols = rows.shape[1]
        shift = c * off[0] * m
        for j in range(positions.shape[0]):
            r = positions[j]
            i = coords[j]
            s = 0.0
            for k in range(n_cols):
                s += rows[r, k] * z[k]
            s -= shift * mu[i]
            out[j] = coord_gap(theta, a[i], s)

    @njit(**_OPTS)
    def gaps_sparse(indptr, indices, data, positions, coords, a, z, off, mu, c, theta, out):
        """Same as :func:`gaps_dense` for a CSR matrix."""
        model_code  # noqa: B018 (see _kernels)
        m = z.shape[0]
        shift = c * off[0] * m
        for j in range(positions.shape[0]):
            r = positions[j]
            i = coords[j]
            s = 0.0
            for k in range(indptr[r], indptr[r + 1]):
                s += data[k] * z[np.uint64(indices[k])]
            s -= shift * mu[i]
            out[j] = coord_gap(theta, a[i], s)

    @njit(**_OPTS)
    def sum_g(a, theta):
        """sum_i g_i(a_i)."""
        model_code  # noqa: B018 (see _kernels)
        total = 0.0
        for i in range(a.shape[0]):
            total += g_value(theta, a[i])
        return total

    return scd_epoch_dense, scd_epoch_sparse, gaps_dense, gaps_sparse, sum_g


scd_epoch_dense, scd_epoch_sparse, gaps_dense, gaps_sparse, sum_g = _kernels(source_digest())


@njit(cache=True, nogil=True)
def shifted_sq_norm(z, shift):
    """||z - shift||^2, without BLAS: a threaded BLAS call per round stalls on a busy machine."""
    total = 0.0
    for k in range(z.shape[0]):
        d = z[k] - shift
        total += d * d
    return total


@njit(cache=True)
def dense_row_stats(A):
    """(sum, sum of squares) of each row of a dense matrix, accumulated in float64."""
    sums = np.zeros(A.shape[0])
    sq = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        s = 0.0
        q = 0.0
        for k in range(A.shape[1]):
            x = float(A[i, k])
            s += x
            q += x * x
        sums[i] = s
        sq[i] = q
    return sums, sq
