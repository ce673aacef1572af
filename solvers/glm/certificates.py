"""The duality gap that decides stopping: the smallest valid gap the iterate supports.

Every model's coordinate gaps sum to P(a) - D(u) at u = grad f(v), an exact gap
(:mod:`solvers.glm.models`). For the Lasso (an elastic net with l2 = 0) that dual
point comes from the bounded-support conjugate (|a| <= B = P(0)/alpha), which a
good iterate certifies about a hundred times more loosely than the rescaled
residual scikit-learn uses: u' = t u, t = min(1, l1 / max_i |s_i|), s_i = <A_i, u>,
is feasible for the unbounded conjugate (the indicator of |x| <= l1), and

    D(t u) = -t <u, b> - t^2 ||u||^2 / (2c)        (f*(u) = <u, b> + ||u||^2 / (2c))

Any feasible dual point lower-bounds P*, so the best D seen in a run certifies
every later iterate: gap = P(a) - max(D_bounded(a), best rescaled D so far).
All of it needs every coordinate's s_i at the state (the gap kernels return
them) and ||u||^2, <u, b>: O(m). The coordinate gaps (bounded conjugate) stay
the selection's and shrinking's score: at u' a violating zero coordinate has
gap 0, at u it has a positive one.

Celer's dual extrapolation (a dual point from the last residuals) was measured
too: with the random coordinate order used here it certified 1e-6 in the same
epochs as the rescaled point (w8a 24 vs 25, dense 22 vs 22); it pays with a
cyclic order only. It is not used.

A loss of the margins (the classifiers in the primal, an L1 penalty: celer's and skglm's
sparse logistic regression) has the same rescaled point: t u is feasible for the
unbounded conjugate of the L1 penalty, and D(t u) = -sum_k loss_k*(t u_k), finite for
t in [0, 1] (t u_k stays in the conjugate's domain). :func:`certificate` is the one entry
point the loops and the problems use: it dispatches on the model's data term, in Python and
compiled alike.
"""

import math

from numba import njit
from numba.extending import overload

from solvers.glm.models import ElasticNetTheta, has_loss, loss_conj, loss_value, math_of
from solvers.kernels.cache import compiled


def tight_l1(theta) -> bool:
    """Whether the rescaled dual point can certify more tightly than the coordinate gaps: a pure
    L1 penalty (the Lasso; L1 logistic regression and squared hinge in the primal)."""
    l1_penalty = isinstance(theta, ElasticNetTheta) or has_loss(theta)
    return l1_penalty and theta.l2 == 0.0 and theta.l1 > 0.0


# reassociated: vectorised sums (5x faster; a round's certificate on diabetes at memory_budget
# 0.25 spent a sixth of the round here), in one order wherever it is compiled in
@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def residual_stats(z, shift, b):
    """(||u||^2, <u, b>) for u = z - shift."""
    q = 0.0
    ub = 0.0
    for k in range(z.shape[0]):
        u = z[k] - shift
        q += u * u
        ub += u * b[k]
    return q, ub


@njit(cache=True, nogil=True)
def form_certificate(q, ub, c, sum_g, gap_sum, s_max, l1, tight, dual_best):
    """(P, D, gap) of the primal-dual form at a state, and the best dual value so far.

    ``gap_sum``: the coordinate gaps' sum (exact at u); with ``tight`` (a Lasso) the
    rescaled point's dual value also competes, and the best one of the run is kept."""
    primal = q / (2.0 * c) + sum_g
    dual = primal - gap_sum
    if tight:
        t = 1.0 if s_max <= l1 else l1 / s_max
        dual = max(dual, -t * ub - t * t * q / (2.0 * c))
    if dual_best > dual and not math.isnan(dual_best):
        dual = dual_best
    return primal, dual, max(primal - dual, 0.0), dual


# ------------------------------------------------------------- a loss of the margins ---
@compiled
def loss_sum(theta, off):
    """f(v) = sum_k loss_k(v_k), the margins v in off[1:]."""
    total = 0.0
    for k in range(1, off.shape[0]):
        total += loss_value(theta, off[k])
    return total


