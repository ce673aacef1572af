"""The model registry: each model is ONE entry, with its scalar math written once.

Every model is put in the DuHL paper's primal-dual form

    minimize_a  O(a) = f(A a) + sum_i g_i(a_i),      v = A a,   u = grad f(v)
    gap_i = a_i <A_i, u> + g_i(a_i) + g_i*(-<A_i, u>)  >= 0

with a quadratic data term f(v) = c/2 ||v - b||^2 (b centred and the mean of v
removed when an unpenalised intercept is fitted), or for the classifiers solved in the
primal a separable loss of the margins f(v) = C sum_k loss(v_k) (:class:`Loss`). A model's
entry says how:

==============  ====================  =========================  ===============================
model           estimator             coordinates (columns of A)  g_i(a)
==============  ====================  =========================  ===============================
lasso           Lasso                 features, a = coef_         alpha |a| on |a| <= P(0)/alpha
elastic_net     ElasticNet            features, a = coef_         l1 |a| + l2/2 a^2
ridge           Ridge                 features, a = coef_         alpha a^2
svm             LinearSVC             samples, a = dual vars      -a on [0, C] (hinge);
                                                                  -a + a^2/(4C), a >= 0 (squared)
logistic        LogisticRegression    samples, a = dual vars      a log a + (C-a) log(C-a) - C log C
logistic_l1     LogisticRegression    features, a = coef_         |a| on |a| <= P(0) (logistic loss)
logistic_       LogisticRegression    features, a = coef_         l1_ratio |a| + (1-l1_ratio)/2 a^2
elasticnet
logistic_l2     LogisticRegression    features, a = coef_         a^2 / 2 (logistic loss)
svm_l1          LinearSVC             features, a = coef_         |a| on |a| <= P(0) (squared hinge)
svm_l2          LinearSVC             features, a = coef_         a^2 / 2 (squared hinge)
==============  ====================  =========================  ===============================

Which entry a ``LogisticRegression(penalty=..., dual=...)`` or ``LinearSVC`` solves is
:mod:`solvers.glm.models.sides`' choice (scikit-learn's ``dual="auto"``).

The kernels see a model only through ``theta``, a NamedTuple of its kernel
parameters (named: ``theta.l1``, ``theta.C``), and four scalar functions that
dispatch on theta's type: :func:`g_value`, :func:`g_conj`, :func:`coord_gap`,
:func:`coord_update` (and :func:`shrink_cut`, a constant: how the all-resident
working set leaves out small gaps; :func:`zero_interval`: where a gap is exactly 0;
:func:`reach_gap`: the gap DuHL's block ranks by).
A model with a non-quadratic data term adds the scalar functions of its
:class:`Loss` (:func:`loss_value`, :func:`loss_grad`, :func:`loss_curvature`,
:func:`loss_change`, :func:`loss_conj`, :func:`loss_change_bound`, :func:`loss_grad_step`). In Python they look the entry up; under Numba (CPU and
CUDA) an ``overload`` resolves them at compile time, so each kernel is
specialised to one model with its math inlined. A theta of no registered
model raises (in Python and at compile time).

One module per family holds its kernel parameters (a NamedTuple), its math
and its ``Model`` entries: ``elastic_net`` (Lasso, ElasticNet, Ridge), ``svm``,
``logistic`` (both in the dual), ``primal`` (logistic and squared hinge in the primal). Adding a model with a separable regulariser is one such module
(or one entry in an existing one), listed in ``FAMILIES`` below, and one
``conf/model/<name>.yaml`` (docs/user-guide/extending.md, "Adding a model").
"""

from __future__ import annotations

import math
from typing import Dict

from numba.core.errors import TypingError
from numba.extending import overload

from solvers.glm.models import elastic_net, logistic, primal, svm
from solvers.glm.models.base import Loss, Math, Model, sigmoid, softplus  # noqa: F401 (the package's names)
from solvers.glm.models.elastic_net import ElasticNetTheta  # noqa: F401
from solvers.glm.models.logistic import LogisticTheta  # noqa: F401
from solvers.glm.models.primal import LogisticPrimalTheta, SquaredHingePrimalTheta  # noqa: F401
from solvers.glm.models.svm import SVMTheta  # noqa: F401

