"""Independent oracles for the solver tests: test data, objectives and duals written
out from the models' textbook definitions (not from solvers/), and reference optima
from scikit-learn, scipy.optimize and closed forms.

Conventions (those of scikit-learn, which the estimators copy):

- Lasso       (1/2n)||y - Xw - b||^2 + alpha ||w||_1
- ElasticNet  (1/2n)||y - Xw - b||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2
- Ridge       ||y - Xw - b||^2 + alpha ||w||^2
- LinearSVC   1/2 (||w||^2 + (b/s)^2) + C sum loss(y_i (x_i w + b)), hinge or squared hinge
- Logistic    1/2 (||w||^2 + (b/s)^2) + C sum log(1 + exp(-y_i (x_i w + b)))

with s = intercept_scaling (liblinear regularises the intercept as the weight of an
extra constant feature of value s) and labels y_i = +1 for the larger class.
"""

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit, xlogy

MODELS = ("lasso", "enet", "ridge", "hinge", "sqhinge", "logistic")
REGRESSION = ("lasso", "enet", "ridge")
CLASSIFICATION = ("hinge", "sqhinge", "logistic")
# the name solvers.problems.make_problem uses for each model, and its extra kwargs
PROBLEM_NAME = {"lasso": "lasso", "enet": "elastic_net", "ridge": "ridge", "hinge": "svm",
                "sqhinge": "svm", "logistic": "logistic"}
LOSS = {"hinge": "hinge", "sqhinge": "squared_hinge"}

C_VALUE = 0.1
RIDGE_ALPHA = 5.0
L1_RATIO = 0.5
LASSO_ALPHA_FRACTION = 0.1   # alpha = this fraction of alpha_max: a sparse solution


# ----------------------------------------------------------------------------- data

def make_data(kind, sparse, dtype, seed=0):
    """Small test problems. kind: "regression" (80 x 20) or "classification" (100 x 15).

    Features have non-zero means (the intercept matters), correlated for regression;
    the sparse variants have ~30% density with every row and column non-empty.
    Classification labels are {1, 2} (mapped to -1/+1 by the estimators), not separable.
    """
    rng = np.random.default_rng(seed + (0 if kind == "regression" else 1000) + 7 * sparse)
    n, d = (80, 20) if kind == "regression" else (100, 15)
    if sparse:
        mask = rng.random((n, d)) < 0.3
        mask[np.arange(n), rng.integers(0, d, n)] = True        # no empty row
        mask[rng.integers(0, n, d), np.arange(d)] = True        # no empty column
        mask[rng.integers(0, n, d), np.arange(d)] = True
        values = rng.standard_normal((n, d)) + 0.5
        X = np.where(mask, values, 0.0)
    elif kind == "regression":
        Z = rng.standard_normal((n, d))
        X = Z + 0.4 * Z[:, [0]] + rng.uniform(-1, 1, d)       # correlated, shifted columns
    else:  # shifted columns (a hinge dual on correlated ones needs thousands of epochs)
        X = rng.standard_normal((n, d)) + rng.uniform(-0.5, 0.5, d)
    w = np.zeros(d)
    w[:6] = rng.standard_normal(6) * 2
    t = X @ w
    if kind == "regression":
        y = t + 3.0 + 0.5 * rng.standard_normal(n)
    else:
        y = np.where(t - np.median(t) + 1.5 * rng.standard_normal(n) > 0, 2, 1)
    X = X.astype(dtype)
    if sparse:
        X = sp.csr_matrix(X)
    return X, y.astype(np.float64) if kind == "regression" else y


def kind_of(model):
    return "regression" if model in REGRESSION else "classification"


def dense64(X):
    return X.toarray().astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)


def params_for(model, X, y):
    """The model's hyper-parameters (the test's choice) as estimator kwargs."""
    if model in ("lasso", "enet"):
        Xd = dense64(X)
        Xc, yc = Xd - Xd.mean(0), y - y.mean()
        alpha_max = np.abs(Xc.T @ yc).max() / len(y)
        l1 = 1.0 if model == "lasso" else L1_RATIO
        alpha = LASSO_ALPHA_FRACTION * alpha_max / l1
        return dict(alpha=alpha) if model == "lasso" else dict(alpha=alpha, l1_ratio=L1_RATIO)
    if model == "ridge":
        return dict(alpha=RIDGE_ALPHA)
    if model == "logistic":
        return dict(C=C_VALUE)
    return dict(C=C_VALUE, loss=LOSS[model])


# ----------------------------------------------------------------------- objectives

def signs(y):
    classes = np.unique(y)
    return np.where(y == classes[1], 1.0, -1.0)


