"""Bad input gets a ValueError that names the parameter (or the array) and the value."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import ElasticNet, Lasso, LinearSVC, LogisticRegression, Ridge
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

ALL = [Lasso, ElasticNet, Ridge, LinearSVC, LogisticRegression]
ids = [c.__name__ for c in ALL]


def _data(cls, n=30, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if cls in (LinearSVC, LogisticRegression):
        y = np.where(rng.standard_normal(n) > 0, 1, 0)
        y[:2] = [0, 1]
    else:
        y = rng.standard_normal(n)
    return X, y


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("cls", ALL, ids=ids)
def test_non_finite_X(cls, bad, sparse):
    X, y = _data(cls)
    X[3, 1] = bad
    if sparse:
        X = sp.csr_matrix(X)
    word = "NaN" if np.isnan(bad) else "infinity"
    with pytest.raises(ValueError, match=rf"Input X contains {word}"):
        cls().fit(X, y)
    if not sparse:  # and at predict time
        est = cls().fit(*_data(cls))
        with pytest.raises(ValueError, match=rf"Input X contains {word}"):
            est.predict(X)


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("cls", ALL, ids=ids)
def test_non_finite_y(cls, bad):
    X, y = _data(cls)
    y = y.astype(float)
    y[5] = bad
    with pytest.raises(ValueError, match=r"Input y contains (NaN|infinity)"):
        cls().fit(X, y)


@pytest.mark.parametrize("cls", ALL, ids=ids)
def test_shapes(cls):
    X, y = _data(cls)
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[30, 29\]"):
        cls().fit(X, y[:-1])
    with pytest.raises(ValueError, match=r"0 sample\(s\)"):
        cls().fit(X[:0], y[:0])
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        cls().fit(X[:, :0], y)
    est = cls().fit(X, y)
    with pytest.raises(ValueError, match=r"X has 3 features.*expecting 4"):
        est.predict(X[:, :3])


@pytest.mark.parametrize("cls", [LinearSVC, LogisticRegression], ids=["LinearSVC",
                                                                      "LogisticRegression"])
def test_one_class_only(cls):
    X, _ = _data(cls)
    with pytest.raises(ValueError, match=r"(?i)one class.*7"):
        cls().fit(X, np.full(30, 7))
    with pytest.raises(ValueError, match=r"(?i)two classes"):   # the problem layer too
        make_problem("svm" if cls is LinearSVC else "logistic", X, np.full(30, 7.0))


# (estimator, side options, one coordinate's bytes on _data's 30 x 4: a feature column of 30 float64 (the
# Lasso family; a classifier in the primal, whose intercept is one more such column) or a sample row of
# 4 features and the intercept (a classifier in the dual))
BUDGET_CASES = [(cls, {}, 30 * 8) for cls in (Lasso, ElasticNet, Ridge)] + [
    (LinearSVC, {}, 30 * 8),  # dual="auto": 30 samples >= 4 features
    (LogisticRegression, {}, 30 * 8),  # the same: under a budget, _data's features are coupled too little for the dual
    (LinearSVC, dict(dual=True), 5 * 8), (LogisticRegression, dict(dual=True), 5 * 8)]


@pytest.mark.parametrize("cls, side, one", BUDGET_CASES,
                         ids=[f"{c.__name__}{'-dual' if s else ''}" for c, s, _ in BUDGET_CASES])
def test_memory_budget(cls, side, one):
    X, y = _data(cls)
    BUDGET_MSG = rf"The 'memory_budget' parameter of {cls.__name__}"  # the class the user called
    for bad in (-3, 0, 0.0, 1.5, "abc", "12 parsecs", "-1GB", True, [0.5]):
        with pytest.raises(ValueError, match=BUDGET_MSG + r".*Got " + repr_re(bad)):
            cls(memory_budget=bad, **side).fit(X, y)
    # at least the data: holds everything, as None does (cross-validation folds are
    # smaller than the data a size was chosen for), and says so
    big = cls(memory_budget="1TB", random_state=0, **side).fit(X, y)
    whole = cls(memory_budget=None, random_state=0, **side).fit(X, y)
    np.testing.assert_array_equal(big.coef_, whole.coef_)
    assert any("holds all" in note for note in big.history_.attrs["notes"])
    if cls in (LinearSVC, LogisticRegression):  # the side whose coordinates the budget counts
        formulation = "dual" if side else "primal"
        assert any(f"the {formulation} formulation" in note for note in big.history_.attrs["notes"])
    # below one coordinate's data
    for small in ("8B", 1e-6):
        with pytest.raises(ValueError, match=BUDGET_MSG + rf".*below one coordinate's data "
                                                          rf"\({one} bytes\)"):
            cls(memory_budget=small, **side).fit(X, y)
    # the edges that are valid
    cls(memory_budget=f"{one}B", max_iter=2, **side).fit(X, y)
    cls(memory_budget="0.5KiB", max_iter=2, **side).fit(X, y)
    cls(memory_budget=1.0, max_iter=2, **side).fit(X, y)


def repr_re(value):
    import re
    return re.escape(repr(value))


@pytest.mark.parametrize("cls", ALL, ids=ids)
def test_unknown_selection_and_device(cls):
    X, y = _data(cls)
    with pytest.raises(ValueError, match=r"'selection' parameter.*Got 'fastest' instead"):
        cls(selection="fastest", memory_budget=0.5).fit(X, y)
    with pytest.raises(ValueError, match=r"'selection' parameter.*Got 'fastest' instead"):
        cls(selection="fastest").fit(X, y)   # checked even when nothing is swapped
    with pytest.raises(ValueError, match=r"'device' parameter.*Got 'tpu' instead"):
        cls(device="tpu").fit(X, y)


def test_unknown_loss():
    X, y = _data(LinearSVC)
    for loss in ("log", "l1", None):
        with pytest.raises(ValueError, match=rf"'loss' parameter of LinearSVC.*Got {loss!r}"):
            LinearSVC(loss=loss).fit(X, y)
    with pytest.raises(ValueError, match=r"'model' parameter.*Got 'svr'"):
        make_problem("svr", X, y)


@pytest.mark.parametrize("value", [0, 0.0, -1, -1e-9, np.nan, np.inf, "x", None],
                         ids=lambda v: repr(v))
@pytest.mark.parametrize("cls", ALL, ids=ids)
def test_non_positive_regularisation(cls, value):
    X, y = _data(cls)
    name = "C" if cls in (LinearSVC, LogisticRegression) else "alpha"
    with pytest.raises(ValueError, match=rf"'{name}' parameter of {cls.__name__}.*Got "
                                         rf"{repr_re(value)} instead"):
        cls(**{name: value}).fit(X, y)


def test_other_parameters():
    X, y = _data(ElasticNet)
    for l1_ratio in (-0.1, 1.5):
        with pytest.raises(ValueError, match=rf"'l1_ratio' parameter.*Got {l1_ratio!r}"):
            ElasticNet(l1_ratio=l1_ratio).fit(X, y)
    Xc, yc = _data(LinearSVC)
    with pytest.raises(ValueError, match=r"'intercept_scaling' parameter.*Got 0"):
        LinearSVC(intercept_scaling=0).fit(Xc, yc)
    with pytest.raises(ValueError, match=r"'tol' parameter.*Got -1"):
        Lasso(tol=-1).fit(X, y)
    problem = make_problem("lasso", X, y)
    for kw, name in [(dict(local_epochs=0), "local_epochs"), (dict(max_epochs=-1), "max_epochs"),
                     (dict(max_time=0), "max_time"), (dict(tol=-1e-3), "tol")]:
        with pytest.raises(ValueError, match=rf"'{name}' parameter of DuHL"):
            DuHL(**kw).solve(problem)


@pytest.mark.parametrize("cls", [Lasso, LinearSVC], ids=["Lasso", "LinearSVC"])
def test_max_iter_error_names_max_iter(cls):
    X, y = _data(cls)
    with pytest.raises(ValueError, match=r"'max_iter'.*Got 0"):
        cls(max_iter=0).fit(X, y)


def test_classification_targets():
    X, y = _data(Lasso)
    with pytest.raises(ValueError, match=r"Unknown label type: continuous"):
        LinearSVC().fit(X, y)
    with pytest.raises(ValueError, match=r"y should be a 1d array"):
        Lasso().fit(X, np.c_[y, y])


def test_nothing_reaches_a_kernel_unchecked():
    """Integers, lists and read-only inputs are converted, not rejected or modified."""
    X, y = _data(Lasso)
    ref = Lasso(alpha=0.1, tol=1e-10, random_state=0).fit(X, y).coef_
    Xi = np.round(X * 10).astype(np.int64)
    Lasso(alpha=0.1, random_state=0).fit(Xi, y)
    Xr = X.copy()
    Xr.setflags(write=False)
    np.testing.assert_allclose(Lasso(alpha=0.1, tol=1e-10, random_state=0).fit(Xr.tolist(), y).coef_,
                               ref, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(Lasso(alpha=0.1, tol=1e-10, random_state=0).fit(Xr, y).coef_, ref,
                               rtol=1e-6, atol=1e-9)


def test_wrong_types_get_the_tables_message_not_a_type_error():
    X, y = _data(Lasso)
    with pytest.raises(ValueError, match=r"The 'l1_ratio' parameter of ElasticNet must be a float in \[0, 1\]. "
                                         r"Got 'a' instead."):
        ElasticNet(l1_ratio="a").fit(X, y)
    with pytest.raises(ValueError, match=r"The 'random_state' parameter of Lasso must be None, an int >= 0 or a "
                                         r"numpy.random.Generator. Got 'x' instead."):
        Lasso(random_state="x").fit(X, y)


def test_numpy_scalars_are_accepted_as_python_numbers():
    """GridSearchCV over np.arange / np.logspace grids passes NumPy scalars."""
    from sklearn.model_selection import GridSearchCV

    X, y = _data(Lasso)
    search = GridSearchCV(Lasso(), {"alpha": np.logspace(-3, -1, 3), "max_iter": np.arange(50, 151, 100)}, cv=3)
    search.fit(X, y)
    assert isinstance(search.best_params_["max_iter"], np.integer)


def test_an_unconverged_fit_warns_and_counts_at_most_max_iter():
    from sklearn.exceptions import ConvergenceWarning

    X, y = _data(Lasso, n=60, d=5)
    with pytest.warns(ConvergenceWarning, match=r"Lasso did not converge: relative duality gap .* is above "
                                                 r"tol=1e-12 after max_iter=2 epochs"):
        est = Lasso(alpha=1e-4, max_iter=2, tol=1e-12).fit(X, y)
    assert est.n_iter_ <= 2
    Xs = X.copy()
    Xs[:, 0] *= 1e150  # a badly scaled column: no convergence in 1000 epochs, and it says so
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        Lasso(alpha=1e-4, tol=1e-12).fit(Xs, y)


def test_a_budget_larger_than_a_fold_works_in_cross_validation():
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    X = rng.standard_normal((1250, 100))
    y = X @ rng.standard_normal(100) + 0.1 * rng.standard_normal(1250)
    scores = cross_val_score(Lasso(alpha=0.1, memory_budget="900KB"), X, y, cv=5)  # folds are 0.8 MB
    assert np.all(scores > 0.5)
