"""Turn (X, y, a model's parameters) into the primal-dual form every solver works on.

A :class:`Problem` holds the coordinate-major data ``A`` (row i = coordinate i:
a feature for the regression models, a signed sample y_i x_i for the
classifiers in the dual, a feature signed sample by sample, y_k x_kj, for the
classifiers in the primal), the data term (the quadratic f(v) = c/2 ||v - b||^2,
or a loss of the margins: the model's ``Loss``), each coordinate's mean ``mu``
(non-zero only when an unpenalised intercept is fitted by centring) and centred
squared norm, the model's registry entry, its named ``params`` and its kernel
parameters ``theta`` (:mod:`solvers.glm.models`).

The solvers' state is (a, z, off): for the quadratic term z = c (v - b) and off = [the mean
of v]; for a loss z = u = grad f(v) and off = [0, the margins v] (:meth:`Problem.zero_state`,
:meth:`Problem.state_from`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array, check_consistent_length

from solvers.glm.certificates import certificate, data_value, form_certificate, residual_stats, tight_l1
from solvers.glm.checks import check_params
from solvers.glm.models import get_model, has_loss, quadratic_majorant
from solvers.kernels import cpu


@dataclass
class Problem:
    name: str
    A: object                 # (n_coords, m) C-contiguous ndarray or CSR matrix
    b: np.ndarray             # (m,) float64
    c: float
    mu: np.ndarray            # (n_coords,) float64
    sqnorm: np.ndarray        # (n_coords,) float64, ||A_i - mu_i||^2
    theta: tuple              # the model's kernel parameters (a NamedTuple)
    params: dict              # the model's named parameters, as the user gave them
    P0: float                 # the user's primal objective at zero
    dual_form: bool           # True when coordinates are samples (SVM, logistic in the dual)
    n_samples: int
    n_features: int
    info: dict = field(default_factory=dict)  # x_mean, y_mean, intercept_scaling, classes

    def __post_init__(self):
        # dense A read-only, whatever the caller's array: nothing writes it, and Numba compiles a
        # writeable and a read-only array apart (a memmap and an array in RAM would each compile the loops)
        if isinstance(self.A, np.ndarray) and self.A.flags.writeable:
            self.A = self.A.view()
            self.A.flags.writeable = False

    @property
    def model(self):
        """The registry entry (solvers.glm.models.Model)."""
        return get_model(self.name)

    @property
    def loss(self):
        """Whether the data term is a loss of the margins (a classifier in the primal)."""
        return has_loss(self.theta)

    @property
    def step_curvature(self):
        """The data term's curvature bound along coordinate i over ||A_i - mu_i||^2: c, times the
        loss's smoothness for a classifier in the primal (what a coordinate's proximal step divides
        by, :func:`solvers.glm.models.reach_gap`)."""
        return self.c * (quadratic_majorant(self.theta)[0] if self.loss else 1.0)

    @property
    def n_coords(self):
        return self.A.shape[0]

    @property
    def sparse(self):
        return sp.issparse(self.A)

    @property
    def on_disk(self):
        """Whether A lives on disk (solvers.storage.on_disk.OnDisk), read a set of coordinates at a time."""
        return getattr(self.A, "on_disk", False)

    def in_memory(self):
        """The same problem with A read into RAM (itself when it is there)."""
        return dataclasses.replace(self, A=self.A.load()) if self.on_disk else self

    @property
    def coord_bytes(self):
        """Bytes of each coordinate's data (values, plus int32 indices when sparse), computed once
        for this A and shared, not copied (8 bytes a coordinate: a copy per caller would be a large
        share of what a solve from disk keeps per sample); callers only read it."""
        kept = self.__dict__.get("_coord_bytes")
        if kept is None or kept[0] is not self.A:
            if self.sparse:
                per_entry = self.A.data.itemsize + self.A.indices.itemsize
                counts = np.diff(self.A.indptr).astype(np.int64) * per_entry
            elif hasattr(self.A, "coordinate_bytes"):  # sparse data on disk: each coordinate's own size
                counts = self.A.coordinate_bytes()
            else:
                counts = np.full(self.n_coords, self.A.shape[1] * self.A.itemsize, dtype=np.int64)
            kept = self.__dict__["_coord_bytes"] = (self.A, counts)
        return kept[1]

    def zero_state(self):
        """(z, off) at a = 0."""
        if self.loss:
            return self.state_from(np.zeros(self.n_coords))
        return -self.c * self.b, np.zeros(1)

    def state_from(self, a):
        """(z, off) for coefficients a: z = c (A^T a - b), off = [mean of A^T a]; for a loss
        z = grad f(v), off = [0, v], v = A^T a (the margins)."""
        if self.on_disk:  # reads the coordinates with a_i != 0
            v = self.A.dot_t(a)
        elif self.sparse:
            v = np.asarray(self.A.T @ a, dtype=np.float64)
        else:  # float64 accumulation without an upcast copy of all the data
            v = np.zeros(self.A.shape[1])
            step = max(1, (1 << 24) // max(1, self.A.shape[1]))
            for lo in range(0, self.n_coords, step):
                v += a[lo:lo + step] @ self.A[lo:lo + step].astype(np.float64, copy=False)
        return self.state_of(v, float(self.mu @ a))

    def state_of(self, v, a_mean=0.0):
        """(z, off) at v = A^T a, with ``a_mean`` = mu . a (the quadratic term's off; a loss's is 0)."""
        if self.loss:
            z = np.empty(v.shape[0])
            cpu.loss_state(self.theta, v, z)
            return z, np.concatenate([[0.0], v])
        return self.c * (v - self.b), np.array([a_mean])

    def v_of(self, z, off):
        """v = A^T a at the state (a classifier in the dual: w; in the primal: the margins)."""
        if self.loss:
            return off[1:].copy()
        return z / self.c + self.b

    def coordinate_gaps(self, a, z, off, coords=None, with_s=False):
        """Coordinate-wise duality gaps of ``coords`` (all by default); with ``with_s``
        also each one's s = <A_i, u>, from which the tight certificate is built."""
        coords = np.arange(self.n_coords) if coords is None else np.asarray(coords, np.int64)
        out, s = np.empty(coords.shape[0]), np.empty(coords.shape[0])
        args = (coords, coords, a, z, off, self.mu, self.c, self.theta, out, s)
        if self.on_disk:
            self.A.gaps(coords, a, z, off, self.mu, self.c, self.theta, out, s)
        elif self.sparse:
            cpu.gaps_sparse(self.A.indptr, self.A.indices, self.A.data, *args)
        else:
            cpu.gaps_dense(self.A, *args)
        return (out, s) if with_s else out

    def certify(self, a, z, off, gap_sum=None, s_max=None, dual_best=-np.inf):
        """User-facing (primal, dual, gap) of the state, and the form's best dual value.

        ``gap_sum`` and ``s_max`` (the coordinate gaps' sum and max |s_i| over all
        coordinates, at this state) are computed here unless given; the gap is the
        smallest valid one (solvers.glm.certificates). ``dual_best`` carries the best dual
        value of earlier states when the coordinates are the model's coefficients (then
        P(a) - best D bounds the suboptimality of a, the model returned). Solved in the
        dual (classifiers), the model is w(a) and only its own state's gap bounds it."""
        if self.dual_form:
            dual_best = -np.inf
        if gap_sum is None:
            gaps, s = self.coordinate_gaps(a, z, off, with_s=True)
            gap_sum, s_max = float(gaps.sum()), float(np.abs(s).max(initial=0.0))
        tight = tight_l1(self.theta)
        if self.loss:
            P_form, D_form, gap, dual_best = certificate(
                self.theta, z, off, self.c, self.b, cpu.sum_g(a, self.theta), gap_sum, s_max if tight else 0.0,
                self.theta.l1 if tight else 0.0, tight, dual_best)
        else:
            q, ub = residual_stats(z, self.c * off[0], self.b)
            P_form, D_form, gap, dual_best = form_certificate(
                q, ub, self.c, cpu.sum_g(a, self.theta), gap_sum, s_max if tight else 0.0,
                self.theta.l1 if tight else 0.0, tight, dual_best)
        if self.dual_form:
            return -D_form, -P_form, gap, dual_best
        return P_form, D_form, gap, dual_best

    def form_primal(self, a, z, off):
        """The objective coordinate descent minimizes (the form's primal), from the state."""
        if self.loss:
            return data_value(self.theta, z, off, self.c) + cpu.sum_g(a, self.theta)
        return cpu.shifted_sq_norm(z, self.c * off[0]) / (2.0 * self.c) + cpu.sum_g(a, self.theta)

    def objectives(self, a, z, off, gap=None):
        """User-facing (primal, dual, gap) with the coordinate gaps' sum as the gap (given, or
        computed here): the form's primal computed directly, its dual as primal - gap
        (Fenchel-Young holds with equality at u = grad f(v))."""
        P_form = self.form_primal(a, z, off)
        if gap is None:
            gap = float(self.coordinate_gaps(a, z, off).sum())
        D_form = P_form - gap
        if self.dual_form:
            return -D_form, -P_form, gap
        return P_form, D_form, gap


