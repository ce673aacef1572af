"""L2 logistic regression in the dual (coordinates = samples, a = dual variables), as
liblinear's dual solver."""

import math
from typing import NamedTuple

import numpy as np
from numba.extending import register_jitable

from solvers.glm.models.base import CLASSIFIER_PARAMS, Math, Model, sigmoid, softplus, xlogx

_NEWTON_ITERS = 100  # liblinear's cap; from a warm start one or two steps are the rule
_STEP_TOL = 1.5e-3   # a last step |d| <= 1.5e-3 z, with Chebyshev's correction, lands within 2/3 (d/z)^3 z
                     # = 2.3e-9 z of the root (Newton's alone needed |d| <= 1e-4 z for 5e-9 z: 5% slower)
_SHRINK = 0.1        # Yu et al.'s xi: a step past 0 goes a tenth of the way there instead
_KL_MAX_S = 600.0    # the gap's ratio form while exp(-|s|) >= 1e-261
_SHRINK_CUT = 0.02   # w8a: 5% of the samples hold 87-99% of the gap; 0.02 beat 0.05 and 0.1 (0.2, 0.5 stall)


class LogisticTheta(NamedTuple):
    """g(a) = a log a + (C - a) log(C - a) - C log C on [0, C] (g(0) = 0)."""

    C: float


@register_jitable
def _g(theta, a):
    return xlogx(a) + xlogx(theta.C - a) - xlogx(theta.C)


@register_jitable
def _conj(theta, x):
    return theta.C * softplus(x)


@register_jitable
def _gap(theta, a, s):
    """a s + g(a) + g*(-s) = C KL(a/C || q), q = sigmoid(-s) (the a that s calls for, over C):

        a log(a / (C q)) + (C - a) log((C - a) / (C (1 - q)))

    one exp and two logs (the sum as written takes four or five), and each term is
    O(a/C - q), not O(C), so the round-off of a small gap is small too."""
    C = theta.C
    e = math.exp(-abs(s))
    gap = 0.0
    if abs(s) <= _KL_MAX_S:
        scale = C / (1.0 + e)
        if s >= 0.0:  # C q = C e / (1 + e), C (1 - q) = C / (1 + e)
            cq, cr = scale * e, scale
        else:
            cq, cr = scale, scale * e
        if a > 0.0:
            gap += a * math.log(a / cq)
        if a < C:
            gap += (C - a) * math.log((C - a) / cr)
        return gap
    # exp(-|s|) near underflow: the same terms with the logs of C q and C (1 - q) apart
    log_scale = math.log(C) - math.log1p(e)
    log_cq = log_scale - s if s >= 0.0 else log_scale
    log_cr = log_scale if s >= 0.0 else log_scale + s
    if a > 0.0:
        gap += a * (math.log(a) - log_cq)
    if a < C:
        gap += (C - a) * (math.log(C - a) - log_cr)
    return gap


@register_jitable
def _update(theta, a, s, L):
    """argmin_x  x log x + (C-x) log(C-x) + s (x-a) + L/2 (x-a)^2 on [0, C].

    Yu, Huang & Lin (2011), as liblinear's dual logistic solver: the derivative at
    C/2 says on which side of C/2 the minimiser lies; on that side the sub-problem is
    solved for the smaller of x and C - x (so it keeps its relative precision), with
    its root in (0, C/2], where its derivative

        h(z) = sign s + L (z - z0) + log(z / (C - z))

    is increasing and concave: Newton from the left of the root climbs to it without
    overshooting; a step that would leave the bracket, or more than double z, is taken
    in log z instead (a root many orders of magnitude away: a_i ~ C exp(-margin)). One
    log per Newton step, none to start; the last step adds Chebyshev's correction (no
    log), which accepts steps 15x longer: near the optimum one step meets the tolerance.
    """
    C = theta.C
    half = 0.5 * C
    if L * (half - a) + s >= 0.0:  # h at C/2 is >= 0: x <= C/2, solve for z = x
        sign = 1.0
        z0 = a
    else:                          # solve for z = C - x
        sign = -1.0
        z0 = C - a
    b = sign * s
    if z0 <= 0.0:  # at a bound: the root is below C sigmoid(-b) (the L term only pushes it down)
        z = C * sigmoid(-b)
    elif z0 > half:
        z = 0.1 * z0
    else:
        z = z0
    z = min(z, half)
    lo = 0.0
    hi = half
    for _ in range(_NEWTON_ITERS):
        if z <= 0.0:  # the root is below the smallest float: the bound itself
            z = 0.0
            break
        w = C - z
        h = b + L * (z - z0) + math.log(z / w)
        if h > 0.0:
            hi = z
        elif h < 0.0:
            lo = z
        else:
            break
        r = 1.0 / (L * z * w + C)
        q = -h * w * r  # Newton's step over z; as C / (z (C - z)) it overflowed at a subnormal z,
        d = q * z       # the step was 0 and the update returned a itself
        if abs(q) <= _STEP_TOL:
            # plus Newton's second-order error -h2 d^2 / (2 h1) > 0 (h concave: Newton lands left of
            # the root from either side); left: (h2^2 / (2 h1^2) - h3 / (6 h1)) d^3 <= 2/3 (d/z)^2 d
            z += d + 0.5 * q * q * z * C * (w - z) * r / w
            break
        z_new = z + d
        if z_new <= lo or q > 1.0:
            # far from the root relative to z (a root orders of magnitude away, where h is
            # ~log z): Newton in log z instead, h being convex there (monotone from the
            # right; from the left it lands past the root, then the step above takes over)
            z_new = z * math.exp(min(q, 700.0))
            if z_new == 0.0 and lo == 0.0:  # from the right: the root is below every float
                z = 0.0
                break
        if z_new >= hi:
            z_new = math.sqrt(z * hi)
        elif z_new <= lo:
            z_new = lo + _SHRINK * (z - lo)
        z = z_new
    if sign > 0.0:
        return z
    return C - z


LOGISTIC = Math(LogisticTheta, _g, _conj, _gap, _update, shrink_cut=_SHRINK_CUT)


def _dual_from_margin(theta, m):
    return theta.C / (1.0 + np.exp(np.clip(m, -700, 700)))


MODELS = [
    Model("logistic", "LogisticRegression", True, LOGISTIC, dict(CLASSIFIER_PARAMS),
          lambda p, P0: LogisticTheta(float(p["C"])), dual_from_margin=_dual_from_margin,
          options={"penalty": "l2", "l1_ratio": 0.5, "dual": "auto"},
          doc="1/2 ||w||^2 + C sum log(1 + exp(-y x^T w)), in the dual"),
]
