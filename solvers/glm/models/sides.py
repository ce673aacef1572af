"""Which registry entry solves a classifier: its primal side (features as coordinates) or its
dual side (samples as coordinates), as scikit-learn's ``dual`` parameter chooses liblinear's
solver.

``LogisticRegression(penalty, dual)`` and ``LinearSVC(penalty, loss, dual)`` name a family
(the registry entries "logistic" and "svm", the dual side) and its ``options``; :func:`resolve`
turns them into one entry and its own parameters:

===========  ==============  ==========  ===================  ====================
family       loss            penalty     dual=True            dual=False
===========  ==============  ==========  ===================  ====================
logistic     logistic        l2          logistic             logistic_l2
logistic     logistic        l1          (refused)            logistic_l1
logistic     logistic        elasticnet  (refused)            logistic_elasticnet
svm          hinge           l2          svm                  (refused)
svm          squared_hinge   l2          svm                  svm_l2
svm          squared_hinge   l1          (refused)            svm_l1
===========  ==============  ==========  ===================  ====================

``dual="auto"`` is scikit-learn's rule (1.3+, LinearSVC): the dual when n_samples < n_features
and the combination has one, else the primal when it has one, else the dual. With the data on
disk the file's layout decides instead, where both sides exist: a sample-major (C-order) file
serves the dual, a feature-major (Fortran-order) one the primal. The L2 logistic regression
with a memory budget that holds part of the data takes the dual where its features are coupled
(:func:`feature_coupling` at least ``COUPLED_FEATURES``, as binary features are): there the
primal's blocks of features stalled and the dual won or tied on every set measured, while on
centred features the primal won up to 200x (docs: design decisions, "Which side under a memory
budget"). Refused combinations raise scikit-learn's own message.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from solvers.glm.checks import Boolean, Either, Options, check

# (family, loss, penalty) -> {dual: entry}
SIDES = {
    ("logistic", "logistic_regression", "l2"): {True: "logistic", False: "logistic_l2"},
    ("logistic", "logistic_regression", "l1"): {False: "logistic_l1"},
    ("logistic", "logistic_regression", "elasticnet"): {False: "logistic_elasticnet"},
    ("svm", "hinge", "l2"): {True: "svm"},
    ("svm", "squared_hinge", "l2"): {True: "svm", False: "svm_l2"},
    ("svm", "squared_hinge", "l1"): {False: "svm_l1"},
}
PENALTIES = {"logistic": ("l1", "l2", "elasticnet"), "svm": ("l1", "l2")}
# the entries a user reaches through a family's options only (not named themselves: no config of their own)
OPTION_ENTRIES = frozenset(entry for sides in SIDES.values() for entry in sides.values()) - set(PENALTIES)
DUAL_RULE = Either("auto", Boolean())
# over 1 takes two columns or more along the mean row's direction: one alone (an uncentred feature) is coupled to none
COUPLED_FEATURES = 2.0


def feature_coupling(X) -> float:
    """sum_j cos^2(x_j, 1) over X's columns x_j (n x d, dense or scipy sparse): a lower bound on
    the top eigenvalue of X's column-normalised Gram matrix, whose mean eigenvalue is 1, from the
    direction of the all-ones vector. About d / n for centred features; for binary ones (one-hot
    fields, words) the mean number of non-zeros a row. Coordinate descent over coupled features
    (the primal side) needs many epochs; the bound on its epochs over the samples (the dual,
    SDCA's) does not depend on this coupling."""
    n, d = X.shape
    if sp.issparse(X):
        if not X.has_canonical_format:  # duplicate entries add up before they are squared
            X = sp.csr_matrix(X, copy=True)
            X.sum_duplicates()
        sums = np.asarray(X.sum(axis=0)).ravel()
        squares = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    else:
        sums, squares = X.sum(axis=0), np.einsum("ij,ij->j", X, X)
    some = squares > 0
    return float(np.sum(sums[some] ** 2 / squares[some])) / n


def weighs_coupling(family: str, penalty: str, dual) -> bool:
    """Whether dual="auto" weighs the data's :func:`feature_coupling` under a memory budget: the
    L2 logistic regression with dual="auto" (otherwise no pass over the data is needed)."""
    return family == "logistic" and penalty == "l2" and dual == "auto"


def _unsupported(penalty, loss, dual, detail):
    return ValueError(f"Unsupported set of arguments: {detail}, Parameters: penalty={penalty!r}, loss={loss!r}, "
                      f"dual={dual!r}")


def entry_for(family: str, penalty: str, loss: str, dual: bool) -> str:
    """The entry of an explicit side; scikit-learn's ValueError where the combination has none."""
    sides = SIDES.get((family, loss, penalty))
    if sides is None:
        raise _unsupported(penalty, loss, dual,
                           f"The combination of penalty={penalty!r} and loss={loss!r} is not supported")
    if dual not in sides:
        raise _unsupported(penalty, loss, dual, f"The combination of penalty={penalty!r} and loss={loss!r} "
                                                f"are not supported when dual={dual}")
    return sides[dual]


def choose_dual(family: str, penalty: str, loss: str, n_samples: int, n_features: int,
                layout: Optional[str] = None, coupling: Optional[float] = None) -> Tuple[bool, str]:
    """dual="auto": (the side, why). ``layout``: "samples" or "features" for data on disk (the
    side its file serves, where the combination has it), None in RAM. ``coupling``: the data's
    :func:`feature_coupling` where a memory budget holds part of it, else None."""
    sides = SIDES.get((family, loss, penalty), {})
    if len(sides) == 1:
        dual = next(iter(sides))
        return dual, (f"penalty={penalty!r} with loss={loss!r} has only the {'dual' if dual else 'primal'} "
                      "formulation")
    if layout is not None:
        dual = layout == "samples"
        return dual, (f"the data on disk is {'sample' if dual else 'feature'}-major, which the "
                      f"{'dual' if dual else 'primal'} formulation reads")
    budget = coupling is not None and family == "logistic"
    if budget and coupling >= COUPLED_FEATURES:
        return True, (f"the memory budget holds part of the data and its features are coupled "
                      f"(sum_j cos^2(x_j, 1) = {coupling:.3g} >= {COUPLED_FEATURES:g})")
    prefer = n_samples < n_features
    dual = prefer if prefer in sides else not prefer  # scikit-learn's: the other side if need be
    why = f"n_samples={n_samples} {'<' if prefer else '>='} n_features={n_features}"
    return dual, why + (f" (the memory budget holds part of the data; its features' coupling "
                        f"sum_j cos^2(x_j, 1) = {coupling:.3g} < {COUPLED_FEATURES:g})" if budget else "")


def resolve(family: str, params: Mapping[str, Any], n_samples: int, n_features: int, owner: Optional[str] = None,
            layout: Optional[str] = None, coupling: Optional[float] = None) -> Tuple[str, dict, str]:
    """(entry, its parameters, a note saying the side and why) for a family ("logistic" or "svm")
    and ``params``: the family's parameters and options (``penalty``, ``dual``, ``l1_ratio``). The
    options are checked here (errors name ``owner``, default the family's estimator).
    ``layout`` and ``coupling``: see :func:`choose_dual`."""
    from solvers.glm.models import get_model  # (this module is part of the registry package)

    head = get_model(family)
    owner = owner or head.estimator
    values = {**head.params, **head.options, **params}
    penalty = values.pop("penalty")
    check(owner, "penalty", penalty, Options(PENALTIES[family]))
    dual = values.pop("dual")
    check(owner, "dual", dual, DUAL_RULE)
    l1_ratio = values.pop("l1_ratio", None)
    # the loss checked before it names a side (an unknown one is its own error, not an unsupported combination)
    loss = check(owner, "loss", values.pop("loss")) if family == "svm" else "logistic_regression"
    if isinstance(dual, str):
        dual, why = choose_dual(family, penalty, loss, n_samples, n_features, layout, coupling)
        note = f"dual='auto' chose the {'dual' if dual else 'primal'} formulation: {why}"
    else:
        dual = bool(dual)
        note = f"dual={dual}: the {'dual' if dual else 'primal'} formulation"
    entry = entry_for(family, penalty, loss, dual)
    model = get_model(entry)
    if "l1_ratio" in model.params:
        values["l1_ratio"] = l1_ratio
    if "loss" in model.params:
        values["loss"] = loss
    return entry, {k: v for k, v in values.items() if k in model.params}, note
