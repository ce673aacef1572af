"""L2 logistic regression in the dual (coordinates = samples, a = dual variables), as
liblinear's dual solver."""

import math
from typing import NamedTuple

import numpy as np
from numba.extending import register_jitable

from solvers.glm.models.base import CLASSIFIER_PARAMS, Math, Model, sigmoid, softplus, xlogx

_NEWTON_ITERS = 60
_NEWTON_TOL = 1e-9  # on the log-odds t: tighter costs Newton steps, not accuracy (phi' >= 1)


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
    return a * s + _g(theta, a) + _conj(theta, -s)


@register_jitable
def _update(theta, a, s, L):
    """argmin_x  x log x + (C-x) log(C-x) + s (x-a) + L/2 (x-a)^2 on (0, C).

    Solved in the log-odds t = log(x/(C-x)), where the optimality condition
    phi(t) = t + s + L (C sigmoid(t) - a) = 0 has 1 <= phi' <= 1 + L C / 4 and a
    finite bracket, so Newton safeguarded by bisection always converges (the
    same idea as liblinear's dual logistic solver).
    """
    C = theta.C
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
        sig = sigmoid(t)
        phi = t + s + L * (C * sig - a)
        if phi > 0.0:
            hi = t
        elif phi < 0.0:
            lo = t
        else:
            break
        t_new = t - phi / (1.0 + L * C * sig * (1.0 - sig))
        # converged: test before the safeguard (a step that rounds onto an end of the
        # bracket would otherwise bisect the whole bracket, ~40 halvings back); with
        # phi' >= 1 the step bounds the distance to the root
        if abs(t_new - t) <= _NEWTON_TOL * (1.0 + abs(t)):
            t = t_new
            break
        if t_new <= lo or t_new >= hi:
            t_new = 0.5 * (lo + hi)
        t = t_new
    return C * sigmoid(t)


LOGISTIC = Math(LogisticTheta, _g, _conj, _gap, _update)


def _dual_from_margin(theta, m):
    return theta.C / (1.0 + np.exp(np.clip(m, -700, 700)))


MODELS = [
    Model("logistic", "LogisticRegression", True, LOGISTIC, dict(CLASSIFIER_PARAMS),
          lambda p, P0: LogisticTheta(float(p["C"])), dual_from_margin=_dual_from_margin,
          doc="1/2 ||w||^2 + C sum log(1 + exp(-y x^T w)), in the dual"),
]