def augmented(X, scaling=1.0):
    """X with the intercept column of value scaling (None: no intercept, X itself)."""
    Xd = dense64(X)
    if scaling is None:
        return Xd
    return np.hstack([Xd, np.full((Xd.shape[0], 1), float(scaling))])


def P0(model, X, y, params, center=True):
    """The primal objective at zero coefficients (intercept optimal for regression)."""
    n = len(y)
    if model in REGRESSION:
        yc = y - y.mean() if center else y
        return float(yc @ yc) * (1.0 if model == "ridge" else 0.5 / n)
    return params["C"] * n * (np.log(2.0) if model == "logistic" else 1.0)


def primal(model, X, y, coef, intercept, params, scaling=1.0):
    """The scikit-learn objective of (coef, intercept), in float64."""
    Xd = dense64(X)
    coef = np.asarray(coef, dtype=np.float64).ravel()
    intercept = float(np.asarray(intercept, dtype=np.float64).ravel()[0]) if np.ndim(intercept) \
        else float(intercept)
    n = len(y)
    if model in REGRESSION:
        r = y - Xd @ coef - intercept
        alpha = params["alpha"]
        if model == "lasso":
            return r @ r / (2 * n) + alpha * np.abs(coef).sum()
        if model == "enet":
            l1r = params["l1_ratio"]
            return (r @ r / (2 * n) + alpha * l1r * np.abs(coef).sum()
                    + 0.5 * alpha * (1 - l1r) * coef @ coef)
        return r @ r + alpha * coef @ coef
    C = params["C"]
    m = signs(y) * (Xd @ coef + intercept)
    if scaling is None:  # no intercept
        assert intercept == 0.0
        reg = 0.5 * coef @ coef
    else:
        reg = 0.5 * (coef @ coef + (intercept / scaling) ** 2)
    if model == "hinge":
        return reg + C * np.maximum(0.0, 1.0 - m).sum()
    if model == "sqhinge":
        return reg + C * (np.maximum(0.0, 1.0 - m) ** 2).sum()
    return reg + C * np.logaddexp(0.0, -m).sum()


def primal_w(model, X, y, w_aug, params, scaling=1.0):
    """Classifier objective of the augmented weight vector (w, b / scaling)."""
    if scaling is None:
        return primal(model, X, y, w_aug, 0.0, params, None)
    return primal(model, X, y, w_aug[:-1], w_aug[-1] * scaling, params, scaling)


def regression_intercept(X, y, coef, center=True):
    if not center:
        return 0.0
    Xd = dense64(X)
    return float(y.mean() - Xd.mean(0) @ np.asarray(coef, np.float64))


def regression_dual(model, X, y, coef, params, center=True):
    """The dual objective at the dual point given by coef's centred residual.

    Lasso uses the bounded-support conjugate g*(s) = B max(0, |s| - alpha),
    B = P(0)/alpha, which makes the dual finite at every residual.
    """
    Xd = dense64(X)
    Xc, yc = (Xd - Xd.mean(0), y - y.mean()) if center else (Xd, y)
    n = len(y)
    r = yc - Xc @ np.asarray(coef, np.float64)
    corr = Xc.T @ r
    alpha = params["alpha"]
    if model == "ridge":
        return 2 * r @ yc - r @ r - corr @ corr / alpha
    fit = (yc @ yc - (yc - r) @ (yc - r)) / (2 * n)
    if model == "lasso":
        B = P0(model, X, y, params, center) / alpha
        return fit - B * np.maximum(0.0, np.abs(corr) / n - alpha).sum()
    l1, l2 = alpha * params["l1_ratio"], alpha * (1 - params["l1_ratio"])
    excess = np.maximum(0.0, np.abs(corr) / n - l1)
    if l2 == 0.0:  # l1_ratio = 1: the Lasso, with its bounded-support conjugate
        return fit - P0(model, X, y, params, center) / l1 * excess.sum()
    return fit - (excess ** 2).sum() / (2 * l2)


def rescaled_lasso_dual(X, y, coef, alpha, center=True):
    """scikit-learn's Lasso dual at its rescaled residual: theta = t R / n with
    t = min(1, alpha n / ||X^T R||_inf), D = t R.y / n - t^2 ||R||^2 / (2n)
    (sklearn/linear_model/_cd_fast.pyx, written out here)."""
    Xd = dense64(X)
    Xc, yc = (Xd - Xd.mean(0), y - y.mean()) if center else (Xd, np.asarray(y, np.float64))
    n = len(y)
    R = yc - Xc @ np.asarray(coef, np.float64)
    top = np.abs(Xc.T @ R).max() / n
    t = 1.0 if top <= alpha else alpha / top
    return t * (R @ yc) / n - t * t * (R @ R) / (2 * n)


