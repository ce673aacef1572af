"""experiment=out_of_core on tiny data: the DuHL arms read X from the cache's X.npy with a
host_budget, and what they read is what the operating system counts.

Oracles: scikit-learn's Lasso on the same cached matrix (np.load) for the objective;
/proc/self/io read_bytes (logged per arm as os_read_bytes) for the trace's bytes_disk;
the data's size for the passes."""

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from sklearn.linear_model import Lasso

from conftest import all_runs, family

QUICK = ["experiment=out_of_core", "experiment.max_time=20", "experiment.target_rel_gap=1e-8", "progress=false",
         "~experiment.arms.peer_daskml", "~experiment.arms.peer_sklearn", "experiment.baselines=[sequential,random]"]
TINY = [*QUICK, "data.n_samples=600", "data.n_features=400", "data.n_informative=10"]
ON_DISK = {"duhl-gap", "sequential", "random"}


def test_arms_read_from_disk_count_every_byte_and_reach_scikit_learns_objective(experiment, capsys, data_cache):
    result = experiment(*TINY)
    out = capsys.readouterr().out
    assert "GB/s, one cold read" in out and "Disk and RAM" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ON_DISK
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}
    assert float(parent.data.tags["disk_read_gbps"]) > 0

    folder = next(p for p in data_cache.iterdir() if p.name.startswith("synthetic_dense") and
                  np.load(p / "X.npy", mmap_mode="r").shape == (600, 400))
    X, y = np.load(folder / "X.npy"), np.load(folder / "y.npy")
    alpha = float(parent.data.params["model.alpha"])
    sk = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X, y)
    p_sk = 0.5 / len(y) * np.sum((y - X @ sk.coef_) ** 2) + alpha * np.abs(sk.coef_).sum()

    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        m = run.data.metrics
        assert run.data.params["device.host_budget"] == "0.25"
        assert m["reached_target"] == 1, name
        primal = client.get_metric_history(run.info.run_id, "primal")[-1].value
        assert primal <= p_sk * (1 + 1e-7), name  # certified to 1e-8 of P(0): at the optimum
        bytes_disk = client.get_metric_history(run.info.run_id, "bytes_disk")[-1].value
        # the trace counts what the arm asked of the disk; the OS what reached the block device
        # (O_DIRECT: the same bytes; a page-cache fallback could only read less)
        assert 0 < m["os_read_bytes"] <= bytes_disk * 1.01 + 1e6, name
        assert bytes_disk >= X.nbytes  # a certificate needs every coordinate once
        assert m["peak_rss_delta"] < 50e6, name  # (the data is 1.9 MB: no copy of it, no leak)


def test_a_missing_peer_library_is_named_before_any_data_is_made(experiment, monkeypatch, data_cache):
    import tasks.peers

    monkeypatch.setattr(tasks.peers, "missing_reason", lambda name: "dask-ml is not importable (test)")
    monkeypatch.setattr("pipelines.glm.missing_reason", tasks.peers.missing_reason)
    before = set(data_cache.iterdir())
    with pytest.raises(SystemExit, match="Arm 'peer_daskml': dask-ml is not importable"):
        experiment("experiment=out_of_core", "data.n_samples=601")
    assert set(data_cache.iterdir()) == before


def test_the_preset_on_a_users_own_npy_trains_from_its_converted_copy(experiment, tmp_path, capsys):
    """experiment=out_of_core data=npy: the user's C-order float32 file, its target a column,
    converted once; the DuHL arms reach scikit-learn's objective on the arrays the test wrote."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((500, 300)).astype(np.float32)
    y = X[:, :8].astype(np.float64) @ rng.standard_normal(8) + 0.1 * rng.standard_normal(500)
    np.save(tmp_path / "mine.npy", np.column_stack([X, y.astype(np.float32)]))  # C order; the target last
    result = experiment(*QUICK, "data=npy", f"data.path={tmp_path / 'mine.npy'}", "data.target_column=-1",
                        "model.alpha=0.05")
    out = capsys.readouterr().out
    assert "data: npy 500 x 300" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ON_DISK
    y32 = y.astype(np.float32).astype(np.float64)  # the target as the file holds it
    sk = Lasso(alpha=0.05, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X.astype(np.float64), y32)
    p_sk = 0.5 / len(y) * np.sum((y32 - X @ sk.coef_) ** 2) + 0.05 * np.abs(sk.coef_).sum()
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        assert run.data.metrics["reached_target"] == 1, name
        primal = client.get_metric_history(run.info.run_id, "primal")[-1].value
        assert primal <= p_sk * (1 + 1e-6), name
