"""scikit-learn compatible estimators solved by DuHL.

Each has its scikit-learn namesake's objective and constructor parameters, plus
``device``, ``memory_budget``, ``host_budget`` and ``selection`` (the DuHL block policy, not
scikit-learn's cyclic/random coordinate order: ours is always a fresh random
permutation per epoch). ``tol`` is on the relative duality gap: the fit stops
once gap <= tol * P(0), P(0) the objective at zero. ``max_iter`` caps epochs.
Fitted: ``coef_``, ``intercept_``, ``n_iter_`` (epochs, at most ``max_iter``),
``dual_gap_``, ``history_`` (the per-round trace as a pandas DataFrame; settings
adjusted for the data, such as a budget that holds everything, are listed in
``history_.attrs["notes"]``). A fit that stops at ``max_iter`` before ``tol``
warns with scikit-learn's ``ConvergenceWarning``, naming the gap reached.

**Data on disk**: ``fit(X, y)`` with X an .npy memory map (``np.load(path, mmap_mode="r")``)
or the path of an .npy, and ``host_budget`` (bytes of RAM for the data: a share such as 0.25,
or a size such as "2GB"), trains from the file through the disk tier
(:mod:`solvers.storage.on_disk`: coordinates read past the page cache, the block in RAM): the
array is never loaded whole. The Lasso family reads features, so its file is in Fortran order
(each column one run on disk); the classifiers in the dual read samples (C order), in the primal
features (Fortran order), and take ``fit_intercept=False`` (the file holds no intercept column);
``dual="auto"`` picks the side the file's order serves. A path with ``host_budget=None``
is read into RAM once (refused when it does not fit); a memory map with ``host_budget=None``
is an in-memory array, as in scikit-learn. ``history_`` then has ``bytes_disk`` and
``disk_s``, the bytes read from disk and the seconds spent reading them. ``predict``,
``decision_function`` and ``score`` take such a path or memory map too (either order), read a
64 MB buffer at a time past the page cache (:func:`solvers.storage.on_disk.linear_scores`).

**Sparse data on disk**: ``fit(store, y)`` with ``store`` a sparse store
(:func:`solvers.storage.sparse_store.open_store`, or what ``tasks.data.libsvm.convert_libsvm``
makes of a LIBSVM file) and a ``host_budget`` trains from it the same way: the classifiers read
its rows (a CSR store), the Lasso family its columns (a CSC store, written once beside a CSR one
by an external transpose). ``predict`` and ``decision_function`` take a store too.
"""

import mmap
import numbers
import os
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import get_scorer
from sklearn.model_selection import check_cv
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from solvers.duhl.budget import holds_part
from solvers.duhl.solver import DuHL
from solvers.storage.files import read_npy_header
from solvers.storage.on_disk import OnDisk, linear_scores
from solvers.storage.reader import DiskMatrix
from solvers.storage.sparse_on_disk import SparseOnDisk
from solvers.storage.sparse_store import SparseStore
from solvers.storage.sparse_transpose import transpose_store
from solvers.glm.checks import check, check_params
from solvers.glm.models import get_model
from solvers.glm.models.sides import feature_coupling, resolve, weighs_coupling
from solvers.glm.problems import make_problem, make_problem_on_disk

_ACCEPT_SPARSE = ("csr", "csc", "coo")