def _row_stats(A):
    """(sum, sum of squares) of each row, accumulated in float64."""
    if sp.issparse(A):
        d = A.data.astype(np.float64)
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        return (np.bincount(rows, d, minlength=A.shape[0]),
                np.bincount(rows, d * d, minlength=A.shape[0]))
    return cpu.dense_row_stats(A)


def _coordinate_major(X, by_feature):
    """Coordinates as contiguous rows: X^T for feature coordinates, X for sample ones."""
    if sp.issparse(X):
        A = (X.tocsc().T if by_feature else X.tocsr()).tocsr(copy=True)
        A.sort_indices()
        A.sum_duplicates()
        if A.nnz < np.iinfo(np.int32).max:  # 32-bit indices: less memory, one kernel signature
            A.indices = A.indices.astype(np.int32, copy=False)
            A.indptr = A.indptr.astype(np.int32, copy=False)
        return A
    if by_feature:
        return np.ascontiguousarray(X.T)  # a free view when X is Fortran-ordered
    return np.ascontiguousarray(X)


def model_params(name, owner=None, **params):
    """The model's named parameters with its defaults filled in, each checked (a
    ValueError names ``owner``, default the model's estimator class)."""
    model = get_model(name)
    unknown = sorted(set(params) - set(model.params))
    if unknown:
        raise TypeError(f"{model.estimator} has no parameter(s) {unknown}; it takes {sorted(model.params)}.")
    values = {**model.params, **params}
    check_params(owner or model.estimator, **values)
    return values


