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

A model whose data term is a loss of the margins (the classifiers in the primal,
:mod:`solvers.glm.models.primal`) keeps u = grad f(v) itself in z (``off[0]`` = 0, mu = 0: the
gap kernels serve it unchanged) and the margins v in ``off[1:]``. Its epoch is a Newton pass
(:func:`newton_pass_dense`, :func:`newton_pass_sparse`; :func:`epoch_kernels` picks the kernel
of a theta).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from solvers.glm.models import (coord_gap, coord_update, g_value, has_loss, loss_change, loss_change_bound,
                                loss_curvature, loss_grad, loss_grad_step, zero_interval)
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


# ----------------------------------------------------------------- a loss's Newton pass ---
# The line search on a pass's step (newGLMNET's: Yuan, Ho & Lin 2012; liblinear's constants):
# Armijo's sufficient decrease with sigma = 0.01, the step halved at most LINE_STEPS times
ARMIJO = 0.01
LINE_STEPS = 20
# A full step is then doubled while the objective keeps decreasing, at most LINE_UP times: the
# loss's curvature at the pass's start can be far above the one along the step (the logistic's
# from w = 0), so Newton's step falls short; more doublings overshot (the design page, primal
# classifiers)
LINE_UP = 1
H_FLOOR = 1e-12  # liblinear's floor on a coordinate's curvature (the squared hinge's can be 0)


