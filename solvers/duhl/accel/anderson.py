"""Anderson extrapolation of the coordinate descent iterates (Bertrand & Massias, 2021).

"Anderson acceleration of coordinate descent", AISTATS 2021; skglm's AndersonCD.
Every K passes over a working set W, from the last K + 1 iterates a_0..a_K
(restricted to W): with the differences U_r = a_{r+1} - a_r, solve
(U U^T + eps I) x = 1, w = x / sum(x), and try a' = sum_r w_r a_{r+1}. The point is
kept only if the primal objective P(a') < P(a_K), so a run can only gain; z and off
follow a' as in a coordinate step (z += c (a'_i - a_i) A_i over the coordinates that
moved; undone the same way), so every gap computed later is as exact as without it.

Anderson extrapolates the iterates of a fixed map: cyclic coordinate descent, not a
fresh random order per pass (the paper's observation). One fixed order for good is
slow on w8a, though (a 3000-row Lasso: 87-132 epochs against 33-96 with a random
order per pass), so the caller draws a random order per window of K + 1 passes: the
map is fixed where Anderson looks, and the order still changes (33-55 epochs there,
31 against 107 on diabetes).

With covariance updates (solvers.duhl.accel.gram) the passes run from G = A A^T and the
working set's dots <A_j, z>: extrapolate_gram tries the same point with the objective's
change from them (no read of the data), and with an intercept the loop does not try.

Built for coordinates that are the model's coefficients, g finite everywhere: the Lasso family
and the classifiers in the primal (for box-constrained g, the classifiers' duals, a' could leave
the domain). A loss of the margins (:func:`extrapolate` dispatches on the model) moves the margins
by the extrapolated step, and the objective's change is each touched sample's exact loss change;
kept, u = grad f follows at the samples that moved. Its passes are a fixed map only where they go
coordinate by coordinate: a Newton pass that takes its step from the working set's Hessian
(few coordinates, :func:`solvers.kernels.layouts.hessian_steps`) is a Newton step whose inner
coordinate descent a fixed order per window slowed (w8a's L2 logistic regression: 6-7 passes
to a 1e-6 gap with a fresh order per pass, 8-16 with one per window), so the loop leaves those
working sets alone.
"""

import numpy as np
from numba.extending import overload

from solvers.glm.certificates import residual_stats
from solvers.glm.models import g_value, has_loss, loss_change, loss_grad, math_of
from solvers.kernels import cpu
from solvers.kernels.cache import compiled
from solvers.kernels.layouts import add, is_csr

REG = 1e-10  # eps of the small system, relative to its trace


def _move(D, i, d, z, off, mu, c):
    """z += c d A_i, off += d mu_i for coordinate i of the data D (CSR triple or (rows,));
    returns the change of ||z||^2 over the entries it touched."""


@overload(_move)
def _move_for(D, i, d, z, off, mu, c):
    if is_csr(D):
        def sparse(D, i, d, z, off, mu, c):
            indptr, indices, data = D
            cd = c * d
            dq = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                old = z[np.uint64(indices[k])]
                new = old + cd * data[k]
                dq += (new - old) * (new + old)
                z[np.uint64(indices[k])] = new
            off[0] += d * mu[i]
            return dq
        return sparse

    def dense(D, i, d, z, off, mu, c):
        rows = D[0]
        cd = c * d
        dq = 0.0
        for k in range(rows.shape[1]):
            old = z[k]
            new = old + cd * rows[i, k]
            dq += (new - old) * (new + old)
            z[k] = new
        off[0] += d * mu[i]
        return dq
    return dense


@compiled
def _objective(a, z, off, c, b, theta):
    q, _ = residual_stats(z, c * off[0], b)
    return q / (2.0 * c) + cpu.sum_g(a, theta)


@compiled
def _weights(gram):
    """x / sum(x) for (gram + eps I) x = 1 by Gaussian elimination (K is a handful);
    an empty array when the system is degenerate (iterates that no longer move)."""
    K = gram.shape[0]
    scale = 0.0
    for r in range(K):
        scale += gram[r, r]
    if not (scale > 0.0) or not np.isfinite(scale):
        return np.empty(0)
    M = gram.copy()
    x = np.ones(K)
    for r in range(K):
        M[r, r] += REG * scale
    for col in range(K):
        pivot = col
        for r in range(col + 1, K):
            if abs(M[r, col]) > abs(M[pivot, col]):
                pivot = r
        if M[pivot, col] == 0.0:
            return np.empty(0)
        if pivot != col:
            for k in range(K):
                M[col, k], M[pivot, k] = M[pivot, k], M[col, k]
            x[col], x[pivot] = x[pivot], x[col]
        for r in range(col + 1, K):
            f = M[r, col] / M[col, col]
            for k in range(col, K):
                M[r, k] -= f * M[col, k]
            x[r] -= f * x[col]
    for r in range(K - 1, -1, -1):
        acc = x[r]
        for k in range(r + 1, K):
            acc -= M[r, k] * x[k]
        x[r] = acc / M[r, r]
    total = x.sum()
    if total == 0.0 or not np.isfinite(total):
        return np.empty(0)
    return x / total


@compiled
def _mix(buf, active, a, state):
    """Record a[active] as the newest iterate and, with K + 1 of them, the weights of the
    extrapolated point (empty: none this time, or a degenerate system)."""
    K = buf.shape[0] - 1
    k = int(state[0])
    for j in active:
        buf[k, j] = a[j]
    if k < K:
        state[0] = k + 1
        return np.empty(0)
    state[0] = 0  # the next K + 1 iterates start afresh, kept point or not
    state[1] += 1
    gram = np.zeros((K, K))
    for r in range(K):
        for s in range(r, K):
            acc = 0.0
            for j in active:
                acc += (buf[r + 1, j] - buf[r, j]) * (buf[s + 1, j] - buf[s, j])
            gram[r, s] = acc
            gram[s, r] = acc
    return _weights(gram)


