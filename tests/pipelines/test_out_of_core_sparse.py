"""experiment=out_of_core_sparse on tiny click-like data: the synthetic Criteo-like rows made
straight into the sparse store, a logistic regression in the dual trained from disk by DuHL,
sequential and random blocks with a quarter of the data in RAM.

Oracles: liblinear (scikit-learn's LogisticRegression, dual) on the store's matrix for the
objective; /proc/self/io read_bytes (logged per arm as os_read_bytes) for the trace's bytes_disk."""

import warnings

import numpy as np
from mlflow.tracking import MlflowClient
from sklearn.linear_model import LogisticRegression

from conftest import all_runs, family
from solvers.storage.sparse_store import open_store

TINY = ["experiment=out_of_core_sparse", "experiment.max_time=60", "experiment.target_rel_gap=1e-7",
        "progress=false", "data=synthetic_criteo", "data.n_samples=2000", "data.hash_bits=10",
        "data.nnz_per_row=12", "data.n_informative=50", "device.host_budget=0.25", "model.C=0.05",
        "~experiment.arms.peer_vw"]
ON_DISK = {"duhl-gap", "sequential", "random"}


def test_arms_train_from_the_sparse_store_count_every_byte_and_reach_liblinears_objective(
        experiment, capsys, data_cache):
    result = experiment(*TINY)
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ON_DISK
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}
    folder = next(p for p in data_cache.iterdir() if p.name.startswith("synthetic_criteo"))
    X = open_store(folder, "X_csr").matrix().tocsr().astype(np.float64).copy()  # (memory-mapped: a copy for liblinear)
    y = np.where(np.load(folder / "y.npy") > 0, 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = LogisticRegression(C=0.05, solver="liblinear", dual=True, fit_intercept=False, tol=1e-12,
                               max_iter=100_000).fit(X, y).coef_.ravel()
    p_ll = 0.5 * w @ w + 0.05 * np.logaddexp(0, -y * (X @ w)).sum()
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        metrics = run.data.metrics
        assert metrics["reached_target"] == 1, name
        primal = client.get_metric_history(run.info.run_id, "primal")[-1].value
        assert primal <= p_ll * (1 + 1e-6), name
        bytes_disk = client.get_metric_history(run.info.run_id, "bytes_disk")[-1].value
        assert 0 < metrics["os_read_bytes"] <= bytes_disk * 1.01 + 1e6, name
