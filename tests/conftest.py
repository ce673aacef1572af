"""Project-wide test set-up: tests marked `gpu` need a CUDA device and are skipped without one;
temporary folders on a disk (the disk tier's tests read past the page cache)."""

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Where /tmp is RAM (tmpfs), put pytest's temporary folders in the project's .pytest-tmp:
    the disk tier's tests need a file system with O_DIRECT and real reads."""
    if config.option.basetemp or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from solvers.storage.files import RAM_FILE_SYSTEMS, fs_type

    if fs_type(tempfile.gettempdir()) in RAM_FILE_SYSTEMS and fs_type(ROOT) not in RAM_FILE_SYSTEMS:
        config.option.basetemp = str(ROOT / ".pytest-tmp")


def _gpu_reason():
    """Why GPU tests cannot run here (None when they can)."""
    try:
        from solvers.duhl.block.devices import NoCudaDevice, check_device

        check_device("cuda")
    except NoCudaDevice as err:
        return str(err)
    from numba import config

    if config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM=1: the simulator, not a GPU (run `make test-gpu`)"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]  # a marker, not a test id
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))


def _local_cluster():
    from tasks.cluster import connect

    return connect({"name": "local", "n_workers": 2, "threads_per_worker": 1, "memory_limit": 0,
                    "timeout_s": 120})


@pytest.fixture(scope="session")
def dask_client():
    """One LocalCluster of 2 worker processes (1 thread each) for the session, through the
    project's own start-up (tasks.cluster.connect). A test may kill a worker (its nanny
    restarts it: the fixture brings both back before the next test); a module that takes
    workers away for good uses ``disposable_dask_client``."""
    with _local_cluster() as client:
        yield client


@pytest.fixture(autouse=True)
def _both_workers_back(request):
    """After a test on the shared cluster, both workers run again: a killed worker's nanny
    restarts it, and one that is not back within 60 s (a restart that never ends, as in
    dask/distributed#7312) is replaced, so that one lost worker fails no later test."""
    yield
    if "dask_client" in request.fixturenames:
        from tasks.cluster import restore_workers

        restore_workers(request.getfixturevalue("dask_client"), 2, timeout_s=60)


@pytest.fixture(scope="module")
def disposable_dask_client():
    """The same LocalCluster as ``dask_client``, for one module whose tests retire workers."""
    with _local_cluster() as client:
        yield client
