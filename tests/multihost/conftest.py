"""Fixtures of the multi-host tests: clusters of "hosts" (network + mount namespaces, see
netns_cluster.py) started with Dask's own CLIs, stopped and checked after each test; the
experiment run in this process (the driver, in the root namespace) against them."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

import netns_cluster as nc

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("pipelines_test_helpers", HERE.parent / "pipelines" / "conftest.py")
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)  # compose_config, all_runs, family (not its fixtures)

SKIP = nc.skip_reason()


def _dask_pids() -> set:
    found = subprocess.run(["pgrep", "-f", "dask (scheduler|worker)"], capture_output=True, text=True)
    return {int(p) for p in found.stdout.split()}


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_behind():
    """Every namespace, bridge and dask process a test started is gone at the end."""
    if SKIP:
        yield
        return
    namespaces, pids = set(nc.list_namespaces()), _dask_pids()
    yield
    assert set(nc.list_namespaces()) <= namespaces, nc.list_namespaces()
    assert _dask_pids() <= pids


@pytest.fixture
def netns(tmp_path_factory):
    """netns(**kw): a started NetnsCluster (tcp or tls), torn down and checked after the test."""
    if SKIP:
        pytest.skip(f"multi-host tests: {SKIP}")
    started = []

    def make(**kw) -> nc.NetnsCluster:
        # the hosts run the checkout under test (the venv's editable install may point at another one)
        kw["env"] = {"PYTHONPATH": str(HERE.parents[1]), **kw.get("env", {})}
        c = nc.NetnsCluster(tmp_path_factory.mktemp("cluster"), **kw)
        started.append(c)
        return c.__enter__()

    yield make
    for c in started:
        c.close()
        assert not {n.ns for n in c.nodes.values()} & set(nc.list_namespaces())
        assert not Path(f"/sys/class/net/{c.bridge}").exists()
        for node in c.nodes.values():
            shutil.rmtree(node.dir, ignore_errors=True)


@pytest.fixture
def experiment(tmp_path, tmp_path_factory):
    """experiment(*overrides) runs pipelines.experiment.run_experiment in this process (the
    driver) on a fresh MLflow store and a data cache no node can see (under /tmp)."""
    from pipelines.experiment import run_experiment

    cache = tmp_path_factory.mktemp("driver-cache")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def run(*overrides, out="out"):
        cfg = helpers.compose_config(f"tracking.uri={uri}", f"cache_dir={cache}", "progress=false", *overrides)
        return run_experiment(cfg, tmp_path / out, "", list(overrides))

    run.uri, run.tmp, run.cache = uri, tmp_path, cache
    return run