def best_dual(model, X, y, a, params, scaling=1.0):
    """The best dual value the solvers may use at a: the coordinate gaps' dual point, and for
    a Lasso (an elastic net with l1_ratio 1) also scikit-learn's rescaled residual."""
    P, D = gap_from_coordinates(model, X, y, a, params, scaling)
    if model == "lasso" or (model == "enet" and params.get("l1_ratio") == 1.0):
        alpha = params["alpha"] * params.get("l1_ratio", 1.0)
        D = max(D, rescaled_lasso_dual(X, y, a, alpha))
    return P, D


def classification_w(X, y, dual, scaling=1.0):
    """w(alpha) = sum_i alpha_i y_i x~_i over the augmented samples."""
    return augmented(X, scaling).T @ (np.asarray(dual, np.float64) * signs(y))


def classification_dual(model, X, y, dual, params, scaling=1.0):
    """The liblinear dual objective D(alpha)."""
    C = params["C"]
    a = np.asarray(dual, np.float64)
    w = classification_w(X, y, a, scaling)
    if model == "hinge":
        return a.sum() - 0.5 * w @ w
    if model == "sqhinge":
        return a.sum() - (a * a).sum() / (4 * C) - 0.5 * w @ w
    ent = xlogy(a, a) + xlogy(C - a, C - a) - xlogy(C, C)
    return -0.5 * w @ w - ent.sum()


def gap_from_coordinates(model, X, y, a, params, scaling=1.0):
    """(P, D) at the solver's coordinate vector a, both computed here."""
    if model in REGRESSION:
        b = regression_intercept(X, y, a)
        return primal(model, X, y, a, b, params), regression_dual(model, X, y, a, params)
    w = classification_w(X, y, a, scaling)
    return primal_w(model, X, y, w, params, scaling), classification_dual(model, X, y, a, params,
                                                                          scaling)


def random_feasible(model, n_coords, params, P0_value, rng):
    """A random point in the domain of every g_i."""
    if model == "lasso":
        B = P0_value / params["alpha"]
        return rng.uniform(-1, 1, n_coords) * rng.choice([1e-3, 0.1, 1.0], n_coords) * B
    if model in ("enet", "ridge"):
        return rng.standard_normal(n_coords) * rng.choice([0.0, 0.1, 3.0], n_coords)
    C = params["C"]
    if model == "hinge":
        return rng.choice([0.0, C, 0.5 * C], n_coords) * rng.uniform(0.5, 1, n_coords)
    if model == "sqhinge":
        return rng.exponential(C, n_coords) * rng.choice([0.0, 1.0], n_coords)
    return C * rng.uniform(1e-9, 1 - 1e-9, n_coords)


# -------------------------------------------------------------------------- oracles