def make_problem(name, X, y, owner=None, **params):
    """Build the primal-dual :class:`Problem` of a registered model (``solvers.glm.models.MODELS``).

    ``params`` are the model's named parameters (``alpha``, ``C``, ...). For the
    classifiers, y holds two classes; the larger one becomes +1 (scikit-learn's
    ``classes_[1]``).
    """
    model = get_model(name)
    params = model_params(name, owner, **params)
    X = check_array(X, accept_sparse=("csr", "csc", "coo"), dtype=(np.float64, np.float32),
                    order="C" if model.dual_form else "F")
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-dimensional. Got shape {y.shape} instead.")
    check_consistent_length(X, y)
    if model.classifier and not model.dual_form:
        return _primal_classification_problem(model, X, y, params)
    if model.classifier:
        return _classification_problem(model, X, y, params)
    return _regression_problem(model, X, y, params)


def _regression_problem(model, X, y, params):
    n, d = X.shape
    A = _coordinate_major(X, by_feature=True)
    return _regression_from(model, A, y, params, n, d, *_row_stats(A))


def _regression_from(model, A, y, params, n, d, sums, sq):
    fit_intercept = params["fit_intercept"]
    y_mean = float(y.mean()) if fit_intercept else 0.0
    b = y - y_mean
    if fit_intercept:
        mu = sums / n
        sqnorm = np.maximum(sq - n * mu * mu, 0.0)
    else:
        mu = np.zeros(d)
        sqnorm = sq
    c = float(model.curvature(n))
    P0 = 0.5 * c * float(b @ b)
    return Problem(name=model.name, A=A, b=b, c=c, mu=mu, sqnorm=sqnorm, theta=model.theta(params, P0),
                   params=params, P0=P0, dual_form=False, n_samples=n, n_features=d,
                   info={"x_mean": mu.copy(), "y_mean": y_mean, "fit_intercept": fit_intercept})


