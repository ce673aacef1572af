"""experiment=out_of_core_svm on tiny data: the dual models' arms read the samples from the
cache's sample-major copy with a host_budget, the labels' signs applied as rows are read.

Oracles: liblinear (scikit-learn's LinearSVC / LogisticRegression, dual) on the cached matrix
(np.load) and the median-split labels for the objective; /proc/self/io read_bytes (logged per
arm as os_read_bytes) for the trace's bytes_disk; the data's size for the passes."""

import warnings

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sklearn.linear_model import LogisticRegression
from sklearn.svm import LinearSVC

from conftest import all_runs, family

TINY = ["experiment=out_of_core_svm", "experiment.max_time=60", "experiment.target_rel_gap=1e-8", "progress=false",
        "data.n_samples=700", "data.n_features=128", "data.n_informative=10", "model.C=0.01"]
ON_DISK = {"duhl-gap", "sequential", "random"}


@pytest.mark.parametrize("model", ["hinge", "logistic"])  # squared hinge: tests/solvers/duhl/test_duhl_on_disk_dual.py
def test_dual_arms_read_samples_from_disk_count_every_byte_and_reach_liblinears_objective(
        experiment, capsys, data_cache, model):
    extra = ["model=logistic"] if model == "logistic" else [f"model.loss={model}"]
    result = experiment(*TINY, *extra)
    out = capsys.readouterr().out
    assert "GB/s, one cold read" in out and "Disk and RAM" in out and "trains on its sign about the median" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ON_DISK
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}

    folder = next(p for p in data_cache.iterdir() if p.name.startswith("synthetic_dense") and
                  np.load(p / "X.npy", mmap_mode="r").shape == (700, 128))
    X, target = np.load(folder / "X.npy"), np.load(folder / "y.npy")
    np.testing.assert_array_equal(np.load(folder / "X_rows.npy"), X)  # the copy the arms read
    y = np.where(target > np.median(target), 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # liblinear may stop at max_iter: its objective is the bar
        if model == "logistic":
            est = LogisticRegression(C=0.01, solver="liblinear", dual=True, fit_intercept=False, tol=1e-12,
                                     max_iter=100_000)
        else:
            est = LinearSVC(C=0.01, loss=model, dual=True, fit_intercept=False, tol=1e-12, max_iter=100_000)
        w = est.fit(X, y).coef_.ravel()
    m = y * (X @ w)
    loss = {"hinge": np.maximum(0, 1 - m), "squared_hinge": np.maximum(0, 1 - m) ** 2,
            "logistic": np.logaddexp(0, -m)}[model]
    p_ll = 0.5 * w @ w + 0.01 * loss.sum()

    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        metrics = run.data.metrics
        assert run.data.params["device.host_budget"] == "0.25"
        assert metrics["reached_target"] == 1, name
        primal = client.get_metric_history(run.info.run_id, "primal")[-1].value
        assert primal <= p_ll * (1 + 1e-7), name  # certified to 1e-8 of P(0): at the optimum
        bytes_disk = client.get_metric_history(run.info.run_id, "bytes_disk")[-1].value
        assert 0 < metrics["os_read_bytes"] <= bytes_disk * 1.01 + 1e6, name
        assert bytes_disk >= X.nbytes  # a certificate needs every coordinate once
        assert metrics["peak_rss_delta"] < 50e6, name


def test_an_intercept_on_disk_is_refused_by_name(experiment):
    with pytest.raises((SystemExit, ValueError), match="The 'fit_intercept' parameter of LinearSVC must be False"):
        experiment(*TINY, "model.fit_intercept=true")