def regression_oracle(model, X, y, params, center=True):
    """coef, intercept and P of the exact optimum (sklearn CD at tol 1e-13 / closed form)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import ElasticNet, Lasso

    Xd = dense64(X)
    if model == "ridge":
        Xc, yc = (Xd - Xd.mean(0), y - y.mean()) if center else (Xd, y)
        coef = np.linalg.solve(Xc.T @ Xc + params["alpha"] * np.eye(Xd.shape[1]), Xc.T @ yc)
    else:
        cls = Lasso if model == "lasso" else ElasticNet
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = cls(**params, tol=1e-13, max_iter=200_000, fit_intercept=center).fit(Xd, y)
        coef = est.coef_
    intercept = regression_intercept(Xd, y, coef, center)
    P = primal(model, Xd, y, coef, intercept, params)
    D = regression_dual(model, Xd, y, coef, params, center)
    return dict(coef=coef, intercept=intercept, P=P, D=D, dual=None)


def _liblinear(model, X, y, params, scaling=1.0):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model == "logistic":
            est = LogisticRegression(C=params["C"], solver="liblinear", dual=True, tol=1e-12, random_state=0,
                                     max_iter=100_000, fit_intercept=scaling is not None,
                                     intercept_scaling=scaling or 1.0)
        else:
            est = LinearSVC(C=params["C"], loss=LOSS[model], dual=True, tol=1e-12, random_state=0,
                            max_iter=20_000, fit_intercept=scaling is not None,
                            intercept_scaling=scaling or 1.0)
        est.fit(X, y)
    if scaling is None:
        return est.coef_.ravel().copy()
    return np.append(est.coef_.ravel(), est.intercept_[0] / scaling)


def _scipy_dual(model, X, y, params, scaling=1.0):
    """Box-constrained dual QP of the SVM by L-BFGS-B (smooth, so tight)."""
    C = params["C"]
    Q = augmented(X, scaling) * signs(y)[:, None]
    n = len(y)
    quad = 0.0 if model == "hinge" else 1.0 / (2 * C)

    def fun(a):
        w = Q.T @ a
        return 0.5 * w @ w - a.sum() + 0.5 * quad * a @ a, Q @ w - 1.0 + quad * a

    bounds = [(0.0, C if model == "hinge" else None)] * n
    res = minimize(fun, np.full(n, 0.5 * C), jac=True, method="L-BFGS-B", bounds=bounds,
                   options=dict(maxiter=100_000, maxfun=200_000, ftol=1e-16, gtol=1e-13,
                                maxcor=50))
    return np.clip(res.x, 0.0, C if model == "hinge" else None)


def _scipy_primal(model, X, y, params, w0, scaling=1.0):
    """L-BFGS on the smooth primal (squared hinge, logistic)."""
    C = params["C"]
    Q = augmented(X, scaling) * signs(y)[:, None]

    def fun(w):
        m = Q @ w
        if model == "sqhinge":
            h = np.maximum(0.0, 1.0 - m)
            return 0.5 * w @ w + C * h @ h, w - 2 * C * Q.T @ h
        return 0.5 * w @ w + C * np.logaddexp(0.0, -m).sum(), w - C * Q.T @ expit(-m)

    res = minimize(fun, w0, jac=True, method="L-BFGS-B",
                   options=dict(maxiter=100_000, ftol=1e-16, gtol=1e-13, maxcor=50))
    return res.x


def classification_oracle(model, X, y, params, scaling=1.0):
    """Best primal point (liblinear, scipy) and best dual point found, both evaluated here.

    scaling: the intercept column's value (None: no intercept)."""
    C = params["C"]
    candidates = [_liblinear(model, dense64(X), y, params, scaling)]
    duals = []
    if model in ("hinge", "sqhinge"):
        a = _scipy_dual(model, X, y, params, scaling)
        duals.append(a)
        candidates.append(classification_w(X, y, a, scaling))
    if model in ("sqhinge", "logistic"):
        candidates.append(_scipy_primal(model, X, y, params, candidates[0], scaling))
    Ps = [primal_w(model, X, y, w, params, scaling) for w in candidates]
    best = candidates[int(np.argmin(Ps))]
    m = signs(y) * (augmented(X, scaling) @ best)
    if model == "sqhinge":   # KKT: alpha_i = 2 C max(0, 1 - m_i)
        duals.append(2 * C * np.maximum(0.0, 1.0 - m))
    if model == "logistic":  # KKT: alpha_i = C sigmoid(-m_i)
        duals.append(C * expit(-m))
    Ds = [classification_dual(model, X, y, a, params, scaling) for a in duals]
    k = int(np.argmax(Ds))
    if scaling is None:
        coef, intercept = best, 0.0
    else:
        coef, intercept = best[:-1], best[-1] * scaling
    return dict(coef=coef, intercept=intercept, P=min(Ps), D=Ds[k], dual=duals[k])


def oracle(model, X, y, params, fit_intercept=True, scaling=1.0):
    if model in REGRESSION:
        return regression_oracle(model, X, y, params, center=fit_intercept)
    return classification_oracle(model, X, y, params, scaling if fit_intercept else None)


# ------------------------------------------------------- classifiers in the primal ---
# LogisticRegression(penalty=..., dual=False) and LinearSVC(penalty=..., loss="squared_hinge",
# dual=False): C sum_k loss(y_k <x_k, w>) + penalty(w), the intercept (when fitted) a feature of
# value intercept_scaling penalised as the others (liblinear's convention), written out here.
PRIMAL = {  # oracle name: (registry entry, loss, l1 share of the penalty)
    "logistic_l1": ("logistic_l1", "logistic", 1.0),
    "logistic_l2": ("logistic_l2", "logistic", 0.0),
    "logistic_enet": ("logistic_elasticnet", "logistic", 0.4),
    "sqhinge_l1": ("svm_l1", "squared_hinge", 1.0),
    "sqhinge_l2": ("svm_l2", "squared_hinge", 0.0),
}
PRIMAL_C = {"logistic": 0.3, "squared_hinge": 0.1}


def primal_params(name):
    """The registry entry's parameters of a primal oracle model (C; l1_ratio for the elastic net)."""
    entry, loss, l1 = PRIMAL[name]
    params = dict(C=PRIMAL_C[loss])
    if entry == "logistic_elasticnet":
        params["l1_ratio"] = l1
    return params


