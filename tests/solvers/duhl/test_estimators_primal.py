"""LogisticRegression(penalty, l1_ratio, dual) and LinearSVC(penalty, loss, dual) as
scikit-learn's: dual="auto" picks the side by scikit-learn's rule (the choice in
history_.attrs["notes"]), the combinations scikit-learn refuses refused with its messages, and
the fitted coef_ / intercept_ minimise the objective (the oracle of tests/solvers/glm_oracles.py)
whichever side solved it."""

import re
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.svm import LinearSVC as SkLinearSVC

import glm_oracles as go
from solvers.duhl import LinearSVC, LogisticRegression


@pytest.fixture(scope="module")
def data():
    return go.make_data("classification", False, np.float64)


def _sklearn_error(cls, X, y, **kw):
    with warnings.catch_warnings(), pytest.raises(ValueError) as caught:
        warnings.simplefilter("ignore")
        cls(**kw).fit(X, y)
    return str(caught.value)


@pytest.mark.parametrize("kw", [dict(penalty="l1", loss="hinge"), dict(penalty="l1", loss="hinge", dual=False),
                                dict(penalty="l2", loss="hinge", dual=False),
                                dict(penalty="l1", loss="squared_hinge", dual=True)])
def test_linear_svc_refuses_as_scikit_learn(data, kw):
    X, y = data
    message = _sklearn_error(SkLinearSVC, X, y, **kw)
    with pytest.raises(ValueError, match=re.escape(message)):
        LinearSVC(**kw).fit(X, y)


def test_logistic_refuses_as_scikit_learn(data):
    X, y = data
    message = _sklearn_error(SkLogisticRegression, X, y, penalty="l1", dual=True, solver="liblinear")
    with pytest.raises(ValueError, match=re.escape(message)):
        LogisticRegression(penalty="l1", dual=True).fit(X, y)
    message = _sklearn_error(SkLogisticRegression, X, y, penalty="elasticnet", solver="saga", l1_ratio=None)
    with pytest.raises(ValueError, match=re.escape(message)):
        LogisticRegression(penalty="elasticnet").fit(X, y)
    with pytest.raises(ValueError, match="The 'penalty' parameter of LogisticRegression must be one of"):
        LogisticRegression(penalty="l3").fit(X, y)
    with pytest.raises(ValueError, match="The 'dual' parameter of LinearSVC must be 'auto' or a bool"):
        LinearSVC(dual="yes").fit(X, y)


@pytest.mark.parametrize("cls, kw, shape, side", [
    (LogisticRegression, dict(), (100, 15), "primal"),
    (LogisticRegression, dict(), (12, 15), "dual"),
    (LogisticRegression, dict(penalty="l1"), (12, 15), "primal"),
    (LinearSVC, dict(), (100, 15), "primal"),
    (LinearSVC, dict(), (12, 15), "dual"),
    (LinearSVC, dict(loss="hinge"), (100, 15), "dual"),
    (LogisticRegression, dict(dual=True), (100, 15), "dual"),
])
def test_auto_picks_the_side_and_says_so(data, cls, kw, shape, side):
    X, y = data
    X, y = X[: shape[0], : shape[1]], y[: shape[0]]
    est = cls(C=0.1, **kw).fit(X, y)
    notes = est.history_.attrs["notes"]
    assert any(f"the {side} formulation" in note for note in notes), notes


@pytest.mark.parametrize("cls, kw, binary, side", [
    # a memory budget holding part of binary (coupled) features: the logistic loss's dual
    (LogisticRegression, dict(memory_budget=0.5), True, "dual"),
    (LogisticRegression, dict(memory_budget="6KB"), True, "dual"),
    # all of the data held, centred features, or a side set: as without a budget (the primal)
    (LogisticRegression, dict(memory_budget=1.0), True, "primal"),
    (LogisticRegression, dict(memory_budget="1GB"), True, "primal"),
    (LogisticRegression, dict(memory_budget=0.5), False, "primal"),
    (LogisticRegression, dict(memory_budget=0.5, penalty="l1"), True, "primal"),
    (LogisticRegression, dict(memory_budget=0.5, dual=False), True, "primal"),
    (LinearSVC, dict(memory_budget=0.5), True, "primal"),
])
def test_auto_under_a_memory_budget_weighs_the_features_coupling(data, cls, kw, binary, side):
    """The tall test data's features made binary (about 6 non-zeros a row: coupled through their
    means) or centred (coupled to nothing: sum_j cos^2(x_j, 1) about d / n)."""
    X, y = data
    X = (X > 0.3).astype(np.float64) if binary else X - X.mean(axis=0)
    est = cls(C=0.1, **kw).fit(X, y)
    notes = est.history_.attrs["notes"]
    assert any(f"the {side} formulation" in note for note in notes), notes
    if cls is LogisticRegression and kw == dict(memory_budget=0.5):
        assert any("cos^2(x_j, 1) = " in note for note in notes), notes  # the coupling it weighed, said


