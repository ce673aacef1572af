"""The data's two layouts behind one call: a compiled function written once takes either a CSR
triple (indptr, indices, data) of coordinates or dense rows (rows,), and Numba compiles the
matching kernel of :mod:`solvers.kernels.cpu` into it."""

from numba.extending import overload

from solvers.glm.models import math_of
from solvers.kernels import cpu


def is_csr(D):
    """Whether the (typed) data D is a CSR triple (indptr, indices, data), not (rows,)."""
    return len(getattr(D, "types", ())) == 3 or getattr(D, "count", 0) == 3


def epoch(D, coords, order, a, z, off, mu, sqnorm, c, theta):
    """An epoch over the rows ``order`` of the data D (coordinates coords[order]): coordinate
    descent, or for a model with a loss of the margins a Newton pass (solvers.kernels.cpu)."""


def gaps_of(D, positions, coords, a, z, off, mu, c, theta, out, s):
    """Gaps and s of ``coords`` whose data are rows ``positions`` of D."""


def add(D, i, cd, z):
    """z += cd * row i of D."""


def entries(D, i):
    """The entries of row i of D."""


def hessian_steps(D, theta, work, m):
    """Whether epochs over the rows ``work`` of D (m samples) are Newton steps from their Hessian (a
    loss's pass over few coordinates, :func:`solvers.kernels.cpu.hessian_pass`), not coordinate by
    coordinate."""


@overload(epoch)
def _epoch_for(D, coords, order, a, z, off, mu, sqnorm, c, theta):
    if math_of(theta).loss is not None:  # a loss of the margins: Newton passes
        if is_csr(D):
            return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.newton_pass_sparse(
                D[0], D[1], D[2], coords, order, a, z, off, mu, sqnorm, c, theta)
        return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.newton_pass_dense(
            D[0], coords, order, a, z, off, mu, sqnorm, c, theta)
    if is_csr(D):
        return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.scd_epoch_sparse(
            D[0], D[1], D[2], coords, order, a, z, off, mu, sqnorm, c, theta)
    return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.scd_epoch_dense(
        D[0], coords, order, a, z, off, mu, sqnorm, c, theta)


@overload(gaps_of)
def _gaps_for(D, positions, coords, a, z, off, mu, c, theta, out, s):
    if is_csr(D):
        return lambda D, positions, coords, a, z, off, mu, c, theta, out, s: cpu.gaps_sparse(
            D[0], D[1], D[2], positions, coords, a, z, off, mu, c, theta, out, s)
    return lambda D, positions, coords, a, z, off, mu, c, theta, out, s: cpu.gaps_dense(
        D[0], positions, coords, a, z, off, mu, c, theta, out, s)


@overload(add)
def _add_for(D, i, cd, z):
    if is_csr(D):
        return lambda D, i, cd, z: cpu.sparse_axpy(D[0], D[1], D[2], i, cd, z)

    def dense(D, i, cd, z):
        rows = D[0]
        for k in range(rows.shape[1]):
            z[k] += cd * rows[i, k]
    return dense


@overload(entries)
def _entries_for(D, i):
    if is_csr(D):
        return lambda D, i: D[0][i + 1] - D[0][i]
    return lambda D, i: D[0].shape[1]


@overload(hessian_steps)
def _hessian_steps_for(D, theta, work, m):
    if math_of(theta).loss is None:
        return lambda D, theta, work, m: False
    sparse = is_csr(D)

    def loss(D, theta, work, m):
        total = 0
        for i in work:
            total += entries(D, i)
        return cpu.hessian_pass(work.shape[0], total, m, sparse)
    return loss