@compiled(inline="always")
def copy_to(src, dst):
    """dst[:n] = src[:n] for n = len(src), an element at a time: a slice assignment from an array
    compiles NumPy's shape-mismatch message (string formatting) into the first caller, seconds of a
    first run."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@compiled
def _longer_step(coords, order, a, a0, dm, margins, u0, theta, touched, n_touched, full):
    """The longest of 2, 4, ... 2^LINE_UP times a pass's full step (``a`` at its end, a0 and the
    margins at its start, ``full`` at least the objective's change over it) at which the objective
    is lower than at each shorter one; 1: none, or a penalty with a kink at 0 (L1, elastic net:
    their passes move coordinates on and off 0, and longer steps made the support swing)."""
    lo, hi = zero_interval(theta, 0.0)
    if lo <= hi:
        return 1.0
    best, lam = full, 1.0
    for _ in range(LINE_UP):
        trial = 2.0 * lam
        change = 0.0
        for jj in range(order.shape[0]):
            i = coords[order[jj]]
            change += g_value(theta, a0[jj] + trial * (a[i] - a0[jj])) - g_value(theta, a0[jj])
        for t in range(n_touched):
            k = touched[t]
            if dm[k] != 0.0:
                change += loss_change(theta, margins[k], u0[k], trial * dm[k])
        if not change < best:  # (False for NaN, and for inf: past the box of a bounded g)
            break
        best, lam = change, trial
    return lam


@compiled(inline="always")
def _line_search(coords, order, a, a0, z, u0, dm, margins, theta, touched, n_touched, aux):
    """The pass moved a (from a0, its coordinates coords[order]) and the margins by dm (the
    samples ``touched[:n_touched]``, u0 their u before): take the longest step lam in 1, 1/2, ...
    along it whose objective change is at most ARMIJO lam times the model's (the gradient's
    slope plus g's change), or none; then a, the margins and u = grad f at the step taken. A step
    is tried on the loss's upper bound of its change first (``loss_change_bound``: the logistic's
    without a log), on the exact change only where the bound does not pass; ``aux`` keeps what
    the bound computed for u's update (the logistic's exp(-d)). A full step may then be doubled
    (:func:`_longer_step`: an objective lower than the full step's bound, then than the last's)."""
    n = order.shape[0]
    slope = 0.0
    for t in range(n_touched):
        k = touched[t]
        slope += u0[k] * dm[k]
    dg_full = 0.0
    for jj in range(n):
        i = coords[order[jj]]
        dg_full += g_value(theta, a[i]) - g_value(theta, a0[jj])
    predicted = slope + dg_full  # <= 0: the model's own decrease
    lam = 1.0
    taken = 0.0
    for _ in range(LINE_STEPS):
        dg = dg_full
        if lam != 1.0:
            dg = 0.0
            for jj in range(n):
                i = coords[order[jj]]
                dg += g_value(theta, a0[jj] + lam * (a[i] - a0[jj])) - g_value(theta, a0[jj])
        allowed = ARMIJO * lam * predicted - dg
        bound = 0.0
        for t in range(n_touched):
            k = touched[t]
            if dm[k] != 0.0:
                b, aux[k] = loss_change_bound(theta, margins[k], u0[k], lam * dm[k])
                bound += b
        passed = bound <= allowed
        change = bound + dg  # at least the objective's change
        if not passed:
            df = 0.0
            for t in range(n_touched):
                k = touched[t]
                if dm[k] != 0.0:
                    df += loss_change(theta, margins[k], u0[k], lam * dm[k])
            passed = df <= allowed
            change = df + dg
        if passed:
            taken = lam
            break
        lam *= 0.5
    if taken == 1.0:
        taken = _longer_step(coords, order, a, a0, dm, margins, u0, theta, touched, n_touched, change)
        if taken != 1.0:
            for t in range(n_touched):
                k = touched[t]
                if dm[k] != 0.0:
                    b, aux[k] = loss_change_bound(theta, margins[k], u0[k], taken * dm[k])
    if taken != 1.0:
        for jj in range(n):
            i = coords[order[jj]]
            a[i] = a0[jj] + taken * (a[i] - a0[jj])
    for t in range(n_touched):
        k = touched[t]
        if dm[k] != 0.0 and taken > 0.0:
            step = taken * dm[k]
            margins[k] += step
            z[k] = loss_grad_step(theta, margins[k], u0[k], step, aux[k])
        else:
            z[k] = u0[k]


@compiled(**_DENSE)
def newton_pass_dense(rows, coords, order, a, z, off, mu, sqnorm, c, theta):
    """One Newton pass of a loss model over ``rows[order]`` (z = u = grad f, off[1:] the
    margins): the coordinates in turn each minimise the data term's second-order model at the
    pass's start (u0, the curvatures h) plus g along it (the penalty's update with s the
    model's gradient and L its curvature: a one-dimensional Newton step), z following the
    model's gradient u0 + h * dm; then a line search on the pass's whole step (newGLMNET's
    outer step, one inner pass), and z = grad f at the margins reached. One exp per sample
    and pass for the logistic loss (liblinear's per-coordinate line search takes one per entry).
    Returns the updates made."""
    m = z.shape[0]
    n = order.shape[0]
    margins = off[1:]
    u0 = z.copy()
    h = np.empty(m)
    dm = np.zeros(m)
    for k in range(m):
        h[k] = loss_curvature(theta, u0[k])
    if hessian_pass(n, n * m, m, False):
        _hessian_step_dense(rows, coords, order, a, z, u0, h, margins, theta)
        return n
    a0 = np.empty(n)
    moved = False
    for jj in range(n):
        j = order[jj]
        i = coords[j]
        G = 0.0
        H = 0.0
        for k in range(m):
            x = rows[j, k]
            G += x * z[k]
            H += x * x * h[k]
        ai = a[i]
        a0[jj] = ai
        x_new = coord_update(theta, ai, G, max(H, H_FLOOR))
        d = x_new - ai
        if d != 0.0:
            moved = True
            for k in range(m):
                xd = rows[j, k] * d
                dm[k] += xd
                z[k] += h[k] * xd
            a[i] = x_new
    if moved:
        _line_search(coords, order, a, a0, z, u0, dm, margins, theta, np.arange(m), m, np.empty(m))
    return n


# A sparse Newton pass over few coordinates with short samples takes its step from the data term's
# Hessian on the pass's coordinates (newGLMNET with the Hessian kept, as glmnet's covariance updates):
# when an inner pass (n^2 flops) costs at most four passes' entries, and building
# it (sum over samples of their entries^2 / 2 multiply-adds) at most HESSIAN_ENTRIES passes' entries
HESSIAN_ENTRIES = 16
HESSIAN_CHUNK = 16384  # entries a chunk of the sparse transpose holds (256 KiB with their positions)
# a dense pass over at most this many coordinates (H: n (n + 1) / 2 multiply-adds a sample, at most
# HESSIAN_ENTRIES times the pass's n) and at least 4 n samples takes the Hessian's step too
HESSIAN_DENSE = 2 * HESSIAN_ENTRIES - 1
INNER_PASSES = 64      # at most this many inner passes on the model per Newton pass ...
INNER_SHRINK = 1e-3    # ... until an inner pass's largest step (scaled by sqrt(H_jj)) is this share of the first's
# Passes that have not converged by then crawl (an ill-conditioned Hessian: w8a's has duplicate
# features), and the outer Newton steps crawl with them: with an L1 term the model is then solved on
# the face the passes found (the coordinates' signs, as an active-set method). At most FACE_SOLVES linear solves
# a pass in all, each of at most FACE_FLOPS flops per entry of the pass's data or the passes' own flops.
FACE_SOLVES = 8
FACE_FLOPS = 4 * HESSIAN_ENTRIES
FACE_RIDGE = 1e-12     # relative to the face's largest curvature: a duplicate feature's null direction


@compiled(inline="always")
def hessian_pass(n, entries, m, sparse):
    """Whether a Newton pass over n coordinates (``entries`` entries of data, m samples) takes its
    step from their Hessian (sparse: where building it turns out cheap enough), not coordinate by
    coordinate."""
    if sparse:
        return n * n <= 4 * entries
    return n <= HESSIAN_DENSE and 4 * n <= m


@compiled(inline="always")
def _inner_pass(coords, order, a, g0, H, r, theta):
    """One coordinate descent pass on the model (r = H (a - a0) kept); returns (its largest step
    scaled by sqrt(H_jj), whether it moved)."""
    n = order.shape[0]
    largest = 0.0
    moved = False
    for jj in range(n):
        i = coords[order[jj]]
        L = max(H[jj, jj], H_FLOOR)
        ai = a[i]
        x_new = coord_update(theta, ai, g0[jj] + r[jj], L)
        d = x_new - ai
        if d != 0.0:
            moved = True
            a[i] = x_new
            Hj = H[jj]  # H symmetric: its row, contiguous
            for q in range(n):
                r[q] += d * Hj[q]
            largest = max(largest, abs(d) * np.sqrt(L))
    return largest, moved


@compiled
def _face_step(coords, order, a, g0, H, r, theta, flops, solves):
    """Newton's step on the model within its face (an L1 term's: the coordinates off zero, whose
    signs fix |w|'s slope): they go to the model's minimum on the face, H_FF d = -(the model's
    gradient), or as far toward it as no sign changes: the first to reach zero stays there and the
    face shrinks. Each step lowers the model (a convex quadratic on the face), so the passes' point
    is only improved. At most ``solves`` solves, each of at most ``flops``; a step that would leave
    g's domain (|w| <= bound) or is not finite is not taken. Returns (whether a moved, the solves made)."""
    n = order.shape[0]
    l1, l2 = theta.l1, theta.l2
    free = np.empty(n, np.int64)
    moved = False
    for used in range(solves):
        nf = 0
        for jj in range(n):
            if a[coords[order[jj]]] != 0.0:
                free[nf] = jj
                nf += 1
        if nf == 0 or nf * nf * nf > 3 * flops:
            return moved, used
        M = np.empty((nf, nf))
        rhs = np.empty(nf)
        top = 0.0
        for p in range(nf):
            jp = free[p]
            ap = a[coords[order[jp]]]
            slope = l1 if ap > 0.0 else (-l1 if ap < 0.0 else 0.0)
            rhs[p] = -(g0[jp] + r[jp] + slope + l2 * ap)
            Hp = H[jp]
            for q in range(nf):
                M[p, q] = Hp[free[q]]
            M[p, p] += l2
            top = max(top, M[p, p])
        if top <= 0.0:
            return moved, used
        for p in range(nf):
            M[p, p] += FACE_RIDGE * top
        step = np.linalg.solve(M, rhs)
        t = 1.0
        hit = -1
        for p in range(nf):
            ap = a[coords[order[free[p]]]]
            if not np.isfinite(step[p]):
                return moved, used + 1
            if ap * (ap + step[p]) < 0.0 and -ap / step[p] < t:
                t = -ap / step[p]
                hit = p
        for p in range(nf):
            i = coords[order[free[p]]]
            x_new = 0.0 if p == hit else a[i] + t * step[p]
            if abs(x_new) > theta.bound:
                return moved, used + 1  # (never at a minimum: g(bound) alone is P(0)); the passes' point stands
        for p in range(nf):
            jp = free[p]
            i = coords[order[jp]]
            x_new = 0.0 if p == hit else a[i] + t * step[p]
            d = x_new - a[i]
            if d != 0.0:
                moved = True
                a[i] = x_new
                Hj = H[jp]
                for q in range(n):
                    r[q] += d * Hj[q]
        if hit < 0:
            return moved, used + 1
    return moved, solves


@compiled(inline="always")
def _model_descent(coords, order, a, g0, H, theta, flops):
    """Coordinate descent on the data term's second-order model g0 d + d^T H d / 2 plus g(a + d) over
    the pass's n coordinates (r = H (a - a0) kept), until an inner pass's largest step shrinks to
    INNER_SHRINK of the first's. If they have not by INNER_PASSES, they crawl, and with an L1 term
    Newton's steps on the face they found follow (:func:`_face_step`), each checked by a pass that
    may change the face, until a pass barely moves (a face solve costs at most ``flops`` or the
    passes' own flops). a moves; returns (a0, whether it moved)."""
    n = order.shape[0]
    a0 = np.empty(n)
    for jj in range(n):
        a0[jj] = a[coords[order[jj]]]
    r = np.zeros(n)
    first = 0.0
    moved = False
    for sweep in range(INNER_PASSES):
        largest, moved_now = _inner_pass(coords, order, a, g0, H, r, theta)
        moved = moved or moved_now
        if sweep == 0:
            first = largest
        if largest <= INNER_SHRINK * first:
            return a0, moved
    if theta.l1 == 0.0:
        return a0, moved  # no face without an L1 term (its passes under a budget did better alone)
    # the passes crawl (an ill-conditioned model): a solve costing at most what they cost
    flops = max(flops, INNER_PASSES * n * n)
    solves = FACE_SOLVES
    while solves > 0:
        stepped, used = _face_step(coords, order, a, g0, H, r, theta, flops, solves)
        solves -= used
        if not stepped:
            break
        moved = True
        largest, _ = _inner_pass(coords, order, a, g0, H, r, theta)
        if largest <= INNER_SHRINK * first:
            break
    return a0, moved


@compiled(**_DENSE)  # dense rows only: their sums vectorise, as the dense pass's
def _hessian_step_dense(rows, coords, order, a, z, u0, h, margins, theta):
    """The Newton pass of :func:`newton_pass_dense` from the Hessian of its n coordinates
    (u0 = z and h the curvatures at the pass's start): H = sum_k h_k x_k x_k^T, the model's
    coordinate descent (:func:`_model_descent`), then the margins' step and the line search."""
    m = z.shape[0]
    n = order.shape[0]
    g0 = np.zeros(n)
    H = np.zeros((n, n))
    hx = np.empty(m)
    for p in range(n):
        jp = order[p]
        acc = 0.0
        for k in range(m):
            x = rows[jp, k]
            acc += x * z[k]
            hx[k] = h[k] * x
        g0[p] = acc
        for q in range(p, n):
            jq = order[q]
            acc = 0.0
            for k in range(m):
                acc += hx[k] * rows[jq, k]
            H[p, q] = acc
            H[q, p] = acc
    a0, moved = _model_descent(coords, order, a, g0, H, theta, FACE_FLOPS * n * m)
    if not moved:
        return
    dm = np.zeros(m)
    for jj in range(n):
        j = order[jj]
        d = a[coords[j]] - a0[jj]
        if d != 0.0:
            for k in range(m):
                dm[k] += rows[j, k] * d
    _line_search(coords, order, a, a0, z, u0, dm, margins, theta, np.arange(m), m, np.empty(m))


@compiled
def _hessian_step(indptr, indices, data, coords, order, a, z, margins, theta, entries, m):
    """The Newton pass of :func:`newton_pass_sparse` from the Hessian of the pass's n coordinates:
    the gradient g0 and the samples' entries of the pass (a transpose), H = sum_k h_k x_k x_k^T
    (n x n), inner coordinate descent on g0 d + d^T H d / 2 + g(a + d) until its steps shrink
    (INNER_SHRINK, at most INNER_PASSES), then the margins' step and the line search. Returns False
    (nothing done) when building H would cost more than HESSIAN_ENTRIES passes' entries.

    The transpose goes a chunk of samples at a time (HESSIAN_CHUNK entries, or n), each
    coordinate's entries read on from where the last chunk stopped: its writes stay in cache, and
    each sample adds to g0 and H in the same order as a whole transpose would. That needs every
    coordinate's sample indices ascending (canonical CSR); where they are not, one chunk is all."""
    n = order.shape[0]
    counts = np.zeros(m, np.int64)
    ascending = True
    for jj in range(n):
        j = order[jj]
        last = -1
        for e in range(indptr[j], indptr[j + 1]):
            k = indices[e]
            counts[np.uint64(k)] += 1
            if k <= last:
                ascending = False
            last = k
    pairs = 0
    for k in range(m):
        pairs += counts[k] * (counts[k] + 1) // 2
    if pairs > HESSIAN_ENTRIES * entries:
        return False
    touched = np.empty(m, np.int64)  # the samples the pass touches, ascending
    n_touched = 0
    longest = 0
    for k in range(m):
        if counts[k]:
            touched[n_touched] = k
            n_touched += 1
            longest = max(longest, counts[k])
    size = max(HESSIAN_CHUNK, n, longest) if ascending else entries
    cursor = np.empty(n, np.int64)
    for jj in range(n):
        cursor[jj] = indptr[order[jj]]
    starts = np.empty(m + 1, np.int64)  # a chunk's entries by sample: positions jj and values
    fill = np.empty(m, np.int64)
    pos = np.empty(size, np.int64)
    val = np.empty(size)
    g0 = np.zeros(n)
    H = np.zeros((n, n))
    u0 = np.empty(m)
    t0 = 0
    while t0 < n_touched:
        total = 0
        t1 = t0
        while t1 < n_touched and (t1 == t0 or total + counts[touched[t1]] <= size):
            k = touched[t1]
            starts[k] = total
            fill[k] = total
            total += counts[k]
            t1 += 1
        end = touched[t1] if t1 < n_touched else m  # this chunk's samples are below it
        for jj in range(n):
            j = order[jj]
            e = cursor[jj]
            stop = indptr[j + 1]
            acc = g0[jj]
            while e < stop and indices[e] < end:
                k = np.uint64(indices[e])
                x = data[e]
                acc += x * z[k]
                pos[fill[k]] = jj
                val[fill[k]] = x
                fill[k] += 1
                e += 1
            g0[jj] = acc
            cursor[jj] = e
        for t in range(t0, t1):
            k = touched[t]
            u0[k] = z[k]
            hk = loss_curvature(theta, z[k])
            if hk == 0.0:
                continue
            lo, hi = starts[k], fill[k]
            for p in range(lo, hi):
                hp = hk * val[p]
                row = pos[p]
                for q in range(p, hi):  # the entries of a sample are in ascending jj: the upper triangle
                    H[row, pos[q]] += hp * val[q]
        t0 = t1
    for p in range(n):
        for q in range(p + 1, n):
            H[q, p] = H[p, q]
    a0, moved = _model_descent(coords, order, a, g0, H, theta, FACE_FLOPS * entries)
    if not moved:
        return True
    dm = np.zeros(m)
    for jj in range(n):
        j = order[jj]
        d = a[coords[j]] - a0[jj]
        if d != 0.0:
            for e in range(indptr[j], indptr[j + 1]):
                dm[np.uint64(indices[e])] += data[e] * d
    _line_search(coords, order, a, a0, z, u0, dm, margins, theta, touched, n_touched, np.empty(m))
    return True


@compiled(**_SPARSE)
def newton_pass_sparse(indptr, indices, data, coords, order, a, z, off, mu, sqnorm, c, theta):
    """Same as :func:`newton_pass_dense` for a CSR matrix of coordinates. A pass whose entries are
    at least as many as the samples starts the model at every sample; a smaller one (a working
    set of a few sparse features) only at those it touches, as it meets them."""
    m = z.shape[0]
    n = order.shape[0]
    margins = off[1:]
    entries = 0
    for jj in range(n):
        entries += indptr[order[jj] + 1] - indptr[order[jj]]
    if hessian_pass(n, entries, m, True) and _hessian_step(indptr, indices, data, coords, order, a, z, margins, theta, entries, m):
        return n
    # a sample's model gradient, curvature and margin step in one 32-byte row of S: a coordinate's
    # scattered reads and writes touch one cache line a sample, not three (design page: primal)
    lazy = entries < m
    S = np.empty((m, 4))
    touched = np.empty(m, np.int64)
    if lazy:
        seen = np.zeros(m, np.bool_)
        n_touched = 0
    else:
        seen = np.ones(1, np.bool_)
        for k in range(m):
            touched[k] = k
            S[k, 0] = z[k]
            S[k, 1] = loss_curvature(theta, z[k])
            S[k, 2] = 0.0
        n_touched = m
    a0 = np.empty(n)
    moved = False
    for jj in range(n):
        j = order[jj]
        i = coords[j]
        lo, hi = indptr[j], indptr[j + 1]
        ind, val = indices[lo:hi], data[lo:hi]
        G = 0.0
        H = 0.0
        for e in range(hi - lo):
            k = np.uint64(ind[e])
            if lazy and not seen[k]:
                seen[k] = True
                touched[n_touched] = k
                n_touched += 1
                S[k, 0] = z[k]
                S[k, 1] = loss_curvature(theta, z[k])
                S[k, 2] = 0.0
            x = val[e]
            G += x * S[k, 0]
            H += x * x * S[k, 1]
        ai = a[i]
        a0[jj] = ai
        x_new = coord_update(theta, ai, G, max(H, H_FLOOR))
        d = x_new - ai
        if d != 0.0:
            moved = True
            for e in range(hi - lo):
                k = np.uint64(ind[e])
                xd = val[e] * d
                S[k, 2] += xd
                S[k, 0] += S[k, 1] * xd
            a[i] = x_new
    if moved:  # z is still the gradient at the pass's start: the line search's u0, and it sets z
        dm = np.empty(m)
        for t in range(n_touched):
            k = touched[t]
            dm[k] = S[k, 2]
        _line_search(coords, order, a, a0, z, z, dm, margins, theta, touched, n_touched, np.empty(m))
    return n


def epoch_kernels(theta):
    """(dense, sparse) epoch kernels of a model: coordinate descent (the quadratic data term) or
    the Newton pass (a loss)."""
    if has_loss(theta):
        return newton_pass_dense, newton_pass_sparse
    return scd_epoch_dense, scd_epoch_sparse


@compiled
def loss_state(theta, margins, z):
    """z = u = grad f at the margins (a loss model's state from its margins)."""
    for k in range(margins.shape[0]):
        z[k] = loss_grad(theta, margins[k])


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
        copy_to(indices[lo:hi], out_indices[pos:pos + n])
        copy_to(data[lo:hi], out_data[pos:pos + n])
        lengths[k] = n
        pos += n
    return pos