@pytest.mark.parametrize("name", list(go.PRIMAL))
def test_fitted_coef_and_intercept_minimise_the_objective(data, name):
    X, y = data
    orc = go.primal_oracle(name, X, y)
    entry, loss, l1 = go.PRIMAL[name]
    penalty = "l1" if l1 == 1.0 else "l2" if l1 == 0.0 else "elasticnet"
    if loss == "logistic":
        est = LogisticRegression(penalty=penalty, C=orc["C"], l1_ratio=l1 if penalty == "elasticnet" else None,
                                 tol=1e-11, random_state=0)
    else:
        est = LinearSVC(penalty=penalty, C=orc["C"], tol=1e-11, random_state=0)
    est.fit(X, y)
    w = np.append(est.coef_.ravel(), est.intercept_[0])  # intercept_scaling 1
    P = go.primal_objective(name, X, y, w, orc["C"])
    assert abs(P - orc["P"]) <= 1e-9 * orc["P"]
    assert est.score(X, y) > 0.7


@pytest.mark.parametrize("cls", [LogisticRegression, LinearSVC])
def test_both_sides_solve_one_objective(data, cls):
    """L2: dual=True (samples as coordinates) and dual=False (features) give one optimum."""
    X, y = data
    kw = dict(C=0.1, tol=1e-10, random_state=0, intercept_scaling=2.0)
    primal, dual = cls(dual=False, **kw).fit(X, y), cls(dual=True, **kw).fit(X, y)
    np.testing.assert_allclose(primal.coef_, dual.coef_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(primal.intercept_, dual.intercept_, rtol=1e-4, atol=1e-6)


def test_multiclass_one_vs_rest_in_the_primal():
    """Three classes: each class against the rest, solved in the primal, is that binary problem's
    optimum (the oracle on the relabelled data)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((90, 6))
    y = np.argmax(X[:, :3] + 0.5 * rng.standard_normal((90, 3)), axis=1)
    est = LogisticRegression(penalty="l1", C=0.3, tol=1e-11, random_state=0).fit(X, y)
    assert est.coef_.shape == (3, 6) and est.intercept_.shape == (3,)
    for k in range(3):
        yk = np.where(y == k, 2, 1)
        orc = go.primal_oracle("logistic_l1", X, yk)
        P = go.primal_objective("logistic_l1", X, yk, np.append(est.coef_[k], est.intercept_[k]), orc["C"])
        assert abs(P - orc["P"]) <= 1e-9 * orc["P"]


def test_from_disk_in_the_primal(tmp_path, data):
    """A Fortran-order .npy (features contiguous) with a quarter of it in RAM: the L1 logistic
    regression's optimum (no intercept: the file has no column for it), read signed by the labels
    as the columns land; a C-order file serves the dual side (dual="auto"), and with an L1
    penalty is refused, naming the order it needs."""
    X, y = data
    path = tmp_path / "X_f.npy"
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=X.shape, fortran_order=True)
    out[:] = X
    del out
    orc = go.primal_oracle("logistic_l1", X, y, scaling=None)
    est = LogisticRegression(penalty="l1", C=orc["C"], fit_intercept=False, host_budget=0.25, tol=1e-11,
                             random_state=0).fit(str(path), y)
    P = go.primal_objective("logistic_l1", X, y, est.coef_.ravel(), orc["C"], scaling=None)
    assert abs(P - orc["P"]) <= 1e-9 * orc["P"]
    assert est.history_.bytes_disk.iloc[-1] > 0
    c_path = tmp_path / "X_c.npy"
    np.save(c_path, X)
    est = LogisticRegression(C=0.1, fit_intercept=False, host_budget=0.25, tol=1e-6).fit(str(c_path), y)
    assert any("the dual formulation" in note for note in est.history_.attrs["notes"])
    with pytest.raises(ValueError, match="must be a Fortran-order .npy"):
        LogisticRegression(penalty="l1", fit_intercept=False, host_budget=0.25).fit(str(c_path), y)
