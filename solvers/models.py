"""Each model's scalar math, written once.

Every generalized linear model here is put in the DuHL paper's primal-dual form

    minimize_a  O(a) = f(A a) + sum_i g_i(a_i),      v = A a,   u = grad f(v)
    gap_i = a_i <A_i, u> + g_i(a_i) + g_i*(-<A_i, u>)  >= 0

with a quadratic data term f(v) = c/2 ||v - b||^2 (b centred and the mean of v
removed when an unpenalised intercept is fitted). The functions below are plain
scalar Python registered with ``numba.extending.register_jitable``: the CPU
kernels (``solvers.kernels.cpu``) and the CUDA kernels compile the very same
source, and plain Python can call them too (tests, the CUDA simulator).

Notation map (scikit-learn <-> paper):

============  =========================  ===================================
model          coordinates (columns of A)  g_i(a)
============  =========================  ===================================
Lasso          features, a = coef_         alpha |a|, |a| <= B = P(0)/alpha
ElasticNet     features, a = coef_         l1 |a| + l2/2 a^2
Ridge          features, a = coef_         alpha a^2     (l1 = 0, l2 = 2 alpha)
LinearSVC      samples, a = dual vars      -a on [0, C] (hinge);
                                           -a + a^2/(4C), a >= 0 (squared hinge)
Logistic       samples, a = dual vars      a log a + (C-a) log(C-a) - C log C
============  =========================  ===================================

``params`` are three floats ``p0, p1, p2`` whose meaning depends on the model:
ENET: (l1, l2, bound B), HINGE / SQHINGE / LOGISTIC: (C, unused, unused).
"""

import math

from numba.extending import register_jitable

ENET = 0
HINGE = 1
SQHINGE = 2
LOGISTIC = 3

_NEWTON_ITERS = 60
_NEWTON_TOL = 1e-12


@register_jitable
def _sigmoid(t):
    if t >= 0.0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)


@register_jitable
def _softplus(t):
    """log(1 + exp(t)) without overflow."""
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@register_jitable
def _xlogx(x):
    if x <= 0.0:
        return 0.0
    return x * math.log(x)


@register_jitable
def g_value(model, a, p0, p1, p2):
    """g_i(a_i)."""
    if model == ENET:
        return p0 * abs(a) + 0.5 * p1 * a * a
    if model == HINGE:
        return -a
    if model == SQHINGE:
        return -a + a * a / (4.0 * p0)
    # LOGISTIC: the constant -C log C makes g(0) = 0.
    return _xlogx(a) + _xlogx(p0 - a) - _xlogx(p0)


@register_jitable
def g_conj(model, x, p0, p1, p2):
    """g_i*(x), the convex conjugate."""
    if model == ENET:
        excess = abs(x) - p0
        if excess <= 0.0:
            return 0.0
        if p1 > 0.0:
            return excess * excess / (2.0 * p1)
        return p2 * excess  # bounded support |a| <= B ("Lipschitzing")
    if model == HINGE:
        return p0 * max(0.0, x + 1.0)
    if model == SQHINGE:
        h = max(0.0, x + 1.0)
        return p0 * h * h
    return p0 * _softplus(x)


@register_jitable
def coord_gap(model, a, s, p0, p1, p2):
    """gap_i = a s + g(a) + g*(-s), with s = <A_i, u>; >= 0 up to round-off."""
    if model == HINGE:
        # same value as the generic formula, written as the paper does
        return p0 * max(0.0, 1.0 - s) - a * (1.0 - s)
    return a * s + g_value(model, a, p0, p1, p2) + g_conj(model, -s, p0, p1, p2)


@register_jitable
def _logistic_update(a, s, L, C):
    """argmin_x  x log x + (C-x) log(C-x) + s (x-a) + L/2 (x-a)^2 on (0, C).

    Solved in the log-odds t = log(x/(C-x)), where the optimality condition
    phi(t) = t + s + L (C sigmoid(t) - a) = 0 has 1 <= phi' <= 1 + L C / 4 and a
    finite bracket, so Newton safeguarded by bisection always converges (the
    same idea as liblinear's dual logistic solver).
    """
    lo = -s - L * (C - a)
    hi = -s + L * a
    if a <= 0.0:
        t = lo
    elif a >= C:
        t = hi
    else:
        t = math.log(a) - math.log(C - a)
        t = min(max(t, lo), hi)
    for _ in range(_NEWTON_ITERS):
        sig = _sigmoid(t)
        phi = t + s + L * (C * sig - a)
        if phi > 0.0:
            hi = t
        else:
            lo = t
        dphi = 1.0 + L * C * sig * (1.0 - sig)
        t_new = t - phi / dphi
        if t_new <= lo or t_new >= hi:
            t_new = 0.5 * (lo + hi)
        if abs(t_new - t) <= _NEWTON_TOL * (1.0 + abs(t)):
            t = t_new
            break
        t = t_new
    return C * _sigmoid(t)


@register_jitable
def coord_update(model, a, s, L, p0, p1, p2):
    """Exact minimiser of  s (x - a) + L/2 (x - a)^2 + g(x)  over x.

    s = <A_i, u> and L = c ||A_i||^2 (centred) make this the exact coordinate
    minimisation of O, because f is quadratic.
    """
    if model == ENET:
        t = L * a - s
        denom = L + p1
        if denom <= 0.0:
            return 0.0  # an all-zero coordinate: g alone decides
        if t > p0:
            x = (t - p0) / denom
        elif t < -p0:
            x = (t + p0) / denom
        else:
            x = 0.0
        return min(max(x, -p2), p2)
    if model == HINGE:
        if L <= 0.0:
            return p0 if s < 1.0 else 0.0
        x = a - (s - 1.0) / L
        return min(max(x, 0.0), p0)
    if model == SQHINGE:
        x = (L * a - s + 1.0) / (L + 0.5 / p0)
        return max(x, 0.0)
    return _logistic_update(a, s, L, p0)