FAMILIES = (elastic_net, svm, logistic, primal)
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


def has_reach(theta) -> bool:
    """Whether the model's g has a bounded support that :func:`reach_gap` shrinks."""
    return math_of(theta).reach_gap is not None


def reach_gap(theta, a, s, L):
    """The coordinate gap with g's bounded support shrunk to the coordinate's reach, |a| plus its
    proximal step at curvature L (Math.reach_gap); the gap itself for a model without one."""
    fn = math_of(theta).reach_gap
    return coord_gap(theta, a, s) if fn is None else fn(theta, a, s, L)


def has_loss(theta) -> bool:
    """Whether the model's data term is a loss of the margins (not the quadratic one)."""
    return math_of(theta).loss is not None


def quadratic_majorant(theta):
    """(L, name, theta') for a model with a Loss: f(v + d) <= f(v) + <grad f(v), d> + L/2 ||d||^2,
    and the registered model ``name`` with kernel parameters theta' whose g is this model's under
    the quadratic data term (what CoCoA+'s local subproblems solve in the primal)."""
    math_ = math_of(theta)
    if math_.loss is None or math_.penalty is None:
        raise TypeError(f"the model of {type(theta).__name__} has no loss with a quadratic majorant")
    name, penalty = math_.penalty(theta)
    return float(math_.loss.smoothness(theta)), name, penalty


def _loss_of(theta):
    loss = math_of(theta).loss
    if loss is None:
        raise TypeError(f"the model of {type(theta).__name__} has the quadratic data term, no Loss")
    return loss


def loss_value(theta, m):
    """loss_k(m), the data term of one sample of margin m."""
    return _loss_of(theta).value(theta, m)


def loss_grad(theta, m):
    """u = loss_k'(m)."""
    return _loss_of(theta).grad(theta, m)


def loss_curvature(theta, u):
    """loss_k''(m) from u = loss_k'(m)."""
    return _loss_of(theta).curvature(theta, u)


def loss_change(theta, m, u, d):
    """loss_k(m + d) - loss_k(m), u = loss_k'(m)."""
    return _loss_of(theta).change(theta, m, u, d)


def loss_conj(theta, u):
    """loss_k*(u)."""
    return _loss_of(theta).conj(theta, u)


def loss_change_bound(theta, m, u, d):
    """(an upper bound of loss_k(m + d) - loss_k(m), a value loss_grad_step reuses)."""
    return _loss_of(theta).change_bound(theta, m, u, d)


def loss_grad_step(theta, m, u, d, aux):
    """loss_k'(m) at m = m0 + d, from u = loss_k'(m0) and loss_change_bound's value."""
    return _loss_of(theta).grad_step(theta, m, u, d, aux)


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


def _loss_for_numba(theta):
    try:
        return _loss_of(theta)
    except TypeError as error:
        raise TypingError(str(error)) from None


@overload(has_reach)
def _has_reach(theta):
    flag = _math_for_numba(theta).reach_gap is not None
    return lambda theta: flag


@overload(reach_gap)
def _reach_gap(theta, a, s, L):
    fn = _math_for_numba(theta).reach_gap
    if fn is None:
        gap = _math_for_numba(theta).gap
        return lambda theta, a, s, L: gap(theta, a, s)
    return fn


@overload(has_loss)
def _has_loss(theta):
    flag = _math_for_numba(theta).loss is not None
    return lambda theta: flag


@overload(loss_value)
def _loss_value(theta, m):
    return _loss_for_numba(theta).value


@overload(loss_grad)
def _loss_grad(theta, m):
    return _loss_for_numba(theta).grad


@overload(loss_curvature)
def _loss_curvature(theta, u):
    return _loss_for_numba(theta).curvature


@overload(loss_change)
def _loss_change(theta, m, u, d):
    return _loss_for_numba(theta).change


@overload(loss_conj)
def _loss_conj(theta, u):
    return _loss_for_numba(theta).conj


@overload(loss_change_bound)
def _loss_change_bound(theta, m, u, d):
    return _loss_for_numba(theta).change_bound


@overload(loss_grad_step)
def _loss_grad_step(theta, m, u, d, aux):
    return _loss_for_numba(theta).grad_step
