"""Classifiers in the primal (coordinates = features, a = coef_): logistic regression with an
L1, elastic-net or L2 penalty, and the squared hinge (LinearSVC) with an L1 or L2 penalty, as
liblinear's primal solvers and scikit-learn's ``dual=False``.

    minimize_w  C sum_k loss(y_k <x_k, w>) + l1 ||w||_1 + l2/2 ||w||^2

The data is stored signed (coordinate j holds y_k x_kj over the samples k), so v = A w is the
margins and the data term f(v) = C sum_k loss(v_k) is separable in them. It is not quadratic:
the kernels keep u = grad f(v) as their state z and the margins beside it, and take Newton
steps (the penalty's ``update`` on the data term's second-order model) with a line search
(:mod:`solvers.kernels.cpu`, ``newton_pass_*``). The penalty is the elastic net's g, with its
bounded-support conjugate for a pure L1 penalty (|w_j| <= B = P(0)/l1, "Lipschitzing"), so
every coordinate gap is exact, as the Lasso's. The intercept, when fitted, is one more feature
of value ``intercept_scaling``, penalised as the others (liblinear's, and the dual models'
convention here: the primal and the dual side solve one objective).
"""

import math
from typing import NamedTuple

from numba.extending import register_jitable

from solvers.glm.models.base import CLASSIFIER_PARAMS, Loss, Math, Model, sigmoid, softplus, xlogx
from solvers.glm.models.elastic_net import ENET, ElasticNetTheta, enet_zero_gap

# log1p(p expm1(-d)) while its argument is above this: log1p is well-conditioned there; below it
# (p near 1 and a long step) the two softplus values apart, computed from the margin itself
_LOG1P_SAFE = -0.5


class LogisticPrimalTheta(NamedTuple):
    """f(v) = C sum_k log(1 + exp(-v_k)); g(w) = l1 |w| + l2/2 w^2 on |w| <= bound."""

    l1: float
    l2: float
    bound: float
    C: float


class SquaredHingePrimalTheta(NamedTuple):
    """f(v) = C sum_k max(0, 1 - v_k)^2; g(w) = l1 |w| + l2/2 w^2 on |w| <= bound."""

    l1: float
    l2: float
    bound: float
    C: float


# --------------------------------------------------------------------------- logistic loss ---
@register_jitable
def _logistic_value(theta, m):
    return theta.C * softplus(-m)


@register_jitable
def _logistic_grad(theta, m):
    return -theta.C * sigmoid(-m)


@register_jitable
def _logistic_curvature(theta, u):
    p = -u / theta.C  # sigmoid(-m)
    return theta.C * p * (1.0 - p)


@register_jitable
def _logistic_change(theta, m, u, d):
    """C [softplus(-m - d) - softplus(-m)] = C log(1 - p + p exp(-d)), p = sigmoid(-m) = -u / C:
    one expm1 and one log1p, each term O(d), so a short step's change keeps its precision."""
    x = (-u / theta.C) * math.expm1(-d)
    if x >= _LOG1P_SAFE:  # (False for NaN: 0 times an overflow)
        return theta.C * math.log1p(x)
    return theta.C * (softplus(-m - d) - softplus(-m))


@register_jitable
def _logistic_conj(theta, u):
    """C (p log p + (1 - p) log(1 - p)), p = -u / C in [0, 1] (u = C times a dual variable)."""
    p = -u / theta.C
    if p < 0.0 or p > 1.0:
        return math.inf
    return theta.C * (xlogx(p) + xlogx(1.0 - p))


@register_jitable
def _logistic_change_bound(theta, m, u, d):
    """C (x - x^2/2 + x^3/3) >= C log1p(x), x = p expm1(-d) (for every x > -1: the difference's
    derivative is x^3 / (1 + x)); and expm1(-d), from which the new sigmoid follows."""
    t = math.expm1(-d)
    x = (-u / theta.C) * t
    return theta.C * (x * (1.0 - x * (0.5 - x / 3.0))), t


@register_jitable
def _logistic_grad_step(theta, m, u, d, aux):
    """-C sigmoid(-m) at m = m0 + d from p = sigmoid(-m0) = -u / C and aux = expm1(-d):
    p' = p (1 + aux) / (1 + p aux); from m itself where 1 + p aux is small (p near 1, a long step)."""
    p = -u / theta.C
    q = 1.0 + p * aux
    if 0.5 < q < 1e300:
        return -theta.C * (p * (1.0 + aux) / q)
    return -theta.C * sigmoid(-m)


LOGISTIC_LOSS = Loss(_logistic_value, _logistic_grad, _logistic_curvature, _logistic_change, _logistic_conj,
                     _logistic_change_bound, _logistic_grad_step, smoothness=lambda theta: theta.C / 4.0)