def make_problem_on_disk(name, data, y, row_stats=None, owner=None, **params):
    """A :class:`Problem` whose coordinate data stay on disk (``data``: a
    solvers.storage.on_disk.OnDisk, dense, or a solvers.storage.sparse_on_disk.SparseOnDisk, a
    sparse store). Regression models: ``data`` holds X^T, (n_features, n_samples), a feature
    per coordinate (a dense Fortran-order X, or a 'csc' store); ``row_stats`` = (sum, sum of
    squares) of each feature; the classifiers in the primal too (a dense Fortran-order X; its
    values read signed by the labels, y_k x_kj; no intercept: the file has no column for it).
    Classifiers in the dual: ``data`` holds X itself,
    (n_samples, n_features), a sample per coordinate (a C-order X, or a 'csr' store), read with
    the labels' signs applied (y_i x_i, exact); ``row_stats``: (sum, sum of squares) of each
    sample's row of X. Without ``row_stats`` one pass over the data computes them (none for a
    binary store: its counts are the stats)."""
    model = get_model(name)
    params = model_params(name, owner, **params)
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    if model.classifier and not model.dual_form:
        return _primal_classification_on_disk(model, data, y, row_stats, params, owner or model.estimator)
    if model.classifier:
        return _classification_on_disk(model, data, y, row_stats, params, owner or model.estimator)
    d, n = data.shape
    if y.shape != (n,):
        raise ValueError(f"y has shape {y.shape}; the data on disk holds {n} samples of {d} features.")
    sums, sq = data.row_stats() if row_stats is None else (np.asarray(row_stats[0]), np.asarray(row_stats[1]))
    return _regression_from(model, data, y, params, n, d, sums, sq)


def _classification_on_disk(model, data, y, row_stats, params, owner):
    n, m = data.shape
    d = getattr(data, "n_features", m)  # X's own width: the rest of each row is zero padding
    # a sparse store adds liblinear's intercept entry to each row as it is read (no padding needed)
    sparse = hasattr(data, "coordinate_bytes")
    if params["fit_intercept"] and d >= m and not sparse:
        raise ValueError(f"The 'fit_intercept' parameter of {owner} must be False with the data on disk "
                         "(host_budget) unless its rows are padded (the dataset cache's sample-major copy): "
                         "the file holds no intercept column. Got True instead.")
    if y.shape != (n,):
        raise ValueError(f"The data on disk for {owner} must hold one sample per coordinate (an (n_samples, "
                         f"n_features) C-order .npy): it holds {n} coordinates of {m} values, and y has "
                         f"shape {y.shape}.")
    classes = np.unique(y)
    if classes.shape[0] != 2:
        raise ValueError(f"{model.estimator} needs exactly two classes in y for one problem; "
                         f"got {classes.shape[0]} ({classes[:5].tolist()}).")
    s = float(params["intercept_scaling"]) if params["fit_intercept"] else None
    # liblinear's intercept: a feature of value s (regularised), in the first padding column
    A = data.scaled(np.where(y == classes[1], 1.0, -1.0), intercept=s)
    sq = A.row_stats()[1] if row_stats is None else np.asarray(row_stats[1], dtype=np.float64) + (s or 0.0) ** 2
    theta = model.theta(params, 0.0)
    P0 = n * float(model.math.g_conj(theta, 0.0))  # the user's primal at w = 0: sum_i loss_i(0)
    return Problem(name=model.name, A=A, b=np.zeros(A.shape[1]), c=1.0, mu=np.zeros(n), sqnorm=sq, theta=theta,
                   params=params, P0=P0, dual_form=True, n_samples=n, n_features=d,
                   info={"classes": classes, "fit_intercept": bool(params["fit_intercept"]),
                         "intercept_scaling": float(params["intercept_scaling"])})


