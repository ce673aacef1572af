"""Helpers for the pipeline tests: run experiments in this process (``experiment``) or,
for what only a process shows (exit codes, signals, Hydra's multirun), the real CLI
(``cli``); read MLflow back."""

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


def compose_config(*overrides):
    """The experiment's config as ``python -m pipelines.experiment`` composes it."""
    from hydra import compose, initialize_config_dir

    from pipelines.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture
def store(tmp_path, empty_store):
    """A fresh MLflow store for one test; ``store.uri`` is its tracking URI."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")

    class Store:
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        db = tmp_path / "mlflow.db"

    return Store


@pytest.fixture
def experiment(tmp_path, data_cache, store):
    """experiment(*overrides) runs ``pipelines.experiment.run_experiment`` in this process on
    a fresh store (``experiment.uri``) and the shared data cache; returns its per-arm numbers
    (a failed check raises SystemExit, as the CLI exits)."""
    from pipelines.experiment import run_experiment

    def run(*overrides, name=""):
        cfg = compose_config(f"tracking.uri={store.uri}", f"cache_dir={data_cache}", *overrides)
        return run_experiment(cfg, tmp_path / "out", name, list(overrides))

    run.uri = store.uri
    run.out = tmp_path / "out"
    return run


@pytest.fixture
def cli(tmp_path, data_cache, store):
    """cli(*overrides, multirun=False) runs `python -m pipelines.experiment` with
    its MLflow store, outputs and cache under tmp_path. Returns the CompletedProcess;
    ``cli.uri`` is the tracking URI."""

    def run(*overrides, multirun=False, timeout=240):
        command = [sys.executable, "-m", "pipelines.experiment", *(["-m"] if multirun else []),
                   f"tracking.uri={store.uri}", f"cache_dir={data_cache}",
                   f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                   *overrides]
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)

    run.uri = store.uri
    run.db = store.db
    return run


def all_runs(uri):
    """Every run in every experiment of the store (empty when the store does not exist)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = client.search_experiments(view_type=ViewType.ALL)
    return client.search_runs([e.experiment_id for e in experiments], run_view_type=ViewType.ALL,
                              max_results=1000) if experiments else []


def family(uri):
    """(the one parent run, {arm name: its nested run})."""
    runs = all_runs(uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    arms = {r.data.tags["arm"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    return parents[0], arms
