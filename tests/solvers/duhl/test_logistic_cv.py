"""LogisticRegressionCV: C chosen by cross-validation over a warm-started path, against scikit-learn's
liblinear fitted at every fold and C (the held-out scores and the choice must agree)."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.model_selection import StratifiedKFold

from solvers.duhl import LogisticRegression, LogisticRegressionCV

CS = [0.01, 0.03, 0.1, 0.3, 1.0]


@pytest.fixture(scope="module")
def data():
    return make_classification(n_samples=240, n_features=20, n_informative=5, flip_y=0.1, random_state=0)


def liblinear_scores(X, y, folds, penalty, dual=False):
    """Held-out accuracy of liblinear at tol 1e-12, fitted at every fold and C."""
    scores = np.empty((len(folds), len(CS)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, (train, test) in enumerate(folds):
            for j, C in enumerate(CS):
                sk = SkLogistic(l1_ratio=1.0 if penalty == "l1" else 0.0, C=C, solver="liblinear", dual=dual,
                                tol=1e-12, max_iter=100000, random_state=0).fit(X[train], y[train])
                scores[k, j] = sk.score(X[test], y[test])
    return scores


@pytest.mark.parametrize("penalty,dual,sparse", [("l1", "auto", False), ("l2", True, False), ("l1", "auto", True)],
                         ids=["l1-primal", "l2-dual", "l1-primal-csr"])
def test_held_out_scores_and_the_chosen_c_are_liblinears(data, penalty, dual, sparse):
    X, y = data
    folds = list(StratifiedKFold(4).split(X, y))
    Xf = sp.csr_matrix(X) if sparse else X
    cv = LogisticRegressionCV(Cs=CS, cv=folds, penalty=penalty, dual=dual, tol=1e-10, max_iter=100000,
                              random_state=0).fit(Xf, y)
    expected = liblinear_scores(X, y, folds, penalty, dual=dual is True)
    np.testing.assert_array_equal(cv.scores_[1], expected)
    assert cv.C_[0] == CS[int(np.argmax(expected.mean(axis=0)))]
    assert cv.coefs_paths_[1].shape == (4, len(CS), 21) and cv.n_iter_.shape == (1, 4, len(CS))
    # the refit is scikit-learn's fit of all the data at that C
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = SkLogistic(l1_ratio=1.0 if penalty == "l1" else 0.0, C=cv.C_[0], solver="liblinear", tol=1e-12,
                        max_iter=100000, random_state=0).fit(X, y)
    s, C = np.where(y == 1, 1.0, -1.0), cv.C_[0]

    def objective(w, b):  # liblinear's: the intercept a penalised feature
        wb = np.append(w.ravel(), b)
        reg = np.abs(wb).sum() if penalty == "l1" else 0.5 * wb @ wb
        return reg + C * np.logaddexp(0, -s * (X @ w.ravel() + b)).sum()

    # within the certified gap (tol 1e-10 of P(0) = C n log 2) of liblinear's optimum at tol 1e-12
    assert abs(objective(cv.coef_, cv.intercept_[0]) - objective(sk.coef_, sk.intercept_[0])) <= 1e-9 * C * len(y)
    np.testing.assert_allclose(cv.coef_, sk.coef_, atol=1e-4)
    assert (cv.predict(Xf) == sk.predict(X)).all()


def test_each_c_starts_from_the_last_and_takes_fewer_epochs_than_from_zero(data):
    X, y = data
    folds = list(StratifiedKFold(3).split(X, y))
    cv = LogisticRegressionCV(Cs=np.logspace(-2, 1, 8), cv=folds, penalty="l1", tol=1e-8, refit=False,
                              max_iter=100000, random_state=0).fit(X, y)
    cold = sum(LogisticRegression(penalty="l1", C=C, tol=1e-8, max_iter=100000, random_state=0)
               .fit(X[train], y[train]).n_iter_ for train, _ in folds for C in cv.Cs_)
    assert cv.path_.epochs.sum() < 0.8 * cold
    assert (cv.path_.rel_gap <= 1e-8).all() and list(cv.path_.columns[:3]) == ["class", "fold", "C"]
    # refit=False: the folds' mean coefficients at the chosen C
    best = list(cv.Cs_).index(cv.C_[0])
    np.testing.assert_allclose(cv.coef_[0], cv.coefs_paths_[1][:, best, :20].mean(axis=0))
    assert not hasattr(cv, "history_")


def test_multiclass_has_a_path_per_class_and_the_default_grid(data):
    X, y = make_classification(n_samples=300, n_features=10, n_informative=6, n_classes=3, random_state=1)
    cv = LogisticRegressionCV(Cs=3, cv=3, tol=1e-6).fit(X, y)
    np.testing.assert_allclose(cv.Cs_, [1e-4, 1.0, 1e4])
    assert sorted(cv.scores_) == [0, 1, 2] and cv.C_.shape == (3,) and cv.coef_.shape == (3, 10)
    assert cv.score(X, y) > 0.6


@pytest.mark.parametrize("Cs", [0, [], [1.0, -1.0], "many", [np.inf]])
def test_a_bad_cs_is_one_line_naming_it(data, Cs):
    X, y = data
    with pytest.raises(ValueError, match=r"^The 'Cs' parameter of LogisticRegressionCV must be an int >= 1 or a "
                                         r"list of floats > 0\. Got .* instead\.$"):
        LogisticRegressionCV(Cs=Cs).fit(X, y)