# ---------------------------------------------------------------------- squared hinge loss ---
@register_jitable
def _sqhinge_value(theta, m):
    h = max(0.0, 1.0 - m)
    return theta.C * h * h


@register_jitable
def _sqhinge_grad(theta, m):
    return -2.0 * theta.C * max(0.0, 1.0 - m)


@register_jitable
def _sqhinge_curvature(theta, u):
    return 2.0 * theta.C if u < 0.0 else 0.0  # liblinear's generalized Hessian: samples with m < 1


@register_jitable
def _sqhinge_change(theta, m, u, d):
    h0 = max(0.0, 1.0 - m)
    h1 = max(0.0, 1.0 - m - d)
    return theta.C * (h1 - h0) * (h1 + h0)


@register_jitable
def _sqhinge_conj(theta, u):
    if u > 0.0:
        return math.inf
    return u + u * u / (4.0 * theta.C)


@register_jitable
def _sqhinge_change_bound(theta, m, u, d):
    return _sqhinge_change(theta, m, u, d), 0.0  # exact already: a few flops


@register_jitable
def _sqhinge_grad_step(theta, m, u, d, aux):
    return _sqhinge_grad(theta, m)


SQHINGE_LOSS = Loss(_sqhinge_value, _sqhinge_grad, _sqhinge_curvature, _sqhinge_change, _sqhinge_conj,
                    _sqhinge_change_bound, _sqhinge_grad_step, smoothness=lambda theta: 2.0 * theta.C)


def _enet_penalty(theta):
    return "elastic_net", ElasticNetTheta(theta.l1, theta.l2, theta.bound)



PRIMAL_LOGISTIC = Math(LogisticPrimalTheta, ENET.g, ENET.g_conj, ENET.gap, ENET.update,
                       zero_interval=ENET.zero_interval, reach_gap=ENET.reach_gap,
                       loss=LOGISTIC_LOSS, penalty=_enet_penalty)
PRIMAL_SQHINGE = Math(SquaredHingePrimalTheta, ENET.g, ENET.g_conj, ENET.gap, ENET.update,
                      zero_interval=ENET.zero_interval, reach_gap=ENET.reach_gap,
                      loss=SQHINGE_LOSS, penalty=_enet_penalty)


def _penalty(l1, l2, P0):
    """(l1, l2, bound): the bounded support B = P(0)/l1 where no l2 makes g* finite."""
    return float(l1), float(l2), (P0 / l1 if l2 == 0.0 and l1 > 0.0 else math.inf)


def _theta(cls, l1_of):
    def theta(p, P0):
        l1 = l1_of(p)
        return cls(*_penalty(l1, 1.0 - l1, P0), float(p["C"]))
    return theta


_PARAMS = dict(CLASSIFIER_PARAMS)
_L1, _L2, _RATIO = (lambda p: 1.0), (lambda p: 0.0), (lambda p: float(p["l1_ratio"]))

MODELS = [
    Model("logistic_l1", "LogisticRegression", True, PRIMAL_LOGISTIC, _PARAMS, _theta(LogisticPrimalTheta, _L1),
          zero_gap=enet_zero_gap, dual=False,
          doc="||w||_1 + C sum log(1 + exp(-y x^T w)), in the primal"),
    Model("logistic_elasticnet", "LogisticRegression", True, PRIMAL_LOGISTIC, {**_PARAMS, "l1_ratio": 0.5},
          _theta(LogisticPrimalTheta, _RATIO), zero_gap=enet_zero_gap, dual=False,
          doc="l1_ratio ||w||_1 + (1 - l1_ratio)/2 ||w||^2 + C sum log(1 + exp(-y x^T w)), in the primal"),
    Model("logistic_l2", "LogisticRegression", True, PRIMAL_LOGISTIC, _PARAMS, _theta(LogisticPrimalTheta, _L2),
          zero_gap=enet_zero_gap, dual=False,
          doc="1/2 ||w||^2 + C sum log(1 + exp(-y x^T w)), in the primal"),
    Model("svm_l1", "LinearSVC", True, PRIMAL_SQHINGE, _PARAMS, _theta(SquaredHingePrimalTheta, _L1),
          zero_gap=enet_zero_gap, dual=False,
          doc="||w||_1 + C sum max(0, 1 - y x^T w)^2, in the primal"),
    Model("svm_l2", "LinearSVC", True, PRIMAL_SQHINGE, _PARAMS, _theta(SquaredHingePrimalTheta, _L2),
          zero_gap=enet_zero_gap, dual=False,
          doc="1/2 ||w||^2 + C sum max(0, 1 - y x^T w)^2, in the primal"),
]
