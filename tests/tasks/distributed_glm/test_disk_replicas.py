"""CoCoA+ parts on the workers' disks (cluster.data_access=disk) on a Dask cluster of 2 worker processes that
this module starts itself, each with its own local directory (its own "disk": the shards it holds are its
own) and no nanny (a killed worker stays dead, so its part must move to the other worker's disk).

Oracles: the same run in this process (cluster=none, the same parts: identical iterates and reads),
scikit-learn's optimum, the dataset's own rows (every shard on its worker's disk holds its range)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from tasks.arms import run_arm
from tasks.data import SyntheticRowsData, load_dataset
from tasks.distributed_glm.arms import Placement
from tasks.data.shards import SHARDS, list_shards
from tasks.parts import DiskShards
from tasks.problems import labels_for

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
LOGISTIC = {"name": "logistic", "C": 0.01, "fit_intercept": False}
DATA = SyntheticRowsData(n_samples=1200, n_features=64, n_informative=8, correlation=0.0, noise=0.5, block_rows=256)
SETTINGS = {"name": "cocoa", "n_parts": 2, "local_epochs": 1, "tol": 1e-7, "max_epochs": 2000, "random_state": 0,
            "host_budget": 0.3}


class Workers:
    """A scheduler in this process and worker processes started by the dask CLI, worker i with its own
    --local-directory (its shards in <dir>/duhl-lab-shards: tasks.data.shards.shard_root)."""

    def __init__(self, root: Path, n: int):
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=":0")
        self.client = Client(self.cluster)
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.dirs = [root / f"host{i}" for i in range(n)]
        self.procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", self.cluster.scheduler_address,
                                        "--no-nanny", "--nthreads", "1", "--local-directory", str(d),
                                        "--name", f"host{i}", "--no-dashboard"], cwd=ROOT, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for i, d in enumerate(self.dirs)]
        self.client.wait_for_workers(n, timeout=120)

    def shards_dir(self, i):
        return self.dirs[i] / SHARDS

    def by_address(self):
        """{worker address: index} (the index in the --name)."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return {addr: int(w["name"][len("host"):]) for addr, w in info.items()}

    def kill(self, address):
        i = self.by_address()[address]
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()
        return i

    def close(self):
        for p in self.procs:  # the workers first: they would wait for the scheduler to come back
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        self.client.close()
        self.cluster.close()


@pytest.fixture
def workers(tmp_path):
    w = Workers(tmp_path / "hosts", 2)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load_dataset(DATA, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def optimum(ds):
    X, s = np.asarray(ds.X), labels_for("logistic", ds.y)
    w = LogisticRegression(C=0.01, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, s).coef_.ravel()
    return 0.5 * w @ w + 0.01 * np.logaddexp(0, -s * (X @ w)).sum()


@pytest.fixture(scope="module")
def in_process(ds):
    """The same parts in this process (cluster=none): shards in the cache's shards/ folder."""
    return run_arm(None, SETTINGS, placement=Placement(None, ds.path, ds.X, ds.y, LOGISTIC))


def assert_shards_hold_their_ranges(res, ds, dirs):
    """Every part's shard is on its home, and what its file holds is the dataset's rows of the part."""
    X = np.asarray(ds.X)
    assert [r["part"] for r in res.shards] == [0, 1]
    ranges = [(0, 600), (600, 1200)]
    for row, (lo, hi) in zip(res.shards, ranges):
        assert row["on_home"] and row["home"] in row["copies"], row
        assert any(Path(row["path"]).is_relative_to(d) for d in dirs), (row["path"], dirs)
        shard = np.load(Path(row["path"]) / "X.npy", mmap_mode="r")
        assert np.array_equal(shard[:, :DATA.n_features], X[lo:hi])


def test_parts_on_the_workers_disks_equal_the_same_parts_in_process(workers, ds, optimum, in_process):
    parts = DiskShards(workers.client, ds.path, "stream", None, DATA, timeout_s=60)
    res = run_arm(None, SETTINGS, placement=Placement(workers.client, ds.path, ds.X, ds.y, LOGISTIC, parts=parts))
    assert res.converged and res.trace.certified.iloc[-1] == 1 and res.rel_gap <= 1e-7
    assert abs(res.primal - optimum) <= 1e-6 * optimum
    # deterministic: the same iterates, the same gap each round, the same bytes read by each part
    np.testing.assert_array_equal(res.a, in_process.a)
    assert res.n_rounds == in_process.n_rounds
    np.testing.assert_array_equal(res.trace.gap, in_process.trace.gap)
    for k in range(2):
        np.testing.assert_array_equal(res.trace[f"part{k}_bytes_disk"], in_process.trace[f"part{k}_bytes_disk"])
    # each shard streamed once, to its own worker's disk, and nowhere else
    assert parts.stats["parts"] == 2 and parts.stats["again"] == 0
    assert_shards_hold_their_ranges(res, ds, [workers.shards_dir(i) for i in range(2)])
    homes = {workers.by_address()[r["home"]] for r in res.shards}
    assert homes == {0, 1} and all(len(r["copies"]) == 1 for r in res.shards)
    # a second arm reuses the shards on the disks: nothing streamed
    again = run_arm(None, SETTINGS, placement=Placement(workers.client, ds.path, ds.X, ds.y, LOGISTIC, parts=parts))
    assert parts.stats["parts"] == 2
    np.testing.assert_array_equal(again.a, res.a)


@pytest.mark.parametrize("source", ["stream", "maker"])
def test_a_worker_lost_mid_run_its_shard_made_again_on_the_others_disk(workers, ds, optimum, source):
    """stream: the driver sends the lost part's shard again, to the survivor; maker: the survivor makes it
    from the data's config (synthetic_rows' block seeds)."""
    parts = DiskShards(workers.client, ds.path, source, None, DATA, timeout_s=30)
    killed = []

    def kill_one(row):
        if row["round"] == 3 and not killed:
            victim = sorted(workers.client.scheduler_info()["workers"])[0]
            killed.append(workers.kill(victim))

    started = time.perf_counter()
    res = run_arm(None, SETTINGS, callback=kill_one,
                  placement=Placement(workers.client, ds.path, ds.X, ds.y, LOGISTIC, timeout_s=30, parts=parts))
    assert killed and res.events and res.events[0]["round"] >= 3, res.events
    assert res.converged and res.trace.certified.iloc[-1] == 1 and res.rel_gap <= 1e-7
    assert abs(res.primal - optimum) <= 1e-6 * optimum
    survivor = 1 - killed[0]
    # the lost part's shard made again on the survivor's disk, which now holds both
    if source == "stream":
        assert parts.stats["parts"] == 3 and parts.stats["again"] == 1
    else:
        assert parts.stats["parts"] == 0 and all(r["made_by"].startswith("maker synthetic_rows")
                                                 for r in workers.client.run(list_shards, None, None).popitem()[1])
    assert_shards_hold_their_ranges(res, ds, [workers.shards_dir(survivor)])
    assert {workers.by_address()[r["home"]] for r in res.shards} == {survivor}
    assert sorted(p.name for p in workers.shards_dir(survivor).rglob("rows-*") if p.is_dir()) == \
        ["rows-0-600", "rows-600-1200"]
    assert time.perf_counter() - started < 240
