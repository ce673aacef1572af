"""The model registry: each model is ONE entry, with its scalar math written once.

Every model is put in the DuHL paper's primal-dual form

    minimize_a  O(a) = f(A a) + sum_i g_i(a_i),      v = A a,   u = grad f(v)
    gap_i = a_i <A_i, u> + g_i(a_i) + g_i*(-<A_i, u>)  >= 0

with a quadratic data term f(v) = c/2 ||v - b||^2 (b centred and the mean of v
removed when an unpenalised intercept is fitted). A model's entry says how:

==============  ====================  =========================  ===============================
model           estimator             coordinates (columns of A)  g_i(a)
==============  ====================  =========================  ===============================
lasso           Lasso                 features, a = coef_         alpha |a| on |a| <= P(0)/alpha
elastic_net     ElasticNet            features, a = coef_         l1 |a| + l2/2 a^2
ridge           Ridge                 features, a = coef_         alpha a^2
svm             LinearSVC             samples, a = dual vars      -a on [0, C] (hinge);
                                                                  -a + a^2/(4C), a >= 0 (squared)
logistic        LogisticRegression    samples, a = dual vars      a log a + (C-a) log(C-a) - C log C
==============  ====================  =========================  ===============================

The kernels see a model only through ``theta``, a NamedTuple of its kernel
parameters (named: ``theta.l1``, ``theta.C``), and four scalar functions that
dispatch on theta's type: :func:`g_value`, :func:`g_conj`, :func:`coord_gap`,
:func:`coord_update`. In Python they look the entry up; under Numba (CPU and
CUDA) an ``overload`` resolves them at compile time, so each kernel is
specialised to one model with its math inlined. A theta of no registered
model raises (in Python and at compile time).

Adding a model with a separable regulariser: a NamedTuple of its kernel
parameters, its g / g* / exact coordinate update as ``register_jitable``
functions, and one ``Model`` entry in ``MODELS`` (with a conf/model/*.yaml).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

import numpy as np
from numba.core.errors import TypingError
from numba.extending import overload, register_jitable

_NEWTON_ITERS = 60
_NEWTON_TOL = 1e-12


# ------------------------------------------------------------------ scalar helpers
@register_jitable
def sigmoid(t):
    if t >= 0.0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)


@register_jitable
def softplus(t):
    """log(1 + exp(t)) without overflow (the logistic loss of margin -t)."""
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@register_jitable
def _xlogx(x):
    if x <= 0.0:
        return 0.0
    return x * math.log(x)


# ------------------------------------------------------- the elastic-net family
class ElasticNetTheta(NamedTuple):
    """g(a) = l1 |a| + l2/2 a^2, on |a| <= bound (finite only when l2 = 0: "Lipschitzing")."""

    l1: float
    l2: float
    bound: float


@register_jitable
def _enet_g(theta, a):
    return theta.l1 * abs(a) + 0.5 * theta.l2 * a * a


@register_jitable
def _enet_conj(theta, x):
    excess = abs(x) - theta.l1
    if excess <= 0.0:
        return 0.0
    if theta.l2 > 0.0:
        return excess * excess / (2.0 * theta.l2)
    return theta.bound * excess  # the bounded support makes g* finite


@register_jitable
def _enet_gap(theta, a, s):
    return a * s + _enet_g(theta, a) + _enet_conj(theta, -s)


@register_jitable
def _enet_update(theta, a, s, L):
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


# -------------------------------------------------------------------- SVM dual
class SVMTheta(NamedTuple):
    """g(a) = -a on [0, C] (hinge), or -a + a^2/(4C) on a >= 0 (squared hinge: squared = 1)."""

    C: float
    squared: float


@register_jitable
def _svm_g(theta, a):
    if theta.squared:
        return -a + a * a / (4.0 * theta.C)
    return -a


@register_jitable
def _svm_conj(theta, x):
    h = max(0.0, x + 1.0)
    if theta.squared:
        return theta.C * h * h
    return theta.C * h


@register_jitable
def _svm_gap(theta, a, s):
    if theta.squared:
        return a * s + _svm_g(theta, a) + _svm_conj(theta, -s)
    # the generic formula's value, written as the paper does (no cancellation)
    return theta.C * max(0.0, 1.0 - s) - a * (1.0 - s)


@register_jitable
def _svm_update(theta, a, s, L):
    if theta.squared:
        return max((L * a - s + 1.0) / (L + 0.5 / theta.C), 0.0)
    if L <= 0.0:
        return theta.C if s < 1.0 else 0.0
    return min(max(a - (s - 1.0) / L, 0.0), theta.C)


# --------------------------------------------------------------- logistic dual
class LogisticTheta(NamedTuple):
    """g(a) = a log a + (C - a) log(C - a) - C log C on [0, C] (g(0) = 0)."""

    C: float


@register_jitable
def _logistic_g(theta, a):
    return _xlogx(a) + _xlogx(theta.C - a) - _xlogx(theta.C)


@register_jitable
def _logistic_conj(theta, x):
    return theta.C * softplus(x)


@register_jitable
def _logistic_gap(theta, a, s):
    return a * s + _logistic_g(theta, a) + _logistic_conj(theta, -s)


@register_jitable
def _logistic_update(theta, a, s, L):
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
    return C * sigmoid(t)


# ------------------------------------------------------------------- the entries
@dataclass(frozen=True)
class Math:
    """A separable g with its conjugate, coordinate gap and exact coordinate update,
    all scalar functions of (theta, ...) compiled by Numba for CPU and CUDA."""

    Theta: type
    g: Callable
    g_conj: Callable
    gap: Callable
    update: Callable


ENET = Math(ElasticNetTheta, _enet_g, _enet_conj, _enet_gap, _enet_update)
SVM = Math(SVMTheta, _svm_g, _svm_conj, _svm_gap, _svm_update)
LOGISTIC = Math(LogisticTheta, _logistic_g, _logistic_conj, _logistic_gap, _logistic_update)


@dataclass(frozen=True)
class Model:
    """One model: what the user names, what the kernels compute.

    ``params``: make_problem's named parameters with their defaults (checked by
    ``solvers.glm.checks`` rules of the same names). ``theta(params, P0)`` gives the
    kernel parameters. Regression models take ``curvature`` c of f = c/2 ||Xw - y||^2
    (c = 1/n as scikit-learn's Lasso, or 2 for Ridge's ||y - Xw||^2). Classifiers
    (coordinates = samples, solved in the dual) have ``dual_from_margin``: the dual
    variable the KKT conditions give a sample of margin y <w, x> (the peers' w is
    scored with it).
    """

    name: str
    estimator: str
    classifier: bool
    math: Math
    params: Mapping[str, Any]
    theta: Callable[[Mapping[str, Any], float], Any]
    curvature: Optional[Callable[[int], float]] = None
    dual_from_margin: Optional[Callable[[Any, np.ndarray], np.ndarray]] = None
    doc: str = field(default="", compare=False)


def _lasso_theta(p, P0):
    return ElasticNetTheta(float(p["alpha"]), 0.0, P0 / float(p["alpha"]))


def _enet_theta(p, P0):
    l1 = float(p["alpha"]) * float(p["l1_ratio"])
    l2 = float(p["alpha"]) * (1.0 - float(p["l1_ratio"]))
    return ElasticNetTheta(l1, l2, math.inf if l2 > 0 else P0 / l1)


def _hinge_dual(theta, m):
    return np.where(m < 1.0, theta.C, 0.0)  # margin points refined by the caller if it can


def _sqhinge_dual(theta, m):
    return np.maximum(0.0, 2.0 * theta.C * (1.0 - m))


def _svm_dual(theta, m):
    return (_sqhinge_dual if theta.squared else _hinge_dual)(theta, m)


def _logistic_dual(theta, m):
    return theta.C / (1.0 + np.exp(np.clip(m, -700, 700)))


_CLASSIFIER_PARAMS = {"C": 1.0, "fit_intercept": True, "intercept_scaling": 1.0}

MODELS: Dict[str, Model] = {m.name: m for m in (
    Model("lasso", "Lasso", False, ENET, {"alpha": 1.0, "fit_intercept": True}, _lasso_theta,
          curvature=lambda n: 1.0 / n, doc="(1/2n) ||y - Xw||^2 + alpha ||w||_1"),
    Model("elastic_net", "ElasticNet", False, ENET,
          {"alpha": 1.0, "l1_ratio": 0.5, "fit_intercept": True}, _enet_theta,
          curvature=lambda n: 1.0 / n,
          doc="(1/2n) ||y - Xw||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2"),
    Model("ridge", "Ridge", False, ENET, {"alpha": 1.0, "fit_intercept": True},
          lambda p, P0: ElasticNetTheta(0.0, 2.0 * float(p["alpha"]), math.inf),
          curvature=lambda n: 2.0, doc="||y - Xw||^2 + alpha ||w||^2"),
    Model("svm", "LinearSVC", True, SVM, {**_CLASSIFIER_PARAMS, "loss": "hinge"},
          lambda p, P0: SVMTheta(float(p["C"]), float(p["loss"] == "squared_hinge")),
          dual_from_margin=_svm_dual, doc="1/2 ||w||^2 + C sum hinge or squared hinge, in the dual"),
    Model("logistic", "LogisticRegression", True, LOGISTIC, dict(_CLASSIFIER_PARAMS),
          lambda p, P0: LogisticTheta(float(p["C"])), dual_from_margin=_logistic_dual,
          doc="1/2 ||w||^2 + C sum log(1 + exp(-y x^T w)), in the dual"),
)}

_MATH: Dict[type, Math] = {m.math.Theta: m.math for m in MODELS.values()}


def get_model(name: str) -> Model:
    """The registry entry of ``name``; a ValueError listing the models otherwise."""
    if name not in MODELS:
        raise ValueError(f"The 'model' parameter must be one of {tuple(MODELS)}. Got {name!r} instead.")
    return MODELS[name]


def math_of(theta) -> Math:
    """The scalar math of a theta (a NamedTuple instance, or its Numba type)."""
    cls = getattr(theta, "instance_class", type(theta))
    if cls not in _MATH:
        raise TypeError(f"no model has kernel parameters of type {cls.__name__}: "
                        f"register its Model in solvers.glm.models.MODELS")
    return _MATH[cls]


# ------------------------------------------- the scalar functions the kernels call
def g_value(theta, a):
    """g_i(a_i)."""
    return math_of(theta).g(theta, a)


def g_conj(theta, x):
    """g_i*(x), the convex conjugate."""
    return math_of(theta).g_conj(theta, x)


def coord_gap(theta, a, s):
    """gap_i = a s + g(a) + g*(-s), with s = <A_i, u>; >= 0 up to round-off."""
    return math_of(theta).gap(theta, a, s)


def coord_update(theta, a, s, L):
    """Exact minimiser of  s (x - a) + L/2 (x - a)^2 + g(x)  over x.

    s = <A_i, u> and L = c ||A_i - mu_i||^2 make this the exact coordinate
    minimisation of O, because f is quadratic.
    """
    return math_of(theta).update(theta, a, s, L)


def _math_for_numba(theta):
    try:
        return math_of(theta)
    except TypeError as error:
        raise TypingError(str(error)) from None


@overload(g_value)
def _g_value(theta, a):
    return _math_for_numba(theta).g


@overload(g_conj)
def _g_conj(theta, x):
    return _math_for_numba(theta).g_conj


@overload(coord_gap)
def _coord_gap(theta, a, s):
    return _math_for_numba(theta).gap


@overload(coord_update)
def _coord_update(theta, a, s, L):
    return _math_for_numba(theta).update


def source_digest() -> int:
    """A hash of this file: compiled kernels that inline the model math key their
    on-disk cache on it (Numba keys its cache on the kernel's own file only)."""
    return int.from_bytes(hashlib.blake2b(Path(__file__).read_bytes(), digest_size=7).digest(), "big")

