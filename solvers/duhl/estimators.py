"""scikit-learn compatible estimators solved by DuHL.

Each has its scikit-learn namesake's objective and constructor parameters, plus
``device``, ``memory_budget`` and ``selection`` (the DuHL block policy, not
scikit-learn's cyclic/random coordinate order: ours is always a fresh random
permutation per epoch). ``tol`` is on the relative duality gap: the fit stops
once gap <= tol * P(0), P(0) the objective at zero. ``max_iter`` caps epochs.
Fitted: ``coef_``, ``intercept_``, ``n_iter_`` (epochs, at most ``max_iter``),
``dual_gap_``, ``history_`` (the per-round trace as a pandas DataFrame; settings
adjusted for the data, such as a budget that holds everything, are listed in
``history_.attrs["notes"]``). A fit that stops at ``max_iter`` before ``tol``
warns with scikit-learn's ``ConvergenceWarning``, naming the gap reached.
"""

import warnings

import numpy as np
import pandas as pd
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from solvers.duhl.solver import DuHL
from solvers.glm.checks import check_params
from solvers.glm.problems import make_problem

_ACCEPT_SPARSE = ("csr", "csc", "coo")


class _DuHLEstimator(BaseEstimator):
    _model = None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _solver(self):
        """DuHL with the estimator's settings; every error names the estimator's class."""
        name = type(self).__name__
        check_params(name, tol=self.tol, max_iter=self.max_iter, random_state=self.random_state,
                     device=self.device, memory_budget=self.memory_budget, selection=self.selection)
        solver = DuHL(memory_budget=self.memory_budget, selection=self.selection, tol=self.tol,
                      max_epochs=self.max_iter, device=self.device, random_state=self.random_state)
        solver.owner = name
        return solver

    def _problem_kwargs(self):
        raise NotImplementedError

    def _solve(self, X, y, label=""):
        problem = make_problem(self._model, X, y, owner=type(self).__name__, **self._problem_kwargs())
        res = self._solver().solve(problem)
        if res.status != "converged":
            # as scikit-learn does: the model is returned, with a warning that names the gap
            warnings.warn(f"{type(self).__name__}{label} did not converge: relative duality gap "
                          f"{res.rel_gap:.3g} (duality gap {res.gap:.3g}) is above tol={self.tol} after "
                          f"max_iter={self.max_iter} epochs ({res.status}). Increase max_iter, or loosen "
                          "tol.", ConvergenceWarning, stacklevel=3)
        return problem, res

    def _finish(self, results, by_class=False):
        """n_iter_ (epochs, at most max_iter), dual_gap_ and history_ (a "class" column for
        classifiers; notes in its attrs)."""
        self.n_iter_ = min(self.max_iter, max(1, int(np.ceil(max(r.epochs for r in results)))))
        gaps = [r.gap for r in results]
        self.dual_gap_ = gaps[0] if len(gaps) == 1 else np.asarray(gaps)
        traces = [r.trace.assign(**{"class": k}) if by_class else r.trace for k, r in enumerate(results)]
        self.history_ = traces[0] if len(traces) == 1 else pd.concat(traces, ignore_index=True)
        self.history_.attrs["notes"] = sorted({note for r in results for note in r.notes})


class _Regressor(RegressorMixin, _DuHLEstimator):
    def fit(self, X, y):
        X, y = validate_data(self, X, y, accept_sparse=_ACCEPT_SPARSE, order="F",
                             dtype=[np.float64, np.float32], y_numeric=True)
        problem, res = self._solve(X, y)
        self.coef_ = res.a.astype(X.dtype)
        info = problem.info
        self.intercept_ = (float(info["y_mean"] - info["x_mean"] @ res.a)
                           if self.fit_intercept else 0.0)
        self._finish([res])
        return self

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=_ACCEPT_SPARSE, reset=False,
                          dtype=[np.float64, np.float32])
        return np.asarray(X @ self.coef_).ravel() + self.intercept_


class Lasso(_Regressor):
    """(1/2n) ||y - Xw||^2 + alpha ||w||_1, as sklearn.linear_model.Lasso."""

    _model = "lasso"

    def __init__(self, alpha=1.0, *, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, selection="gap"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, fit_intercept=self.fit_intercept)


class ElasticNet(_Regressor):
    """(1/2n) ||y - Xw||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2."""

    _model = "elastic_net"

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, selection="gap"):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, l1_ratio=self.l1_ratio, fit_intercept=self.fit_intercept)


class Ridge(_Regressor):
    """||y - Xw||^2 + alpha ||w||^2, as sklearn.linear_model.Ridge."""

    _model = "ridge"

    def __init__(self, alpha=1.0, *, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, selection="gap"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, fit_intercept=self.fit_intercept)


class _Classifier(ClassifierMixin, _DuHLEstimator):
    def fit(self, X, y):
        X, y = validate_data(self, X, y, accept_sparse=_ACCEPT_SPARSE, order="C",
                             dtype=[np.float64, np.float32])
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.shape[0] < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the "
                             f"data; got only one class: {self.classes_[0]!r}.")
        positives = self.classes_[1:] if self.classes_.shape[0] == 2 else self.classes_
        coefs, intercepts, results = [], [], []
        for cls in positives:
            label = f" (class {cls!r} vs the rest)" if len(positives) > 1 else ""
            problem, res = self._solve(X, (y == cls).astype(np.float64), label)
            d = problem.n_features
            coefs.append(res.v[:d])
            intercepts.append(res.v[d] * self.intercept_scaling if self.fit_intercept else 0.0)
            results.append(res)
        self.coef_ = np.asarray(coefs, dtype=X.dtype)
        self.intercept_ = np.asarray(intercepts, dtype=X.dtype)
        self._finish(results, by_class=True)
        return self

    def _problem_kwargs(self):
        return dict(C=self.C, fit_intercept=self.fit_intercept,
                    intercept_scaling=self.intercept_scaling)

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=_ACCEPT_SPARSE, reset=False,
                          dtype=[np.float64, np.float32])
        scores = np.asarray(X @ self.coef_.T) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class LinearSVC(_Classifier):
    """1/2 ||w||^2 + C sum_i loss(y_i w^T x_i), loss hinge or squared_hinge, solved in the dual.

    Multiclass by one-vs-rest, like scikit-learn's LinearSVC. The intercept is
    an extra feature of value ``intercept_scaling`` (regularised), as liblinear.
    """

    _model = "svm"

    def __init__(self, *, loss="squared_hinge", C=1.0, fit_intercept=True, intercept_scaling=1.0,
                 tol=1e-4, max_iter=1000, random_state=None, device="cpu", memory_budget=None,
                 selection="gap"):
        self.loss = loss
        self.C = C
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(super()._problem_kwargs(), loss=self.loss)


class LogisticRegression(_Classifier):
    """1/2 ||w||^2 + C sum_i log(1 + exp(-y_i w^T x_i)), solved in the dual (liblinear's form).

    Multiclass by one-vs-rest; the intercept is a regularised extra feature of
    value ``intercept_scaling``, as scikit-learn's liblinear solver.
    """

    _model = "logistic"

    def __init__(self, *, C=1.0, fit_intercept=True, intercept_scaling=1.0, tol=1e-4,
                 max_iter=1000, random_state=None, device="cpu", memory_budget=None,
                 selection="gap"):
        self.C = C
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def predict_proba(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        p = expit(scores)  # one-vs-rest, normalised as scikit-learn's ovr
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))