class _DuHLEstimator(BaseEstimator):
    _model = None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _name(self):
        """The class a user called (a LogisticRegressionCV's fits name it, not their own class)."""
        return getattr(self, "_owner", None) or type(self).__name__

    def _solver(self):
        """DuHL with the estimator's settings; every error names the estimator's class."""
        name = self._name()
        check_params(name, tol=self.tol, max_iter=self.max_iter, random_state=self.random_state,
                     device=self.device, memory_budget=self.memory_budget, selection=self.selection,
                     host_budget=self.host_budget)
        solver = DuHL(memory_budget=self.memory_budget, selection=self.selection, tol=self.tol,
                      max_epochs=self.max_iter, device=self.device, random_state=self.random_state,
                      host_budget=self.host_budget)
        solver.owner = name
        return solver

    def _problem_kwargs(self):
        raise NotImplementedError

    def _reads_features(self, fortran, shape):
        """Whether the model's coordinates are features (an .npy on disk must be in Fortran order)."""
        return True

    def _on_disk(self, X):
        """The .npy that X is, with a host_budget (or X a path): its DiskMatrix, after the
        checks; a sparse store (solvers.storage.sparse_store), in the layout the model reads; None
        for data in RAM (a memory map with host_budget None included)."""
        name = type(self).__name__
        if isinstance(X, SparseOnDisk):
            X = X.store
        if isinstance(X, SparseStore):
            check_params(name, host_budget=self.host_budget)
            need = "csc"  # features as coordinates
            if isinstance(self, _Classifier):
                entry, _, _ = self._side(*X.shape, layout="samples")
                if not get_model(entry).dual_form:
                    raise ValueError(f"{name} with penalty={self.penalty!r} solves the primal (features as "
                                     "coordinates), which is not supported from a sparse store yet: fit it "
                                     "from a Fortran-order .npy or in RAM.")
                need = "csr"  # samples as coordinates
            store = X if X.layout == need else transpose_store(X)  # written beside it, once
            self.n_features_in_ = X.shape[1]
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return store
        if isinstance(X, (str, os.PathLike)):
            path, given = os.fspath(X), f"the path {os.fspath(X)!r}"
        elif isinstance(X, np.memmap) and self.host_budget is not None:
            path, given = X.filename, f"a memory map of {X.filename!r}"
        elif self.host_budget is not None:
            raise ValueError(f"The 'host_budget' parameter of {name} applies to data on disk: pass X as "
                             f"np.load(path, mmap_mode='r') or as the path of an .npy, or leave host_budget "
                             f"None. Got {self.host_budget!r} with X a {type(X).__name__} in RAM instead.")
        else:
            return None
        check_params(name, host_budget=self.host_budget)
        try:
            shape, fortran, dtype, offset, _ = read_npy_header(path)
        except FileNotFoundError:
            raise ValueError(f"The 'X' parameter of {name} names no file: {path}.") from None
        except (OSError, ValueError) as error:
            raise ValueError(f"The 'X' parameter of {name} must be an .npy (or its memory map). Got {given}, "
                             f"which is not one ({error}).") from None
        if isinstance(X, np.memmap) and not (isinstance(X.base, mmap.mmap) and X.shape == shape and X.offset == offset
                                             and X.dtype == dtype and (len(shape) < 2 or
                                                                       np.isfortran(X) == fortran)):
            raise ValueError(f"The 'X' parameter of {name} with host_budget must be the whole .npy as "
                             f"np.load(path, mmap_mode='r') maps it. Got {given} of shape {X.shape} (a view "
                             f"or another mapping of its {shape}) instead.")
        if len(shape) != 2 or dtype not in (np.float32, np.float64):
            raise ValueError(f"The 'X' parameter of {name} on disk must be a 2-D float32 or float64 .npy. Got "
                             f"{dtype} of shape {shape} in {path} instead.")
        by_feature = self._reads_features(fortran, shape)
        if fortran != by_feature:
            need, got = ("Fortran", "C") if by_feature else ("C", "Fortran")
            reads = "features (each column" if by_feature else "samples (each row"
            raise ValueError(f"The 'X' parameter of {name} on disk must be a {need}-order .npy: it reads "
                             f"{reads} one contiguous run on disk). Got a {got}-order file {path} instead: "
                             f"write it once in {need} order (np.lib.format.open_memmap(new_path, mode='w+', "
                             f"dtype=..., shape={shape}, fortran_order={by_feature}), filled a block of "
                             f"{'columns' if by_feature else 'rows'} at a time).")
        self.n_features_in_ = shape[1]
        if hasattr(self, "feature_names_in_"):  # from an earlier fit on a DataFrame
            del self.feature_names_in_
        return DiskMatrix(path)

    def _scores(self, X, coef, intercept):
        """X @ coef.T + intercept; X in RAM, or an .npy on disk (its path, or a memory map of the
        whole file) read a buffer at a time past the page cache, never whole in RAM."""
        check_is_fitted(self)
        if isinstance(X, SparseOnDisk):
            X = X.store
        if isinstance(X, SparseStore):  # rows (csr: X's) or columns (csc) read a buffer at a time
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                                 f"{self.n_features_in_} features as input.")
            coef = np.atleast_2d(coef)
            with_data = SparseOnDisk(X)
            try:
                if X.layout == "csr":
                    scores = np.column_stack([with_data @ np.asarray(c, dtype=np.float64) for c in coef])
                else:
                    scores = np.column_stack([with_data.dot_t(np.asarray(c, dtype=np.float64)) for c in coef])
            finally:
                with_data.close()
            return scores + intercept
        path = (os.fspath(X) if isinstance(X, (str, os.PathLike)) else
                X.filename if isinstance(X, np.memmap) and isinstance(X.base, mmap.mmap) else None)
        disk = None
        if path is not None:
            try:
                disk = DiskMatrix(path)
            except (OSError, ValueError) as error:
                if not isinstance(X, np.memmap):
                    raise ValueError(f"The 'X' parameter of {type(self).__name__} must be a 2-D float .npy "
                                     f"(or its memory map). Got the path {path!r} ({error}).") from None
        if disk is not None and isinstance(X, np.memmap) and not (
                X.shape == (disk.shape[::-1] if disk.fortran else disk.shape) and X.offset == disk.offset
                and X.dtype == disk.dtype and np.isfortran(X) == disk.fortran):
            disk.close()  # a view or another mapping of the file: an array like any other
            disk = None
        if disk is None:
            X = validate_data(self, X, accept_sparse=_ACCEPT_SPARSE, reset=False, dtype=[np.float64, np.float32])
            return np.asarray(X @ np.atleast_2d(coef).T) + intercept
        with disk:
            d = disk.shape[0] if disk.fortran else disk.shape[1]
            if d != self.n_features_in_:
                raise ValueError(f"X has {d} features, but {type(self).__name__} is expecting "
                                 f"{self.n_features_in_} features as input.")
            return linear_scores(disk, coef) + intercept

    def _check_y(self, y, n, dtype=None):
        y = check_array(y, ensure_2d=False, dtype=dtype, input_name="y")
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"The 'y' parameter of {type(self).__name__} must hold one value per sample of X "
                             f"({n}). Got shape {y.shape} instead.")
        return y

    def _entry(self):
        """(the registry entry the fit solves, its parameters, a note on the choice or None)."""
        return self._model, self._problem_kwargs(), None

    def _solve(self, X, y, label="", warm=None):
        """Solve the problem on (X, y); X in RAM, a DiskMatrix or a sparse store (a fresh reader per
        problem). ``warm`` (X in RAM): (coordinates solved earlier on the same rows, their C), the start."""
        model, kwargs, note = self._entry()
        if isinstance(X, SparseStore):
            data = SparseOnDisk(X)
            try:
                problem = make_problem_on_disk(model, data, y, owner=self._name(), **kwargs)
                try:
                    res = self._solver().solve(problem)
                finally:
                    problem.A.close()
            finally:
                data.close()
        elif isinstance(X, DiskMatrix):
            data = OnDisk(DiskMatrix(X.path))
            try:
                problem = make_problem_on_disk(model, data, y, owner=self._name(), **kwargs)
                try:
                    res = self._solver().solve(problem)
                finally:
                    problem.A.matrix.close()  # the classifiers read through a second, signed reader
            finally:
                data.matrix.close()
        else:
            problem = make_problem(model, X, y, owner=self._name(), **kwargs)
            res = self._solver().solve(problem, a0=None if warm is None else warm_start(problem, *warm))
        if note is not None:
            res.notes.append(note)
        if res.status != "converged":
            # as scikit-learn does: the model is returned, with a warning that names the gap
            warnings.warn(f"{self._name()}{label} did not converge: relative duality gap "
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


def warm_start(problem, a, C_earlier):
    """The start of a solve at the problem's C from coordinates ``a`` solved at C_earlier (the same
    rows): the dual's variables scaled by the ratio of the Cs (each box [0, C] maps to the new one,
    so the start is feasible); the primal's coefficients as they are, within the L1 bound's support."""
    if problem.dual_form:
        return a * (float(problem.params["C"]) / float(C_earlier))
    bound = getattr(problem.theta, "bound", np.inf)
    return np.clip(a, -bound, bound)


class _Regressor(RegressorMixin, _DuHLEstimator):
    def fit(self, X, y):
        disk = self._on_disk(X)
        if disk is None:
            X, y = validate_data(self, X, y, accept_sparse=_ACCEPT_SPARSE, order="F",
                                 dtype=[np.float64, np.float32], y_numeric=True)
        elif isinstance(disk, SparseStore):
            y, X = self._check_y(y, disk.shape[0], np.float64), disk
        else:
            y, X = self._check_y(y, disk.shape[1], np.float64), disk
            disk.close()  # each problem opens its own reader
        problem, res = self._solve(X, y)
        self.coef_ = res.a.astype(X.value_dtype or np.float64) if isinstance(X, SparseStore) else res.a.astype(X.dtype)
        info = problem.info
        self.intercept_ = (float(info["y_mean"] - info["x_mean"] @ res.a)
                           if self.fit_intercept else 0.0)
        self._finish([res])
        return self

    def predict(self, X):
        """X @ coef_ + intercept_; X may be an .npy on disk (a path or memory map): read in blocks."""
        check_is_fitted(self)
        return self._scores(X, self.coef_, self.intercept_).ravel()


class Lasso(_Regressor):
    """(1/2n) ||y - Xw||^2 + alpha ||w||_1, as sklearn.linear_model.Lasso."""

    _model = "lasso"

    def __init__(self, alpha=1.0, *, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, host_budget=None, selection="gap"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.host_budget = host_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, fit_intercept=self.fit_intercept)


class ElasticNet(_Regressor):
    """(1/2n) ||y - Xw||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2."""

    _model = "elastic_net"

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, host_budget=None, selection="gap"):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.host_budget = host_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, l1_ratio=self.l1_ratio, fit_intercept=self.fit_intercept)


