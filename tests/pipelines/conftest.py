"""Helpers for the pipeline tests: run the real CLI on tiny data, read MLflow back."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Small enough that every arm finishes in well under a second.
TINY = ["data.n_samples=120", "data.n_features=40", "data.n_informative=5",
        "experiment.target_rel_gap=1e-4", "experiment.max_time=10", "progress=false"]


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """One dataset cache for the whole session: tests share the tiny datasets."""
    return tmp_path_factory.mktemp("data-cache")


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """An MLflow sqlite store with its tables made: creating one costs ~5 s, copying it nothing."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def cli(tmp_path, data_cache, empty_store):
    """cli(*overrides, multirun=False) runs `python -m pipelines.experiment` with
    its MLflow store, outputs and cache under tmp_path. Returns the CompletedProcess;
    ``cli.uri`` is the tracking URI."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def run(*overrides, multirun=False, timeout=240):
        command = [sys.executable, "-m", "pipelines.experiment", *(["-m"] if multirun else []),
                   f"tracking.uri={uri}", f"cache_dir={data_cache}",
                   f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                   *overrides]
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)

    run.uri = uri
    run.db = tmp_path / "mlflow.db"
    return run


def all_runs(uri):
    """Every run in every experiment of the store (empty when the store does not exist)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments(view_type=ViewType.ALL)
    return client.search_runs([e.experiment_id for e in experiments], run_view_type=ViewType.ALL,
                              max_results=1000) if experiments else []