def _classification_problem(model, X, y, params):
    n, d = X.shape
    classes = np.unique(y)
    if classes.shape[0] != 2:
        raise ValueError(f"{model.estimator} needs exactly two classes in y for one problem; "
                         f"got {classes.shape[0]} ({classes[:5].tolist()}).")
    signs = np.where(y == classes[1], 1.0, -1.0)
    if params["fit_intercept"]:
        col = np.full((n, 1), params["intercept_scaling"], dtype=X.dtype)
        X = sp.hstack([X, sp.csr_matrix(col)], format="csr") if sp.issparse(X) else np.hstack([X, col])
    A = _coordinate_major(X, by_feature=False)
    if sp.issparse(A):
        A.data *= np.repeat(signs, np.diff(A.indptr)).astype(A.dtype)
    else:
        A = A * signs[:, None].astype(A.dtype)  # a new array: the caller's X is left alone
    _, sq = _row_stats(A)
    m = A.shape[1]
    theta = model.theta(params, 0.0)
    # the user's primal at w = 0: sum_i loss_i(0) = n g*(0)
    P0 = n * float(model.math.g_conj(theta, 0.0))
    return Problem(name=model.name, A=A, b=np.zeros(m), c=1.0, mu=np.zeros(n), sqnorm=sq, theta=theta,
                   params=params, P0=P0, dual_form=True, n_samples=n, n_features=d,
                   info={"classes": classes, "fit_intercept": params["fit_intercept"],
                         "intercept_scaling": float(params["intercept_scaling"])})


def _two_classes(model, y):
    classes = np.unique(y)
    if classes.shape[0] != 2:
        raise ValueError(f"{model.estimator} needs exactly two classes in y for one problem; "
                         f"got {classes.shape[0]} ({classes[:5].tolist()}).")
    return classes, np.where(y == classes[1], 1.0, -1.0)


def _loss_problem(model, A, signs, params, classes, n, d, sq):
    """The Problem of a classifier in the primal from its signed feature-major data A."""
    loss = model.math.loss
    # the user's primal at w = 0: sum_k loss_k(0) (the bound of an L1 penalty needs it)
    P0 = n * float(loss.value(model.theta(params, 1.0), 0.0))
    return Problem(name=model.name, A=A, b=signs, c=1.0, mu=np.zeros(A.shape[0]), sqnorm=sq,
                   theta=model.theta(params, P0), params=params, P0=P0, dual_form=False, n_samples=n,
                   n_features=d, info={"classes": classes, "fit_intercept": bool(params["fit_intercept"]),
                                       "intercept_scaling": float(params["intercept_scaling"])})


def _primal_classification_problem(model, X, y, params):
    """A classifier in the primal: coordinate j holds y_k x_kj (so A^T w is the margins), the
    intercept one more coordinate of value ``intercept_scaling``, penalised as liblinear does."""
    n, d = X.shape
    classes, signs = _two_classes(model, y)
    if params["fit_intercept"]:
        col = np.full((n, 1), params["intercept_scaling"], dtype=X.dtype)
        X = sp.hstack([X, sp.csr_matrix(col)], format="csc") if sp.issparse(X) else np.hstack([X, col])
    A = _coordinate_major(X, by_feature=True)
    if sp.issparse(A):
        A.data *= signs[A.indices].astype(A.dtype)
    else:
        A = A * signs[None, :].astype(A.dtype)  # a new array: the caller's X is left alone
    _, sq = _row_stats(A)
    return _loss_problem(model, A, signs, params, classes, n, d, sq)


def _primal_classification_on_disk(model, data, y, row_stats, params, owner):
    d, n = data.shape
    if not hasattr(data, "signed"):
        raise ValueError(f"{owner} in the primal reads a dense feature-major .npy (Fortran order) from disk; "
                         f"got {type(data).__name__}: load the data into RAM, or solve it in the dual (dual=True).")
    if params["fit_intercept"]:
        raise ValueError(f"The 'fit_intercept' parameter of {owner} must be False with the data on disk "
                         "(host_budget): the file holds no intercept column. Got True instead.")
    if y.shape != (n,):
        raise ValueError(f"y has shape {y.shape}; the data on disk holds {n} samples of {d} features.")
    classes, signs = _two_classes(model, y)
    A = data.signed(signs)
    sq = A.row_stats()[1] if row_stats is None else np.asarray(row_stats[1], dtype=np.float64)
    return _loss_problem(model, A, signs, params, classes, n, d, sq)