class Ridge(_Regressor):
    """||y - Xw||^2 + alpha ||w||^2, as sklearn.linear_model.Ridge."""

    _model = "ridge"

    def __init__(self, alpha=1.0, *, fit_intercept=True, tol=1e-4, max_iter=1000,
                 random_state=None, device="cpu", memory_budget=None, host_budget=None, selection="gap"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.host_budget = host_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(alpha=self.alpha, fit_intercept=self.fit_intercept)


class _Classifier(ClassifierMixin, _DuHLEstimator):
    """A classifier solved on its primal side (features as coordinates) or its dual side (samples
    as coordinates), as ``dual`` chooses (solvers.glm.models.sides: scikit-learn's rule for
    "auto"); the choice is in ``history_.attrs["notes"]``."""

    _family = None  # the registry family: "logistic" or "svm"

    def _options(self):
        """The family's options (penalty, dual, ...), checked by solvers.glm.models.sides."""
        return dict(penalty=self.penalty, dual=self.dual)

    def _side(self, n_samples, n_features, layout=None, coupling=None):
        self._chosen = resolve(self._family, {**self._problem_kwargs(), **self._options()}, n_samples, n_features,
                               owner=self._name(), layout=layout, coupling=coupling)
        return self._chosen

    def _entry(self):
        return self._chosen

    def _side_in_ram(self, X):
        data_bytes = X.data.nbytes + X.nnz * (X.row if X.format == "coo" else X.indices).itemsize \
            if sp.issparse(X) else X.nbytes
        weighs = weighs_coupling(self._family, self.penalty, self.dual) and holds_part(self.memory_budget, data_bytes)
        return self._side(*X.shape, coupling=feature_coupling(X) if weighs else None)

    def _reads_features(self, fortran, shape):
        entry, _, _ = self._side(shape[0], shape[1], layout="features" if fortran else "samples")
        return not get_model(entry).dual_form

    def fit(self, X, y):
        self._chosen = None
        disk = self._on_disk(X)
        if disk is None:
            X, y = validate_data(self, X, y, accept_sparse=_ACCEPT_SPARSE, order="C",
                                 dtype=[np.float64, np.float32])
            check_params(type(self).__name__, memory_budget=self.memory_budget)  # before it picks the side
            self._side_in_ram(X)
        elif isinstance(disk, SparseStore):
            y, X = self._check_y(y, disk.shape[0]), disk
        else:
            y, X = self._check_y(y, disk.shape[1] if disk.fortran else disk.shape[0]), disk
            disk.close()
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
            w = res.v if problem.dual_form else res.a  # the dual side's w = A^T a; the primal's a itself
            coefs.append(w[:d])
            intercepts.append(w[d] * self.intercept_scaling if self.fit_intercept else 0.0)
            results.append(res)
        dtype = (X.value_dtype or np.float64) if isinstance(X, SparseStore) else X.dtype
        self.coef_ = np.asarray(coefs, dtype=dtype)
        self.intercept_ = np.asarray(intercepts, dtype=dtype)
        self._finish(results, by_class=True)
        return self

    def _problem_kwargs(self):
        return dict(C=self.C, fit_intercept=self.fit_intercept,
                    intercept_scaling=self.intercept_scaling)

    def decision_function(self, X):
        """X @ coef_.T + intercept_; X may be an .npy on disk (a path or memory map): read in blocks."""
        check_is_fitted(self)
        scores = self._scores(X, self.coef_, self.intercept_)
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class LinearSVC(_Classifier):
    """penalty(w) + C sum_i loss(y_i w^T x_i), as sklearn.svm.LinearSVC: loss hinge or squared_hinge,
    penalty 1/2 ||w||^2 ("l2") or ||w||_1 ("l1", squared hinge only).

    ``dual``: "auto" (default), True or False, as scikit-learn's: the dual (samples as
    coordinates: liblinear's dual CD) or the primal (features as coordinates: Newton passes with
    a line search, liblinear's L1-regularised L2-loss SVC). "auto" takes the dual when n_samples
    < n_features and the combination has one, else the primal when it has one (the hinge loss has
    no primal, the L1 penalty no dual); the choice is in ``history_.attrs["notes"]``. Refused
    combinations raise scikit-learn's message. Multiclass by one-vs-rest, like scikit-learn's
    LinearSVC. The intercept is an extra feature of value ``intercept_scaling`` (regularised,
    on either side), as liblinear.
    """

    _family = "svm"

    def __init__(self, penalty="l2", loss="squared_hinge", *, dual="auto", C=1.0, fit_intercept=True,
                 intercept_scaling=1.0, tol=1e-4, max_iter=1000, random_state=None, device="cpu",
                 memory_budget=None, host_budget=None, selection="gap"):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.C = C
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.host_budget = host_budget
        self.selection = selection

    def _problem_kwargs(self):
        return dict(super()._problem_kwargs(), loss=self.loss)


class LogisticRegression(_Classifier):
    """penalty(w) + C sum_i log(1 + exp(-y_i w^T x_i)), as sklearn.linear_model.LogisticRegression:
    penalty 1/2 ||w||^2 ("l2"), ||w||_1 ("l1") or l1_ratio ||w||_1 + (1 - l1_ratio)/2 ||w||^2
    ("elasticnet").

    ``dual``: "auto" (default), True or False: the dual (samples as coordinates, liblinear's dual
    solver; L2 only) or the primal (features as coordinates: Newton passes with a line search, as
    newGLMNET). "auto" takes the primal when the penalty needs it or n_samples >= n_features (as
    scikit-learn's LinearSVC decides), the dual otherwise; the choice is in
    ``history_.attrs["notes"]``. Multiclass by one-vs-rest; the intercept is a regularised extra
    feature of value ``intercept_scaling``, as scikit-learn's liblinear solver.
    """

    _family = "logistic"

    def __init__(self, penalty="l2", *, dual="auto", C=1.0, l1_ratio=None, fit_intercept=True,
                 intercept_scaling=1.0, tol=1e-4, max_iter=1000, random_state=None, device="cpu",
                 memory_budget=None, host_budget=None, selection="gap"):
        self.penalty = penalty
        self.dual = dual
        self.C = C
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.host_budget = host_budget
        self.selection = selection

    def _options(self):
        name = self._name()
        options = super()._options()
        if self.penalty == "elasticnet":
            if self.l1_ratio is None:
                raise ValueError("l1_ratio must be specified when penalty is elasticnet.")
            options["l1_ratio"] = check(name, "l1_ratio", self.l1_ratio)
        elif self.l1_ratio is not None and 0 < self.l1_ratio < 1:
            warnings.warn(f"l1_ratio parameter is only used when penalty is 'elasticnet'. Got (penalty={self.penalty})")
        return options

    def predict_proba(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        p = expit(scores)  # one-vs-rest, normalised as scikit-learn's ovr
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))


