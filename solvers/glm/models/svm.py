"""LinearSVC in the dual (coordinates = samples, a = dual variables): the hinge and the
squared hinge loss."""

import math
from typing import NamedTuple

import numpy as np
from numba.extending import register_jitable

from solvers.glm.models.base import CLASSIFIER_PARAMS, Math, Model


class SVMTheta(NamedTuple):
    """g(a) = -a on [0, C] (hinge), or -a + a^2/(4C) on a >= 0 (squared hinge: squared = 1)."""

    C: float
    squared: float


@register_jitable
def _g(theta, a):
    if theta.squared:
        return -a + a * a / (4.0 * theta.C)
    return -a


@register_jitable
def _conj(theta, x):
    h = max(0.0, x + 1.0)
    if theta.squared:
        return theta.C * h * h
    return theta.C * h


@register_jitable
def _gap(theta, a, s):
    if theta.squared:
        return a * s + _g(theta, a) + _conj(theta, -s)
    # the generic formula's value, C max(0, 1 - s) - a (1 - s), as a sum of products of nonnegatives
    # (0 <= a <= C): never below 0 (that form, compiled with a fused multiply-add, gave -1e-19 at a = C on
    # the dense SVM of make bench, which sent the compiled loop's selection past its gap-0 edge to the bits)
    return (theta.C - a) * max(0.0, 1.0 - s) + a * max(0.0, s - 1.0)


@register_jitable
def _update(theta, a, s, L):
    if theta.squared:
        return max((L * a - s + 1.0) / (L + 0.5 / theta.C), 0.0)
    if L <= 0.0:
        return theta.C if s < 1.0 else 0.0
    return min(max(a - (s - 1.0) / L, 0.0), theta.C)


@register_jitable
def _zero_interval(theta, a):
    if a == 0.0:
        return 1.0, math.inf
    if not theta.squared and a == theta.C:
        return -math.inf, 1.0
    return math.inf, -math.inf


SVM = Math(SVMTheta, _g, _conj, _gap, _update, zero_interval=_zero_interval)


def _dual_from_margin(theta, m):
    if theta.squared:
        return np.maximum(0.0, 2.0 * theta.C * (1.0 - m))
    return np.where(m < 1.0, theta.C, 0.0)  # margin points: refined by the caller if it can


def _zero_gap(theta, a):
    """At a_i = 0 the gap is 0 for margins s_i >= 1; at a_i = C (hinge) for s_i <= 1."""
    lo = np.where(a == 0.0, 1.0, np.inf)
    hi = np.where(a == 0.0, np.inf, -np.inf)
    if not theta.squared:
        upper = a == theta.C
        lo, hi = np.where(upper, -np.inf, lo), np.where(upper, 1.0, hi)
    return lo, hi


MODELS = [
    Model("svm", "LinearSVC", True, SVM, {**CLASSIFIER_PARAMS, "loss": "hinge"},
          lambda p, P0: SVMTheta(float(p["C"]), float(p["loss"] == "squared_hinge")),
          dual_from_margin=_dual_from_margin, zero_gap=_zero_gap, options={"penalty": "l2", "dual": "auto"},
          doc="1/2 ||w||^2 + C sum hinge or squared hinge, in the dual"),
]