def primal_objective(name, X, y, w, C, scaling=1.0):
    """The user's objective of the augmented weights w (the intercept's weight last, when
    ``scaling`` is not None)."""
    _, loss, l1 = PRIMAL[name]
    m = signs(y) * (augmented(X, scaling) @ np.asarray(w, np.float64))
    data = C * (np.logaddexp(0.0, -m).sum() if loss == "logistic" else (np.maximum(0.0, 1.0 - m) ** 2).sum())
    return data + l1 * np.abs(w).sum() + 0.5 * (1.0 - l1) * w @ w


def primal_dual_value(name, X, y, w, C, scaling=1.0):
    """The dual objective D(u) = -f*(u) - sum_j g*(-(A^T u)_j) at the dual point the margins of w
    give (u_k = C loss'(m_k), the signed data A), rescaled into the L1 penalty's feasible set
    (t = min(1, 1 / max |A^T u|)) for a pure L1 penalty: a lower bound of the optimum, from w
    alone, independent of the solvers' certificates."""
    _, loss, l1 = PRIMAL[name]
    A = augmented(X, scaling) * signs(y)[:, None]
    m = A @ np.asarray(w, np.float64)
    u = -C * expit(-m) if loss == "logistic" else -2.0 * C * np.maximum(0.0, 1.0 - m)
    s = A.T @ u
    l2 = 1.0 - l1
    if l2 == 0.0:
        u = u * min(1.0, l1 / np.abs(s).max())
        g_conj = 0.0
    else:
        g_conj = (np.maximum(0.0, np.abs(s) - l1) ** 2).sum() / (2.0 * l2)
    if loss == "logistic":
        p = -u / C
        f_conj = C * (xlogy(p, p) + xlogy(1.0 - p, 1.0 - p)).sum()
    else:
        f_conj = (u + u * u / (4.0 * C)).sum()
    return -f_conj - g_conj


def _split_lbfgs(name, X, y, C, scaling, w0):
    """L-BFGS-B on w = p - q (p, q >= 0): the L1 penalty becomes linear and the objective smooth
    (both losses are C^1), so it converges tightly."""
    _, loss, l1 = PRIMAL[name]
    A = augmented(X, scaling) * signs(y)[:, None]
    d = A.shape[1]

    def fun(pq):
        w = pq[:d] - pq[d:]
        m = A @ w
        if loss == "logistic":
            f, gm = C * np.logaddexp(0.0, -m).sum(), -C * expit(-m)
        else:
            h = np.maximum(0.0, 1.0 - m)
            f, gm = C * h @ h, -2.0 * C * h
        gw = A.T @ gm + (1.0 - l1) * w
        f += l1 * pq.sum() + 0.5 * (1.0 - l1) * w @ w
        return f, np.concatenate([gw + l1, -gw + l1])

    start = np.concatenate([np.maximum(w0, 0.0), np.maximum(-w0, 0.0)])
    res = minimize(fun, start, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * (2 * d),
                   options=dict(maxiter=100_000, maxfun=200_000, ftol=1e-16, gtol=1e-14, maxcor=50))
    return res.x[:d] - res.x[d:]


def primal_oracle(name, X, y, scaling=1.0):
    """The optimum of a primal classifier: scikit-learn at tol 1e-14 (saga for the logistic
    penalties, liblinear's primal solvers for the squared hinge; the intercept as a feature, so it
    is penalised as ours), refined by L-BFGS-B on the split variables, the best of them kept; and
    its certificate: the dual value at its own dual point (:func:`primal_dual_value`)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    _, loss, l1 = PRIMAL[name]
    C = PRIMAL_C[loss]
    Xa = augmented(X, scaling)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loss == "logistic":
            est = LogisticRegression(C=C, l1_ratio=l1, solver="saga", tol=1e-14, max_iter=200_000,
                                     fit_intercept=False, random_state=0).fit(Xa, y)
        else:
            est = LinearSVC(C=C, penalty="l1" if l1 == 1.0 else "l2", dual=False, tol=1e-14, max_iter=200_000,
                            fit_intercept=False, random_state=0).fit(Xa, y)
    sk = est.coef_.ravel().astype(np.float64)
    candidates = [sk, _split_lbfgs(name, X, y, C, scaling, sk)]
    Ps = [primal_objective(name, X, y, w, C, scaling) for w in candidates]
    k = int(np.argmin(Ps))
    w = candidates[k]
    return dict(w=w, P=Ps[k], P_sklearn=Ps[0], D=primal_dual_value(name, X, y, w, C, scaling), C=C)