class LogisticRegressionCV(LogisticRegression):
    """LogisticRegression with C chosen by cross-validation over a path of Cs, as
    sklearn.linear_model.LogisticRegressionCV: each fold solves the Cs in the order given, each
    solve warm-started from the fold's previous one (so the default ascending Cs go from the
    sparsest solution to the densest), and the C of the best mean held-out score is kept.

    ``Cs``: an int (that many values on np.logspace(-4, 4)) or the values. ``cv``: folds as
    scikit-learn's ``check_cv`` takes them (None: 5 stratified folds). ``scoring``: a scorer's name
    or callable (None: accuracy). ``refit``: True fits all the data at the best C (the primal
    warm-started from the folds' mean coefficients there); False keeps that mean. The other
    parameters are LogisticRegression's; the data is in RAM. Multiclass by one-vs-rest: each class
    has its own path and C.

    Fitted, as scikit-learn's: ``Cs_``, ``C_`` (one per binary problem), ``scores_`` and
    ``coefs_paths_`` (dicts keyed by class: (n_folds, n_Cs) and (n_folds, n_Cs, n_features [+ 1])),
    ``n_iter_`` ((n_binary, n_folds, n_Cs) epochs), ``coef_``, ``intercept_``, and ``history_`` of
    the refit (``path_``: one row per fold and C, with its epochs, seconds and certified gap).
    """

    host_budget = None  # the folds are rows of data in RAM

    def __init__(self, *, Cs=10, cv=None, penalty="l2", dual="auto", l1_ratio=None, scoring=None, refit=True,
                 fit_intercept=True, intercept_scaling=1.0, tol=1e-4, max_iter=1000, random_state=None,
                 device="cpu", memory_budget=None, selection="gap"):
        self.Cs = Cs
        self.cv = cv
        self.penalty = penalty
        self.dual = dual
        self.l1_ratio = l1_ratio
        self.scoring = scoring
        self.refit = refit
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.memory_budget = memory_budget
        self.selection = selection

    def _cs(self):
        name = type(self).__name__
        if isinstance(self.Cs, (numbers.Integral, np.integer)) and not isinstance(self.Cs, bool):
            if self.Cs < 1:
                raise ValueError(f"The 'Cs' parameter of {name} must be an int >= 1 or a list of floats > 0. "
                                 f"Got {self.Cs!r} instead.")
            return np.logspace(-4, 4, int(self.Cs))
        try:
            Cs = np.asarray(self.Cs, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            Cs = np.array([np.nan])
        if Cs.size == 0 or not np.all(np.isfinite(Cs) & (Cs > 0)):
            raise ValueError(f"The 'Cs' parameter of {name} must be an int >= 1 or a list of floats > 0. "
                             f"Got {self.Cs!r} instead.")
        return Cs

    def fit(self, X, y):
        name = type(self).__name__
        X, y = validate_data(self, X, y, accept_sparse=_ACCEPT_SPARSE, order="C", dtype=[np.float64, np.float32])
        check_classification_targets(y)
        check_params(name, memory_budget=self.memory_budget)
        self.Cs_ = Cs = self._cs()
        self.classes_ = np.unique(y)
        if self.classes_.shape[0] < 2:
            raise ValueError(f"{name} needs samples of at least 2 classes in the data; got only one class: "
                             f"{self.classes_[0]!r}.")
        folds = list(check_cv(self.cv, y, classifier=True).split(X, y))
        scorer = get_scorer("accuracy" if self.scoring is None else self.scoring)
        X = X.tocsr() if sp.issparse(X) else X  # (rows of a fold: a CSR slice)
        d, width = X.shape[1], X.shape[1] + int(bool(self.fit_intercept))
        scale = float(self.intercept_scaling)
        positives = self.classes_[1:] if self.classes_.shape[0] == 2 else self.classes_
        self.scores_, self.coefs_paths_, rows = {}, {}, []
        C_, coefs, intercepts, results = [], [], [], []
        n_iter = np.zeros((len(positives), len(folds), Cs.size), dtype=np.int64)
        for c, cls in enumerate(positives):
            label = f" (class {cls!r} vs the rest)" if len(positives) > 1 else ""
            target = (y == cls).astype(np.float64)
            scores, paths = np.empty((len(folds), Cs.size)), np.empty((len(folds), Cs.size, width))
            for k, (train, test) in enumerate(folds):
                warm, X_train, y_train, X_test, y_test = None, X[train], target[train], X[test], target[test]
                for j, C in enumerate(Cs):
                    est = self._at(C)
                    est._side_in_ram(X_train)
                    problem, res = est._solve(X_train, y_train, f"{label} (fold {k}, C={C:.4g})", warm)
                    w = (res.v if problem.dual_form else res.a)[:width]
                    paths[k, j] = np.concatenate([w[:d], w[d:] * scale])  # the intercept itself, as scikit-learn's
                    scores[k, j] = self._score(paths[k, j], scorer, X_test, y_test)
                    n_iter[c, k, j] = max(1, int(np.ceil(res.epochs)))
                    rows.append({"class": cls, "fold": k, "C": C, "epochs": res.epochs, "time_s": res.time_s,
                                 "rel_gap": res.rel_gap, "status": res.status, "score": scores[k, j]})
                    warm = (res.a, C)
            best = int(np.argmax(scores.mean(axis=0)))  # the first of equal scores: the smallest C when ascending
            self.scores_[cls], self.coefs_paths_[cls] = scores, paths
            C_.append(Cs[best])
            w = paths[:, best].mean(axis=0)
            if self.refit:
                est = self._at(Cs[best])
                entry, _, _ = est._side_in_ram(X)
                # the primal starts from the folds' mean coefficients there (its coordinates: the intercept's scaled)
                start = None if get_model(entry).dual_form else (np.concatenate([w[:d], w[d:] / scale]), Cs[best])
                problem, res = est._solve(X, target, label, start)
                w = (res.v if problem.dual_form else res.a)[:width]
                w = np.concatenate([w[:d], w[d:] * scale])
                results.append(res)
            coefs.append(w[:d])
            intercepts.append(w[d] if self.fit_intercept else 0.0)
        self.C_ = np.asarray(C_)
        self.coef_ = np.asarray(coefs, dtype=X.dtype)
        self.intercept_ = np.asarray(intercepts, dtype=X.dtype)
        self.path_ = pd.DataFrame(rows)
        if results:
            self._finish(results, by_class=True)  # the refit's history_ and dual_gap_
        self.n_iter_ = n_iter  # the path's epochs, as scikit-learn's
        return self

    def _score(self, w, scorer, X, y):
        """The scorer's value of the binary model w (coefficients, then the intercept) on (X, y)."""
        d = X.shape[1]
        est = LogisticRegression(fit_intercept=self.fit_intercept)
        est.classes_, est.n_features_in_ = np.array([0.0, 1.0]), d
        est.coef_, est.intercept_ = w[None, :d], np.array([w[d] if self.fit_intercept else 0.0])
        return float(scorer(est, X, y))

    def _at(self, C):
        est = LogisticRegression(penalty=self.penalty, dual=self.dual, C=C, l1_ratio=self.l1_ratio,
                                  fit_intercept=self.fit_intercept, intercept_scaling=self.intercept_scaling,
                                  tol=self.tol, max_iter=self.max_iter, random_state=self.random_state,
                                  device=self.device, memory_budget=self.memory_budget, selection=self.selection)
        est._owner = type(self).__name__
        return est
