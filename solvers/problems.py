"""Turn (X, y, model settings) into the primal-dual form every solver works on.

A :class:`Problem` holds the coordinate-major data ``A`` (row i = coordinate i:
a feature for the regression models, a signed sample y_i x_i for the
classifiers), the quadratic data term f(v) = c/2 ||v - b||^2, each
coordinate's mean ``mu`` (non-zero only when an unpenalised intercept is
fitted by centring) and centred squared norm, and the model code and params of
:mod:`solvers.models`.
"""

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.utils.validation import check_array, check_consistent_length

from solvers import models
from solvers.kernels import cpu

MODELS = ("lasso", "elastic_net", "ridge", "svm", "logistic")
LOSSES = ("hinge", "squared_hinge")


@dataclass
class Problem:
    name: str
    A: object                 # (n_coords, m) C-contiguous ndarray or CSR matrix
    b: np.ndarray             # (m,) float64
    c: float
    mu: np.ndarray            # (n_coords,) float64
    sqnorm: np.ndarray        # (n_coords,) float64, ||A_i - mu_i||^2
    model: int
    params: tuple             # (p0, p1, p2), see solvers.models
    P0: float                 # the user's primal objective at zero
    dual_form: bool           # True when coordinates are samples (SVM, logistic)
    n_samples: int
    n_features: int
    info: dict = field(default_factory=dict)  # x_mean, y_mean, intercept_scaling, classes

    @property
    def n_coords(self):
        return self.A.shape[0]

    @property
    def sparse(self):
        return sp.issparse(self.A)

    @property
    def coord_bytes(self):
        """Bytes of each coordinate's data (values, plus int32 indices when sparse)."""
        if self.sparse:
            per_entry = self.A.data.itemsize + self.A.indices.itemsize
            return np.diff(self.A.indptr).astype(np.int64) * per_entry
        return np.full(self.n_coords, self.A.shape[1] * self.A.itemsize, dtype=np.int64)

    def state_from(self, a):
        """(z, off) for coefficients a: z = c (A^T a - b), off = [mean of A^T a]."""
        if self.sparse:
            v = np.asarray(self.A.T @ a, dtype=np.float64)
        else:  # float64 accumulation without an upcast copy of all the data
            v = np.zeros(self.A.shape[1])
            step = max(1, (1 << 24) // max(1, self.A.shape[1]))
            for lo in range(0, self.n_coords, step):
                v += a[lo:lo + step] @ self.A[lo:lo + step].astype(np.float64, copy=False)
        off = np.array([float(self.mu @ a)])
        return self.c * (v - self.b), off

    def coordinate_gaps(self, a, z, off, coords=None):
        """Coordinate-wise duality gaps of ``coords`` (all by default)."""
        coords = np.arange(self.n_coords) if coords is None else np.asarray(coords, np.int64)
        out = np.empty(coords.shape[0])
        args = (coords, coords, a, z, off, self.mu, self.c, self.model, *self.params, out)
        if self.sparse:
            cpu.gaps_sparse(self.A.indptr, self.A.indices, self.A.data, *args)
        else:
            cpu.gaps_dense(self.A, *args)
        return out

    def objectives(self, a, z, off, gap=None):
        """User-facing (primal, dual, gap): the scikit-learn objective and its dual.

        The gap is the sum of coordinate gaps (computed here unless given); the
        form's primal is computed directly and its dual as primal - gap
        (Fenchel-Young holds with equality at u = grad f(v)).
        """
        P_form = (_shifted_sq_norm(z, self.c * off[0]) / (2.0 * self.c)
                  + _sum_g(self.model, a, *self.params))
        if gap is None:
            gap = float(self.coordinate_gaps(a, z, off).sum())
        D_form = P_form - gap
        if self.dual_form:
            return -D_form, -P_form, gap
        return P_form, D_form, gap


@njit(cache=True, nogil=True)
def _shifted_sq_norm(z, shift):
    """||z - shift||^2, without BLAS: a threaded BLAS call per round stalls on a busy machine."""
    total = 0.0
    for k in range(z.shape[0]):
        d = z[k] - shift
        total += d * d
    return total


@njit(cache=True, nogil=True)
def _sum_g(model, a, p0, p1, p2):
    total = 0.0
    for i in range(a.shape[0]):
        total += models.g_value(model, a[i], p0, p1, p2)
    return total


@njit(cache=True)
def _dense_row_stats(A):
    sums = np.zeros(A.shape[0])
    sq = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        s = 0.0
        q = 0.0
        for k in range(A.shape[1]):
            x = float(A[i, k])
            s += x
            q += x * x
        sums[i] = s
        sq[i] = q
    return sums, sq


def _row_stats(A):
    """(sum, sum of squares) of each row, accumulated in float64."""
    if sp.issparse(A):
        d = A.data.astype(np.float64)
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        return (np.bincount(rows, d, minlength=A.shape[0]),
                np.bincount(rows, d * d, minlength=A.shape[0]))
    return _dense_row_stats(A)


def _check_positive(name, value, model):
    if not (isinstance(value, (int, float, np.floating, np.integer)) and np.isfinite(value)
            and value > 0):
        raise ValueError(f"The '{name}' parameter of {model} must be a float > 0. Got {value!r} instead.")
    return float(value)


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


def make_problem(name, X, y, *, alpha=1.0, l1_ratio=0.5, C=1.0, loss="hinge",
                 fit_intercept=True, intercept_scaling=1.0):
    """Build the primal-dual :class:`Problem` of a scikit-learn-named model.

    name: one of ``MODELS``. For "svm" and "logistic", y holds two classes; the
    larger one becomes +1 (scikit-learn's ``classes_[1]``).
    """
    if name not in MODELS:
        raise ValueError(f"The 'model' parameter must be one of {MODELS}. Got {name!r} instead.")
    X = check_array(X, accept_sparse=("csr", "csc", "coo"), dtype=(np.float64, np.float32),
                    order="F" if name in ("lasso", "elastic_net", "ridge") else "C")
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-dimensional. Got shape {y.shape} instead.")
    check_consistent_length(X, y)
    n, d = X.shape
    if name in ("svm", "logistic"):
        return _classification_problem(name, X, y, C, loss, fit_intercept, intercept_scaling)
    return _regression_problem(name, X, y, alpha, l1_ratio, fit_intercept)


def _regression_problem(name, X, y, alpha, l1_ratio, fit_intercept):
    n, d = X.shape
    label = {"lasso": "Lasso", "elastic_net": "ElasticNet", "ridge": "Ridge"}[name]
    alpha = _check_positive("alpha", alpha, label)
    A = _coordinate_major(X, by_feature=True)
    sums, sq = _row_stats(A)
    y_mean = float(y.mean()) if fit_intercept else 0.0
    b = y - y_mean
    if fit_intercept:
        mu = sums / n
        sqnorm = np.maximum(sq - n * mu * mu, 0.0)
    else:
        mu = np.zeros(d)
        sqnorm = sq
    c = 2.0 if name == "ridge" else 1.0 / n
    P0 = 0.5 * c * float(b @ b)
    if name == "ridge":
        params = (0.0, 2.0 * alpha, np.inf)
    elif name == "lasso":
        params = (alpha, 0.0, P0 / alpha)
    else:
        if not 0.0 <= l1_ratio <= 1.0:
            raise ValueError(f"The 'l1_ratio' parameter of ElasticNet must be a float in [0, 1]. "
                             f"Got {l1_ratio!r} instead.")
        l1, l2 = alpha * l1_ratio, alpha * (1.0 - l1_ratio)
        params = (l1, l2, np.inf if l2 > 0 else P0 / l1)
    return Problem(name=name, A=A, b=b, c=c, mu=mu, sqnorm=sqnorm, model=models.ENET,
                   params=tuple(float(p) for p in params), P0=P0, dual_form=False,
                   n_samples=n, n_features=d,
                   info={"x_mean": mu.copy(), "y_mean": y_mean, "fit_intercept": fit_intercept})


def _classification_problem(name, X, y, C, loss, fit_intercept, intercept_scaling):
    n, d = X.shape
    label = "LinearSVC" if name == "svm" else "LogisticRegression"
    C = _check_positive("C", C, label)
    classes = np.unique(y)
    if classes.shape[0] != 2:
        raise ValueError(f"{label} needs exactly two classes in y for one problem; "
                         f"got {classes.shape[0]} ({classes[:5].tolist()}).")
    signs = np.where(y == classes[1], 1.0, -1.0)
    if name == "svm":
        if loss not in LOSSES:
            raise ValueError(f"The 'loss' parameter of LinearSVC must be one of {LOSSES}. "
                             f"Got {loss!r} instead.")
        model = models.HINGE if loss == "hinge" else models.SQHINGE
    else:
        model = models.LOGISTIC
    if fit_intercept:
        scaling = _check_positive("intercept_scaling", intercept_scaling, label)
        col = np.full((n, 1), scaling, dtype=X.dtype)
        X = sp.hstack([X, sp.csr_matrix(col)], format="csr") if sp.issparse(X) else np.hstack([X, col])
    A = _coordinate_major(X, by_feature=False)
    if sp.issparse(A):
        A.data *= np.repeat(signs, np.diff(A.indptr)).astype(A.dtype)
    else:
        A = A * signs[:, None].astype(A.dtype)  # a new array: the caller's X is left alone
    _, sq = _row_stats(A)
    m = A.shape[1]
    P0 = C * n * (np.log(2.0) if model == models.LOGISTIC else 1.0)
    return Problem(name=name, A=A, b=np.zeros(m), c=1.0, mu=np.zeros(n), sqnorm=sq, model=model,
                   params=(C, 0.0, 0.0), P0=float(P0), dual_form=True, n_samples=n, n_features=d,
                   info={"classes": classes, "fit_intercept": fit_intercept,
                         "intercept_scaling": float(intercept_scaling)})