@compiled
def conj_sum(theta, z, t):
    """f*(t u) = sum_k loss_k*(t u_k), u = z."""
    total = 0.0
    for k in range(z.shape[0]):
        total += loss_conj(theta, t * z[k])
    return total


@compiled
def loss_certificate(theta, z, off, sum_g, gap_sum, s_max, l1, tight, dual_best):
    """:func:`form_certificate` for a loss: the primal f(v) + sum g from the margins; with ``tight``
    (an L1 penalty) the rescaled point's dual value -f*(t u) competes."""
    primal = loss_sum(theta, off) + sum_g
    dual = primal - gap_sum
    if tight:
        t = 1.0 if s_max <= l1 else l1 / s_max
        dual = max(dual, -conj_sum(theta, z, t))
    if dual_best > dual and not math.isnan(dual_best):
        dual = dual_best
    return primal, dual, max(primal - dual, 0.0), dual


@compiled
def loss_fy_gap(theta, z, off, t):
    """The Fenchel-Young gap of f at (v, t u): f(v) + f*(t u) - t <u, v>."""
    total = 0.0
    for k in range(z.shape[0]):
        m = off[k + 1]
        total += loss_value(theta, m) + loss_conj(theta, t * z[k]) - t * z[k] * m
    return total


def certificate(theta, z, off, c, b, sum_g, gap_sum, s_max, l1, tight, dual_best):
    """(P, D, gap) of the primal-dual form at a state (z, off), and the best dual value so far:
    :func:`form_certificate` from the residual's statistics for the quadratic data term,
    :func:`loss_certificate` for a loss. Python and compiled code alike."""
    if math_of(theta).loss is None:
        q, ub = residual_stats(z, c * off[0], b)
        return form_certificate(q, ub, c, sum_g, gap_sum, s_max, l1, tight, dual_best)
    return loss_certificate(theta, z, off, sum_g, gap_sum, s_max, l1, tight, dual_best)


def rescaled_fy_gap(theta, z, off, c, b, t):
    """The Fenchel-Young gap of f at (v, t u) (the working set's rescaled certificate): (1 - t)^2
    ||u||^2 / (2c) for the quadratic data term, :func:`loss_fy_gap` for a loss."""
    if math_of(theta).loss is None:
        q, ub = residual_stats(z, c * off[0], b)
        return (1.0 - t) * (1.0 - t) * q / (2.0 * c)
    return loss_fy_gap(theta, z, off, t)


def data_value(theta, z, off, c):
    """f(v) at the state: ||z - c off||^2 / (2c) for the quadratic data term (z = c (v - b)),
    the loss of the margins for a loss."""
    if math_of(theta).loss is None:
        from solvers.kernels import cpu

        return cpu.shifted_sq_norm(z, c * off[0]) / (2.0 * c)
    return loss_sum(theta, off)


@overload(certificate)
def _certificate_for(theta, z, off, c, b, sum_g, gap_sum, s_max, l1, tight, dual_best):
    if math_of(theta).loss is None:
        def quadratic(theta, z, off, c, b, sum_g, gap_sum, s_max, l1, tight, dual_best):
            q, ub = residual_stats(z, c * off[0], b)
            return form_certificate(q, ub, c, sum_g, gap_sum, s_max, l1, tight, dual_best)
        return quadratic
    return lambda theta, z, off, c, b, sum_g, gap_sum, s_max, l1, tight, dual_best: loss_certificate(
        theta, z, off, sum_g, gap_sum, s_max, l1, tight, dual_best)


@overload(rescaled_fy_gap)
def _rescaled_fy_gap_for(theta, z, off, c, b, t):
    if math_of(theta).loss is None:
        def quadratic(theta, z, off, c, b, t):
            q, ub = residual_stats(z, c * off[0], b)
            return (1.0 - t) * (1.0 - t) * q / (2.0 * c)
        return quadratic
    return lambda theta, z, off, c, b, t: loss_fy_gap(theta, z, off, t)
