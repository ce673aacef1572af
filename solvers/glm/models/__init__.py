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
:func:`coord_update` (and :func:`shrink_cut`, a constant: how the all-resident
working set leaves out small gaps; :func:`zero_interval`: where a gap is exactly 0).
In Python they look the entry up; under Numba (CPU and
CUDA) an ``overload`` resolves them at compile time, so each kernel is
specialised to one model with its math inlined. A theta of no registered
model raises (in Python and at compile time).

One module per family holds its kernel parameters (a NamedTuple), its math
and its ``Model`` entries: ``elastic_net`` (Lasso, ElasticNet, Ridge), ``svm``,
``logistic``. Adding a model with a separable regulariser is one such module
(or one entry in an existing one), listed in ``FAMILIES`` below, and one
``conf/model/<name>.yaml`` (docs/user-guide/extending.md, "Adding a model").
"""

from __future__ import annotations

import math
from typing import Dict

from numba.core.errors import TypingError
from numba.extending import overload

from solvers.glm.models import elastic_net, logistic, svm
from solvers.glm.models.base import Math, Model, sigmoid, softplus  # noqa: F401 (the package's names)
from solvers.glm.models.elastic_net import ElasticNetTheta  # noqa: F401
from solvers.glm.models.logistic import LogisticTheta  # noqa: F401
from solvers.glm.models.svm import SVMTheta  # noqa: F401

FAMILIES = (elastic_net, svm, logistic)
MODELS: Dict[str, Model] = {m.name: m for family in FAMILIES for m in family.MODELS}
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


def shrink_cut(theta):
    """The model's Math.shrink_cut (a constant of each compiled kernel)."""
    return math_of(theta).shrink_cut


def zero_interval(theta, a):
    """The model's Math.zero_interval at a: (lo, hi) of s with gap 0; (inf, -inf), empty,
    for a model without one."""
    fn = math_of(theta).zero_interval
    return (math.inf, -math.inf) if fn is None else fn(theta, a)


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


@overload(shrink_cut)
def _shrink_cut(theta):
    cut = float(_math_for_numba(theta).shrink_cut)
    return lambda theta: cut


@overload(zero_interval)
def _zero_interval(theta, a):
    fn = _math_for_numba(theta).zero_interval
    if fn is None:
        return lambda theta, a: (math.inf, -math.inf)
    return fn
