"""What every model entry is: a ``Math`` (its scalar functions) and a ``Model`` (what the
user names and how it becomes kernel parameters)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from numba.extending import register_jitable


# scalar helpers the models' math shares
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
def xlogx(x):
    if x <= 0.0:
        return 0.0
    return x * math.log(x)


@dataclass(frozen=True)
class Loss:
    """A non-quadratic data term f(v) = sum_k loss_k(v_k), as scalar functions of a sample's
    margin m_k = v_k (the data is stored signed, y_k x_k, so v = A^T a is the margins) and of
    u_k = loss_k'(m_k) (the state z of the kernels holds u = grad f(v); the margins travel
    beside it, after ``off[0]``):

    - ``value(theta, m)``: loss_k(m); ``grad(theta, m)``: u = loss_k'(m);
    - ``curvature(theta, u)``: loss_k''(m) from u (a generalized second derivative where
      loss_k is not twice differentiable: the squared hinge's 2C on the margin's wrong side);
    - ``change(theta, m, u, d)``: loss_k(m + d) - loss_k(m), exactly (the line search's test);
    - ``conj(theta, u)``: loss_k*(u) (the dual value of a rescaled dual point t u);
    - ``change_bound(theta, m, u, d)``: (an upper bound of ``change``, a value ``grad_step`` reuses):
      what the line search tries first, without the exact change's costlier terms;
    - ``grad_step(theta, m + d, u, d, aux)``: u at the margin m + d, from the value ``change_bound``
      gave (the logistic's new sigmoid from exp(-d), no exp of its own);
    - ``smoothness(theta)`` (Python): sup over m of loss_k''(m), the L that makes
      f(v + d) <= f(v) + <grad f(v), d> + L/2 ||d||^2 (CoCoA+'s local subproblems in the primal).
    """

    value: Callable
    grad: Callable
    curvature: Callable
    change: Callable
    conj: Callable
    change_bound: Callable
    grad_step: Callable
    smoothness: Callable


@dataclass(frozen=True)
class Math:
    """A separable g with its conjugate, coordinate gap and exact coordinate update,
    all scalar functions of (theta, ...) compiled by Numba for CPU and CUDA.

    ``shrink_cut``: shrinking (the all-resident working set) leaves out the coordinates
    whose gap is at most shrink_cut times the mean gap, at most that share of the gap in
    all. 0 where a coordinate optimal at a bound has a gap of exactly 0 (Lasso, SVM:
    shrinking drops those); > 0 where no gap is ever 0 but few hold nearly all of it
    (logistic: a_i ~ C exp(-margin) is never at a bound).

    ``reach_gap(theta, a, s, L)`` (optional, for a g made finite by a bounded support): the
    coordinate gap with that support shrunk to the coordinate's reach, |a| plus its proximal step
    (the violation over L, the coordinate's curvature bound). It is what DuHL's gap block ranks
    by: the support's bound P(0)/l1 makes a small violation at 0 outweigh every other gap, though
    its step moves little.

    ``zero_interval(theta, a)`` (optional): the interval (lo, hi) of s on which the
    coordinate gap at ``a`` is exactly 0 (lo > hi: none), the compiled scalar twin of
    ``Model.zero_gap``: what lets a gap pass prove a gap 0 without the coordinate's data.

    ``loss`` (optional): a non-quadratic data term (:class:`Loss`); ``update`` is then the
    exact minimiser of the data term's second-order model along the coordinate (s the
    gradient's, L the curvature's share), which the kernels' Newton pass follows with a
    line search. ``penalty`` (with ``loss``): theta -> (a model's name, its kernel parameters): the
    registered model with the same g under the quadratic data term, what f's quadratic bound is
    solved with."""

    Theta: type
    g: Callable
    g_conj: Callable
    gap: Callable
    update: Callable
    shrink_cut: float = 0.0
    zero_interval: Optional[Callable] = None
    reach_gap: Optional[Callable] = None
    loss: Optional[Loss] = None  # None: the quadratic data term f(v) = c/2 ||v - b||^2
    penalty: Optional[Callable] = None


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
    ``zero_gap(theta, a)``: per coordinate, the interval (lo, hi) of s_i on which the
    coordinate gap at a_i is exactly 0 (empty, lo > hi, where no such interval is
    known): what lets DuHL's gap memory prove a gap without the coordinate's data.
    ``dual``: a classifier solved in the primal (features as coordinates) says False.
    ``options``: the keys a user sets to choose among a family's entries (LogisticRegression's
    ``penalty`` and ``dual``), with their defaults: :mod:`solvers.glm.models.sides` resolves them
    to an entry; make_problem takes an entry's own ``params`` only.
    """

    name: str
    estimator: str
    classifier: bool
    math: Math
    params: Mapping[str, Any]
    theta: Callable[[Mapping[str, Any], float], Any]
    curvature: Optional[Callable[[int], float]] = None
    dual_from_margin: Optional[Callable[[Any, Any], Any]] = None
    zero_gap: Optional[Callable[[Any, Any], Any]] = None
    doc: str = field(default="", compare=False)
    dual: Optional[bool] = None  # coordinates = samples (solved in the dual); None: as ``classifier``
    options: Mapping[str, Any] = field(default_factory=dict)  # what picks an entry of the family (penalty, dual)

    @property
    def dual_form(self) -> bool:
        """Whether the coordinates are samples (the dual side), else features (the primal)."""
        return self.classifier if self.dual is None else bool(self.dual)


# the named parameters every classifier shares (its intercept as a penalised feature, as liblinear)
CLASSIFIER_PARAMS = {"C": 1.0, "fit_intercept": True, "intercept_scaling": 1.0}
