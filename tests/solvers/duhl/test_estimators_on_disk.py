"""The estimators trained from an .npy on disk (host_budget): the same coefficients as in RAM.

Oracles: scikit-learn's own estimators on the arrays in RAM, and ours on the same arrays in RAM;
the bytes the disk tier counts against the file's size."""

import numpy as np
import pytest
from sklearn import linear_model, svm

from solvers import ElasticNet, Lasso, LinearSVC, LogisticRegression

N, P = 200, 30


def data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, P))
    w = np.zeros(P)
    w[:5] = rng.standard_normal(5)
    return X, X @ w + 0.1 * rng.standard_normal(N)


def saved(tmp_path, X, fortran, name="X.npy"):
    np.save(tmp_path / name, np.asfortranarray(X) if fortran else np.ascontiguousarray(X))
    return tmp_path / name


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_lasso_from_a_memory_map_under_a_host_budget_is_lasso_in_ram(tmp_path, fit_intercept):
    X, y = data()
    X_disk = np.load(saved(tmp_path, X, fortran=True), mmap_mode="r")
    alpha = 0.05 * np.abs(X.T @ (y - y.mean())).max() / N
    kw = dict(alpha=alpha, fit_intercept=fit_intercept, tol=1e-10, random_state=0)
    disk = Lasso(host_budget=0.25, **kw).fit(X_disk, y)
    ram = Lasso(**kw).fit(X, y)
    sk = linear_model.Lasso(alpha=alpha, fit_intercept=fit_intercept, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(disk.coef_, sk.coef_, atol=1e-6)
    np.testing.assert_allclose(disk.coef_, ram.coef_, atol=1e-6)
    assert disk.intercept_ == pytest.approx(sk.intercept_, abs=1e-6)
    assert disk.history_["bytes_disk"].iloc[-1] >= X.nbytes  # read from disk, counted (a pass at least)
    assert disk.history_["n_resident"].max() <= P // 4  # a quarter of the features in RAM at a time
    np.testing.assert_allclose(disk.predict(X), sk.predict(X), atol=1e-5)


def test_elastic_net_from_a_path(tmp_path):
    X, y = data(seed=1)
    path = saved(tmp_path, X.astype(np.float32), fortran=True)
    disk = ElasticNet(alpha=0.05, l1_ratio=0.7, tol=1e-10, host_budget="4KB", random_state=0).fit(str(path), y)
    sk = linear_model.ElasticNet(alpha=0.05, l1_ratio=0.7, tol=1e-14, max_iter=100_000).fit(
        X.astype(np.float32).astype(np.float64), y)
    assert disk.coef_.dtype == np.float32 and disk.n_features_in_ == P
    np.testing.assert_allclose(disk.coef_, sk.coef_, atol=1e-5)
    assert disk.history_["bytes_disk"].iloc[-1] >= X.nbytes // 2


@pytest.mark.parametrize("cls,sk_cls", [(LinearSVC, svm.LinearSVC),
                                        (LogisticRegression, linear_model.LogisticRegression)])
def test_classifiers_from_a_c_order_file_are_the_same_as_in_ram(tmp_path, cls, sk_cls):
    X, y = data(seed=2)
    labels = np.where(y > np.median(y), "up", "down")
    path = saved(tmp_path, X, fortran=False)
    kw = dict(C=0.5, fit_intercept=False, tol=1e-8, random_state=0)
    disk = cls(host_budget=0.5, **kw).fit(np.load(path, mmap_mode="r"), labels)
    ram = cls(**kw).fit(X, labels)
    # the primal is 1-strongly convex in w: ||w - w*||^2 / 2 <= its certified duality gap
    bound = np.sqrt(2 * disk.dual_gap_) + np.sqrt(2 * ram.dual_gap_)
    assert np.linalg.norm(disk.coef_ - ram.coef_) <= bound and bound < 1e-2
    assert list(disk.classes_) == ["down", "up"]
    assert disk.history_["bytes_disk"].iloc[-1] >= X.nbytes
    extra = {"solver": "liblinear"} if sk_cls is linear_model.LogisticRegression else {}
    sk = sk_cls(C=0.5, fit_intercept=False, tol=1e-12, max_iter=100_000, **extra).fit(X, labels)
    assert (disk.predict(X) == sk.predict(X)).mean() >= 0.99


def test_unsupported_data_on_disk_is_one_line_error_naming_the_parameter(tmp_path):
    X, y = data()
    c_order = np.load(saved(tmp_path, X, fortran=False, name="C.npy"), mmap_mode="r")
    f_order = np.load(saved(tmp_path, X, fortran=True, name="F.npy"), mmap_mode="r")
    np.save(tmp_path / "ints.npy", np.asfortranarray(np.ones((N, P), dtype=np.int64)))
    cases = [
        (Lasso(host_budget=0.25), c_order, y, r"The 'X' parameter of Lasso on disk must be a Fortran-order \.npy: "
                                              r"it reads features .* Got a C-order file .*C\.npy instead: write it "
                                              r"once in Fortran order \(np\.lib\.format\.open_memmap"),
        (LinearSVC(host_budget=0.25, fit_intercept=False, dual=True), f_order, y > 0,
         r"The 'X' parameter of LinearSVC on disk must be a C-order \.npy: it reads samples"),
        (LinearSVC(host_budget=0.25), str(tmp_path / "C.npy"), y > 0,
         r"The 'fit_intercept' parameter of LinearSVC must be False with the data on disk"),
        (Lasso(host_budget=0.25), f_order[:50], y[:50], r"The 'X' parameter of Lasso with host_budget must be the "
                                                       r"whole \.npy .* Got a memory map of .* of shape \(50, 30\)"),
        (Lasso(host_budget=0.25), X, y, r"The 'host_budget' parameter of Lasso applies to data on disk: .* Got 0\.25 "
                                        r"with X a ndarray in RAM instead\."),
        (Lasso(host_budget=0.25), str(tmp_path / "nope.npy"), y, r"The 'X' parameter of Lasso names no file: "),
        (Lasso(host_budget=0.25), str(tmp_path / "ints.npy"), y, r"must be a 2-D float32 or float64 \.npy\. Got int64"),
        (Lasso(host_budget=0.25), f_order, y[:-1], r"The 'y' parameter of Lasso must hold one value per sample of X "
                                                   r"\(200\)\. Got shape \(199,\) instead\."),
        (Lasso(host_budget=-1), f_order, y, r"The 'host_budget' parameter of Lasso must be"),
    ]
    for est, X_bad, y_bad, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            est.fit(X_bad, y_bad)
        assert "\n" not in str(error.value)


def test_a_memory_map_without_host_budget_is_data_in_ram(tmp_path):
    X, y = data()
    X_map = np.load(saved(tmp_path, X, fortran=False), mmap_mode="r")  # any order: copied as scikit-learn does
    model = Lasso(alpha=0.1, tol=1e-10).fit(X_map, y)
    assert "bytes_disk" not in model.history_
    np.testing.assert_allclose(model.coef_, Lasso(alpha=0.1, tol=1e-10).fit(X, y).coef_, atol=1e-8)


@pytest.mark.parametrize("fortran", [False, True])
def test_predictions_from_a_file_on_disk_equal_those_from_ram_in_bounded_ram(tmp_path, fortran, monkeypatch):
    """predict / decision_function / predict_proba / score on an .npy path or its memory map:
    read a buffer at a time past the page cache (C order: blocks of samples; Fortran: blocks of
    features), equal to X @ coef_.T + intercept_ in RAM; the buffer, not the file, bounds the
    RAM (a buffer of 16 rows of the 600-sample file here: the data is read in ~38 blocks)."""
    import solvers.storage.on_disk as on_disk
    rng = np.random.default_rng(5)
    X = rng.standard_normal((600, 12))
    y3 = np.digitize(X[:, 0] + 0.3 * rng.standard_normal(600), [-0.5, 0.5])  # three classes: ovr
    path = saved(tmp_path, X, fortran)
    blocks = []
    real = on_disk.linear_scores

    def small(matrix, coef, buffer_bytes=None):
        blocks.append(matrix.shape)
        return real(matrix, coef, buffer_bytes=16 * matrix.row_bytes)

    monkeypatch.setattr("solvers.duhl.estimators.linear_scores", small)
    clf = LogisticRegression(C=0.5, tol=1e-6, random_state=0).fit(X, y3)
    reg = Lasso(alpha=0.01, tol=1e-6, random_state=0).fit(X, X[:, 1] - X[:, 2])
    for X_disk in (path, str(path), np.load(path, mmap_mode="r")):
        np.testing.assert_allclose(clf.decision_function(X_disk), X @ clf.coef_.T + clf.intercept_, rtol=1e-12)
        np.testing.assert_array_equal(clf.predict(X_disk), clf.predict(X))
        np.testing.assert_allclose(clf.predict_proba(X_disk), clf.predict_proba(X), rtol=1e-12)
        np.testing.assert_allclose(reg.predict(X_disk), X @ reg.coef_ + reg.intercept_, rtol=1e-12, atol=1e-14)
        assert reg.score(X_disk, X[:, 1] - X[:, 2]) == pytest.approx(reg.score(X, X[:, 1] - X[:, 2]), rel=1e-12)
    assert len(blocks) == 3 * 5  # every call above read the file through the disk tier
    with pytest.raises(ValueError, match="X has 12 features, but Lasso is expecting 11 features as input"):
        Lasso(alpha=0.01).fit(X[:, :11], X[:, 1]).predict(path)
    np.save(tmp_path / "v.npy", X[:, 0])
    with pytest.raises(ValueError, match="The 'X' parameter of LogisticRegression must be a 2-D float .npy"):
        clf.predict(tmp_path / "v.npy")
    view = np.load(path, mmap_mode="r")[:100]  # a view of the file: an array like any other
    np.testing.assert_array_equal(clf.predict(view), clf.predict(X[:100]))
