"""The elastic-net family (coordinates = features, a = coef_): Lasso, ElasticNet, Ridge.

g(a) = l1 |a| + l2/2 a^2, on |a| <= bound: with l2 = 0 (the Lasso) the bounded
support B = P(0)/l1 makes the conjugate finite ("Lipschitzing", Dünner et al.).
"""

import math
from typing import NamedTuple

import numpy as np
from numba.extending import register_jitable

from solvers.glm.models.base import Math, Model


class ElasticNetTheta(NamedTuple):
    """g(a) = l1 |a| + l2/2 a^2, on |a| <= bound (finite only when l2 = 0)."""

    l1: float
    l2: float
    bound: float


@register_jitable
def _g(theta, a):
    return theta.l1 * abs(a) + 0.5 * theta.l2 * a * a


@register_jitable
def _conj(theta, x):
    excess = abs(x) - theta.l1
    if excess <= 0.0:
        return 0.0
    if theta.l2 > 0.0:
        return excess * excess / (2.0 * theta.l2)
    return theta.bound * excess  # the bounded support makes g* finite


@register_jitable
def _gap(theta, a, s):
    return a * s + _g(theta, a) + _conj(theta, -s)


@register_jitable
def _update(theta, a, s, L):
    t = L * a - s
    denom = L + theta.l2
    if denom <= 0.0:
        return 0.0  # an all-zero coordinate: g alone decides
    if t > theta.l1:
        x = (t - theta.l1) / denom
    elif t < -theta.l1:
        x = (t + theta.l1) / denom
    else:
        x = 0.0
    return min(max(x, -theta.bound), theta.bound)


@register_jitable
def _zero_interval(theta, a):
    if a == 0.0 and theta.l1 > 0.0:
        return -theta.l1, theta.l1
    return math.inf, -math.inf


@register_jitable
def _reach_gap(theta, a, s, L):
    if theta.l2 > 0.0 or not L > 0.0:  # g* finite without a bound (or a column of zeros): the gap
        return _gap(theta, a, s)
    # a s + l1 |a| written without its cancellation near the optimum (s -> -l1 sign(a)), so that a
    # coordinate at its optimum ranks at 0 or above, never under the zeros by a rounding
    toward = a * s <= 0.0
    excess = abs(s) - theta.l1
    base = abs(a) * (theta.l1 - abs(s) if toward else theta.l1 + abs(s))
    if excess <= 0.0:
        return base
    reach = abs(a) + excess / L
    if toward:  # base + reach excess, with base = -|a| excess
        return excess * excess / L if reach <= theta.bound else (theta.bound - abs(a)) * excess
    return base + min(reach, theta.bound) * excess


ENET = Math(ElasticNetTheta, _g, _conj, _gap, _update, zero_interval=_zero_interval, reach_gap=_reach_gap)


def _lasso_theta(p, P0):
    return ElasticNetTheta(float(p["alpha"]), 0.0, P0 / float(p["alpha"]))


def _enet_theta(p, P0):
    l1 = float(p["alpha"]) * float(p["l1_ratio"])
    l2 = float(p["alpha"]) * (1.0 - float(p["l1_ratio"]))
    return ElasticNetTheta(l1, l2, math.inf if l2 > 0 else P0 / l1)


def _ridge_theta(p, P0):
    return ElasticNetTheta(0.0, 2.0 * float(p["alpha"]), math.inf)


def enet_zero_gap(theta, a):
    """At a_i = 0 the gap is g*(-s_i) = 0 for |s_i| <= l1; elsewhere a point at most."""
    at_zero = a == 0.0
    if theta.l1 <= 0.0:
        at_zero = np.zeros_like(at_zero)
    return np.where(at_zero, -theta.l1, np.inf), np.where(at_zero, theta.l1, -np.inf)


MODELS = [
    Model("lasso", "Lasso", False, ENET, {"alpha": 1.0, "fit_intercept": True}, _lasso_theta,
          curvature=lambda n: 1.0 / n, zero_gap=enet_zero_gap, doc="(1/2n) ||y - Xw||^2 + alpha ||w||_1"),
    Model("elastic_net", "ElasticNet", False, ENET, {"alpha": 1.0, "l1_ratio": 0.5, "fit_intercept": True},
          _enet_theta, curvature=lambda n: 1.0 / n, zero_gap=enet_zero_gap,
          doc="(1/2n) ||y - Xw||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2"),
    Model("ridge", "Ridge", False, ENET, {"alpha": 1.0, "fit_intercept": True}, _ridge_theta,
          curvature=lambda n: 2.0, doc="||y - Xw||^2 + alpha ||w||^2"),
]
