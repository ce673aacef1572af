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
wraparound from the gather and scatter loops (~15% on w8a). The gap kernels
also return each coordinate's s = <A_i, u>, from which the Lasso's tight
certificate is built (solvers.glm.certificates).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from solvers.glm.models import coord_gap, coord_update, g_value
from solvers.kernels.cache import compiled

# Dense rows: reassociation lets LLVM vectorise the dot products (no NaN/inf assumptions).
# Sparse rows: no fastmath. With reassociation LLVM turns the gather z[indices[k]] into
# AVX-512 vgather instructions, 3-4x slower than scalar loads on this machine's CPUs (a
# kernel's flags apply to all it inlines, so the sparse kernels are compiled without).
_DENSE = dict(fastmath={"reassoc", "contract"})
_SPARSE = dict()


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the CPU to load ``array[index]`` into its caches ahead of use (llvm.prefetch: never
    faults, so an index past the end is harmless)."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])  # read, keep, data
        return context.get_dummy_value()
    return types.void(array, types.intp), codegen


@njit(nogil=True, inline="always")
def sparse_dot(indptr, indices, data, r, z):
    """<row r, z> of a CSR matrix, indices read as unsigned (Numba then drops its
    negative-index wraparound, ~15% on w8a). One plain loop: unrolled into two
    accumulators it ran 2x slower on rows of ~11 entries (w8a's samples, the gap pass of
    the dual SVM) and within noise on w8a's columns of ~750. The row taken as slices first,
    then a loop from 0: LLVM keeps that loop tight (all of w8a's columns: 0.70 -> 0.49 ms)."""
    lo, hi = indptr[r], indptr[r + 1]
    ind, val = indices[lo:hi], data[lo:hi]
    t = 0.0
    for k in range(hi - lo):
        t += val[k] * z[np.uint64(ind[k])]
    return t


@njit(nogil=True, inline="always")
def sparse_axpy(indptr, indices, data, r, cd, z):
    """z += cd * row r of a CSR matrix (as sparse_dot: slices, then a loop from 0; all of
    w8a's columns 0.73 -> 0.39 ms)."""
    lo, hi = indptr[r], indptr[r + 1]
    ind, val = indices[lo:hi], data[lo:hi]
    for k in range(hi - lo):
        z[np.uint64(ind[k])] += cd * val[k]


@compiled(**_DENSE)
def scd_epoch_dense(rows, coords, order, a, z, off, mu, sqnorm, c, theta):
    """One pass of exact coordinate minimisation over ``rows[order]``; returns updates made."""
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


@compiled(**_SPARSE)
def scd_epoch_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c, theta):
    """Same as :func:`scd_epoch_dense` for a CSR matrix of coordinates. The order is random,
    so each row is a cache miss: the next row's entries are prefetched while this one is
    updated, and the row pointer of the one after (w8a, 20,000 samples, under load: the
    hinge SVM's epoch 13% faster, logistic's 9%)."""
    m = z.shape[0]
    n = order.shape[0]
    for jj in range(n):
        j = order[jj]
        if jj + 2 < n:
            prefetch(indptr, order[jj + 2])
        if jj + 1 < n:
            nxt = indptr[order[jj + 1]]
            prefetch(indices, nxt)
            prefetch(data, nxt)
            prefetch(data, nxt + 8)  # a 64-byte line holds 8 values: rows of up to 16 entries
        i = coords[j]
        s = sparse_dot(indptr, indices, data, j, z) - c * off[0] * m * mu[i]
        ai = a[i]
        x = coord_update(theta, ai, s, c * sqnorm[i])
        d = x - ai
        if d != 0.0:
            sparse_axpy(indptr, indices, data, j, c * d, z)
            off[0] += d * mu[i]
            a[i] = x
    return order.shape[0]


@compiled(**_DENSE)
def gaps_dense(rows, positions, coords, a, z, off, mu, c, theta, out, out_s):
    """out[j] = gap of coordinate coords[j], whose data is rows[positions[j]], and
    out_s[j] = its s = <A_i, u> (what a tighter certificate is built from)."""
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
        out_s[j] = s
        out[j] = coord_gap(theta, a[i], s)


@compiled(**_SPARSE)
def gaps_sparse(indptr, indices, data, positions, coords, a, z, off, mu, c, theta, out, out_s):
    """Same as :func:`gaps_dense` for a CSR matrix."""
    shift = c * off[0] * z.shape[0]
    for j in range(positions.shape[0]):
        i = coords[j]
        s = sparse_dot(indptr, indices, data, positions[j], z) - shift * mu[i]
        out_s[j] = s
        out[j] = coord_gap(theta, a[i], s)


@compiled(**_DENSE)
def sum_g(a, theta):
    """sum_i g_i(a_i)."""
    total = 0.0
    for i in range(a.shape[0]):
        total += g_value(theta, a[i])
    return total


def random_state(seed):
    """The state of :func:`shuffle`'s stream for an integer seed (splitmix64's mix: nearby seeds
    give unrelated streams, and the state is never 0, xorshift's fixed point)."""
    mask = (1 << 64) - 1
    x = (int(seed) + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return np.array([(x ^ (x >> 31)) or 1], dtype=np.uint64)


@njit(cache=True, nogil=True)
def shuffle(x, state):
    """Shuffle x in place (Fisher-Yates) from a xorshift64* stream (Vigna 2016), ``state`` its
    uint64[1] state, the top 32 bits of each draw scaled to the range (Lemire's multiply-shift;
    bias below n / 2^32). 2.6 ns an element against np.random.shuffle's 10.7 (w8a, under load),
    which cost 10-20% of a hinge SVM epoch over a random order."""
    r = state[0]
    for i in range(x.shape[0] - 1, 0, -1):
        r ^= r >> np.uint64(12)
        r ^= r << np.uint64(25)
        r ^= r >> np.uint64(27)
        top = (r * np.uint64(2685821657736338717)) >> np.uint64(32)
        j = np.int64((top * np.uint64(i + 1)) >> np.uint64(32))
        t = x[i]
        x[i] = x[j]
        x[j] = t
    state[0] = r


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
            x = np.float64(A[i, k])  # float() of a float32 stays float32 in Numba: its square would round
            s += x
            q += x * x
        sums[i] = s
        sq[i] = q
    return sums, sq


@njit(cache=True, nogil=True)
def copy_csr_rows(indptr, indices, data, rows, out_indices, out_data, start, lengths):
    """Append the CSR rows ``rows`` to (out_indices, out_data) from position ``start``;
    each row's length goes to ``lengths``. Returns the next free position."""
    pos = start
    for k in range(rows.shape[0]):
        lo, hi = indptr[rows[k]], indptr[rows[k] + 1]
        n = hi - lo
        out_indices[pos:pos + n] = indices[lo:hi]
        out_data[pos:pos + n] = data[lo:hi]
        lengths[k] = n
        pos += n
    return pos