@compiled(inline="always")
def _point(buf, w, j):
    """Coordinate j of the extrapolated point."""
    x = 0.0
    for r in range(w.shape[0]):
        x += w[r] * buf[r + 1, j]
    return x


def extrapolate(D, active, a, z, off, mu, c, b, theta, buf, state):
    """Record a[active] as the newest iterate; with K + 1 of them, try the extrapolated
    point and keep it if it lowers the objective. ``buf``: (K + 1, n) iterates by
    coordinate; ``state``: [iterates stored, tries, kept] (the caller zeroes state[0]
    whenever the working set changes). The quadratic data term's (:func:`extrapolate_quadratic`)
    or a loss's (:func:`extrapolate_margins`), in Python and compiled alike."""
    if has_loss(theta):
        return extrapolate_margins(D, active, a, z, off, theta, buf, state)
    return extrapolate_quadratic(D, active, a, z, off, mu, c, b, theta, buf, state)


@overload(extrapolate)
def _extrapolate_for(D, active, a, z, off, mu, c, b, theta, buf, state):
    if math_of(theta).loss is None:
        return lambda D, active, a, z, off, mu, c, b, theta, buf, state: extrapolate_quadratic(
            D, active, a, z, off, mu, c, b, theta, buf, state)
    return lambda D, active, a, z, off, mu, c, b, theta, buf, state: extrapolate_margins(
        D, active, a, z, off, theta, buf, state)


@compiled
def extrapolate_margins(D, active, a, z, off, theta, buf, state):
    """:func:`extrapolate` for a loss of the margins (z = u = grad f, the margins in off[1:]): the
    margins' step dm over the moved coordinates' data, the objective's change as each touched
    sample's loss change plus the coordinates' g; kept, the margins move and u follows. A kept
    point lies inside g's box (|a_i| <= bound: the objective at it is below P(0), and l1 |a_i| alone
    would reach P(0) past it), as every iterate does. Costs O(K^2 |W|), the moved coordinates'
    data and O(m)."""
    w = _mix(buf, active, a, state)
    if w.shape[0] == 0:
        return
    margins = off[1:]
    dm = np.zeros(z.shape[0])
    change = 0.0
    for j in active:
        x = _point(buf, w, j)
        d = x - a[j]
        if d != 0.0:
            change += g_value(theta, x) - g_value(theta, a[j])
            add(D, j, d, dm)
    for k in range(dm.shape[0]):
        if dm[k] != 0.0:
            change += loss_change(theta, margins[k], z[k], dm[k])
    if not change < 0.0:  # (False for NaN)
        return
    state[2] += 1
    for j in active:
        a[j] = _point(buf, w, j)
    for k in range(dm.shape[0]):
        if dm[k] != 0.0:
            margins[k] += dm[k]
            z[k] = loss_grad(theta, margins[k])


@compiled
def extrapolate_quadratic(D, active, a, z, off, mu, c, b, theta, buf, state):
    """:func:`extrapolate` for the quadratic data term (z = c (v - b)): z and off follow a' as in a
    coordinate step. Costs O(K^2 |W|) and the moved coordinates' data (O(m) more with an intercept),
    so that small working sets can afford it."""
    K = buf.shape[0] - 1
    w = _mix(buf, active, a, state)
    if w.shape[0] == 0:
        return
    centred = False  # with an intercept off moves, and with it every entry of u = z - c off
    for j in active:
        centred = centred or mu[j] != 0.0
    before = _objective(a, z, off, c, b, theta) if centred else 0.0
    change = 0.0  # P(a') - P(a_K) without an intercept: the touched entries' and coordinates' share
    for j in active:
        x = _point(buf, w, j)
        d = x - a[j]
        if d != 0.0:
            change += _move(D, j, d, z, off, mu, c) / (2.0 * c) + g_value(theta, x) - g_value(theta, a[j])
            a[j] = x
    if centred:
        change = _objective(a, z, off, c, b, theta) - before
    if change < 0.0:
        state[2] += 1
        return
    for j in active:  # no gain: back to a_K (still in buf[K])
        d = buf[K, j] - a[j]
        if d != 0.0:
            _move(D, j, d, z, off, mu, c)
            a[j] = buf[K, j]


@compiled
def extrapolate_gram(G, active, a, dots, c, theta, buf, state, step):
    """extrapolate's step for passes from G (solvers.duhl.accel.gram, no intercept): the objective's
    change from the working set's dots <A_j, z> and G, 2 c d.dots + c^2 d'G d over 2 c, plus the
    coordinates' g, without the data; kept, a and the dots move (z catches up with a as after any
    pass from G). ``step``: |W| scratch for the move. O(K^2 |W| + |W|^2): a pass from G's cost."""
    w = _mix(buf, active, a, state)
    if w.shape[0] == 0:
        return
    change = 0.0
    for t in range(active.shape[0]):
        j = active[t]
        x = _point(buf, w, j)
        step[t] = x - a[j]
        change += step[t] * dots[j] + g_value(theta, x) - g_value(theta, a[j])
    quad = 0.0
    for t in range(active.shape[0]):
        if step[t] != 0.0:
            row = 0.0
            for u in range(active.shape[0]):
                row += G[active[t], active[u]] * step[u]
            quad += step[t] * row
    if not (change + 0.5 * c * quad < 0.0):
        return
    state[2] += 1
    for t in range(active.shape[0]):
        d = step[t]
        if d != 0.0:
            j = active[t]
            for u in active:
                dots[u] += c * d * G[j, u]
            a[j] = _point(buf, w, j)
