"""The project as users deploy it past one machine: ``cluster=remote`` against a scheduler
and two workers started with ``dask scheduler`` / ``dask worker`` on separate "hosts"
(network, mount and UTS namespaces on a private bridge: netns_cluster.py), which see
none of the driver's files. The driver is this process.

- the cocoa, diana and single-DuHL presets at small sizes give the traces of the
  in-process runs (cluster=none), round by round; distbelief reaches its targets;
  the data is shipped (auto: the workers do not see the cache) and the runs say so;
- a worker killed mid-run (its whole process group): the run completes, its shards
  shipped again; the scheduler killed mid-run: the runs end FAILED with one line;
- the same over TLS (certificates made here with ``cryptography``); a plain tcp://
  client is refused with one line; model parallelism's two partitions on the two hosts,
  linked over TLS, train as one partition does.

Run as root: ``make test-multihost`` (skipped with the reason otherwise)."""

import os
import threading
import time

import pandas as pd
import pytest
from distributed import Client

from conftest import helpers
from netns_cluster import skip_reason

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(900),
              pytest.mark.skipif(skip_reason() is not None, reason=f"multi-host tests: {skip_reason()}")]

COCOA = ["experiment=cocoa", "data.n_samples=200", "data.n_features=60", "data.correlation=0.1",
         "experiment.target_rel_gap=1e-6", "data.n_groups=1",
         *[f"~experiment.arms.{a}" for a in ("k2_safe", "k4_safe", "k4_compressed")], "experiment.main_arm=k2", "experiment.baselines=[k1]"]
DIANA = ["experiment=diana", "data.n_samples=400", "data.n_features=40", "experiment.target_suboptimality=1e-5",
         *[f"~experiment.arms.{a}" for a in ("diana_dither", "no_shift_dither", "diana_dither_s1", "diana_rand_k",
                                             "ef21_top_k")],
         "experiment.main_arm=diana_natural", "experiment.baselines=[gd]"]
DUHL = ["experiment=single", "data.n_samples=300", "data.n_features=100", "experiment.target_rel_gap=1e-6"]
DISTBELIEF = ["experiment=distbelief", "model=logistic", "data=synthetic_dense", "data.n_samples=2000",
              "data.n_features=10", "data.n_informative=4", "data.noise=0.5", "experiment.max_time=30",
              "experiment.distbelief.target_loss=0.40", "experiment.distbelief.target_accuracy=0.80",
              "experiment.distbelief.n_eval=400", "experiment.distbelief.lr_grid=[]",
              *[f"~experiment.arms.{a}" for a in ("adagrad_1", "adagrad_4", "adagrad_killed")]]
MODEL_PARALLEL = ["experiment=distbelief_model_parallel", "data.n_samples=400", "data.n_features=8",
                  "data.n_informative=4", "model.hidden=[6,6]", "experiment.distbelief.n_eval=100",
                  *[f"~experiment.arms.{a}" for a in ("large_k4", "small_k1", "small_k2", "small_k4", "large_r2_k2")],
                  *[f"experiment.arms.{a}.{k}={v}" for a in ("large_k1", "large_k2")
                    for k, v in (("steps_per_round", 2), ("max_steps", 6))]]
# what an arm computes, round by round (not how long it took)
MATH = ["round", "epoch", "primal", "dual", "gap", "rel_gap", "suboptimality", "bits_sent", "bytes_h2d"]


def remote(c, **tls):
    return ["cluster=remote", f"cluster.address={c.scheduler_address}",
            *[f"cluster.{k}={v}" for k, v in tls.items()]]


def traces(folder):
    return {p.stem: pd.read_csv(p) for p in sorted((folder / "traces").glob("*.csv"))}


def runs_of(uri, experiment_name):
    """(parent, {arm: run}) of one experiment in the store."""
    runs = [r for r in helpers.all_runs(uri)
            if r.info.experiment_id == _experiment_id(uri, experiment_name)]
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parent) == 1, [r.info.run_name for r in runs]
    return parent[0], {r.data.tags["arm"]: r for r in runs if r is not parent[0]}


def _experiment_id(uri, name):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri).get_experiment_by_name(name).experiment_id


def test_presets_on_hosts_without_the_driver_files_take_the_in_process_steps(netns, experiment):
    c = netns()
    with Client(c.scheduler_address, timeout=30) as client:
        seen = client.run(lambda: (os.uname().nodename, os.path.exists(str(experiment.cache))))
        assert sorted(h for h, _ in seen.values()) == ["duhl-w1", "duhl-w2"]
        assert not any(exists for _, exists in seen.values())  # the driver's cache is not there
        subnet = c.driver_ip.rsplit(".", 1)[0] + "."
        assert all(a.startswith(f"tcp://{subnet}") for a in [c.scheduler_address, *seen])
    for name, preset in (("cocoa", COCOA), ("diana", DIANA), ("single", DUHL)):
        experiment(*preset, "cluster=none", "tracking=none", out=f"{name}-none")
        experiment(*preset, *remote(c), out=f"{name}-remote")
        here, there = traces(experiment.tmp / f"{name}-none"), traces(experiment.tmp / f"{name}-remote")
        assert set(here) == set(there) and here
        for arm, trace in there.items():
            cols = [k for k in MATH if k in trace]
            if name == "diana":  # the same iterates; a shipped shard's loss may differ in BLAS's last bit
                pd.testing.assert_frame_equal(trace[cols], here[arm][cols], check_exact=False, rtol=1e-12)
            else:
                pd.testing.assert_frame_equal(trace[cols], here[arm][cols], check_exact=True)
        parent, arms = runs_of(experiment.uri, name)
        assert parent.info.status == "FINISHED" and parent.data.tags["data_access"] == "scatter"
        for arm, run in arms.items():
            assert run.info.status == "FINISHED" and run.data.metrics["reached_target"] == 1, arm
            assert run.data.tags["data_access"] == "scatter"
        assert any(r.data.tags["data_shipped"].startswith(("1 parts", "2 parts", "4 parts")) for r in arms.values())

    experiment(*DISTBELIEF, *remote(c), out="distbelief")
    parent, arms = runs_of(experiment.uri, "distbelief")
    assert parent.info.status == "FINISHED" and parent.data.tags["data_access"] == "scatter"
    # converged: both targets reached (train loss <= 0.40, test accuracy >= 0.80)
    assert {a: r.data.tags["status"] for a, r in arms.items()} == dict.fromkeys(arms, "converged")
    assert all(r.data.metrics["final_train_loss"] <= 0.40 + 0.05 for r in arms.values())


def test_a_worker_killed_mid_run_the_run_completes_its_shards_shipped_again(netns, tmp_path):
    from tasks.arms import build_problem, run_arm
    from tasks.data import SyntheticDenseData, load_dataset
    from tasks.distributed_glm.arms import Placement
    from tasks.parts import DataParts, choose_access

    c = netns()
    ds = load_dataset(SyntheticDenseData(n_samples=200, n_features=60, n_informative=6, correlation=0.1), tmp_path)
    model = {"name": "lasso", "alpha": 0.1, "fit_intercept": True}
    settings = {"name": "cocoa", "n_parts": 2, "local_epochs": 5, "tol": 1e-6, "max_epochs": 5000, "random_state": 0}
    killed = []

    def kill_w1(row):
        if row["round"] == 3 and not killed:
            killed.append(c.kill_worker("w1"))  # SIGKILL to the nanny and the worker: it does not come back

    with Client(c.scheduler_address, timeout=30) as client:
        access = choose_access(client, ds.path, "auto")
        parts = DataParts(client, ds.path, access)
        result = run_arm(build_problem(model, ds.X, ds.y), settings, callback=kill_w1,
                         placement=Placement(client, ds.path, ds.X, ds.y, model, timeout_s=30, parts=parts))
        alive = sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
    local = run_arm(build_problem(model, ds.X, ds.y), settings)
    assert access == "scatter" and killed and alive == ["w2"]
    assert result.converged and result.events and result.events[0]["round"] >= 3
    assert parts.stats["again"] >= 1  # a rebuilt replica got its shard from the driver again
    assert abs(result.primal - local.primal) <= 1e-6 * local.primal  # the same optimum


def test_shards_on_the_hosts_disks_a_worker_killed_the_run_certified_every_shard_accounted_for(netns, tmp_path):
    """cluster.data_access=disk across hosts: each worker streams its part's shard to its own disk (its
    private /tmp), trains DuHL from it under a host_budget; w1 killed during a round: its part's shard is
    streamed again to w2's disk, the run ends with a certified gap at the in-process optimum, and both
    shards are on w2, where the accounting says."""
    from tasks.arms import run_arm
    from tasks.data import SyntheticRowsData, load_dataset
    from tasks.distributed_glm.arms import Placement
    from tasks.parts import DiskShards

    c = netns()
    data = SyntheticRowsData(n_samples=1200, n_features=64, n_informative=8, correlation=0.0, noise=0.5,
                             block_rows=256)
    ds = load_dataset(data, tmp_path)
    model = {"name": "logistic", "C": 0.01, "fit_intercept": False}
    settings = {"name": "cocoa", "n_parts": 2, "local_epochs": 1, "tol": 1e-7, "max_epochs": 2000, "random_state": 0,
                "host_budget": 0.3}
    killed = []

    def kill_w1(row):
        if row["round"] == 3 and not killed:
            killed.append(c.kill_worker("w1"))

    with Client(c.scheduler_address, timeout=30) as client:
        parts = DiskShards(client, ds.path, "stream", None, data, timeout_s=30)
        result = run_arm(None, settings, callback=kill_w1,
                         placement=Placement(client, ds.path, ds.X, ds.y, model, timeout_s=30, parts=parts))
        info = client.scheduler_info(n_workers=-1)["workers"]
        w2 = next(addr for addr, w in info.items() if w["name"] == "w2")
    local = run_arm(None, settings, placement=Placement(None, ds.path, ds.X, ds.y, model))
    assert killed and result.events and result.events[0]["round"] >= 3
    assert result.converged and result.trace["certified"].iloc[-1] == 1 and result.rel_gap <= 1e-7
    assert abs(result.primal - local.primal) <= 1e-6 * local.primal
    assert parts.stats["parts"] == 3 and parts.stats["again"] == 1  # two shards, one again after the kill
    assert [r["part"] for r in result.shards] == [0, 1]
    assert all(r["on_home"] and r["home"] == w2 and r["copies"] == [w2] and r["host"] == "duhl-w2"
               for r in result.shards), result.shards
    assert [r["xxh3_128"] for r in result.shards] == [r["xxh3_128"] for r in local.shards]


@pytest.mark.parametrize("preset", ["cocoa", "distbelief"])
def test_the_scheduler_killed_mid_run_ends_the_runs_failed_with_one_line(netns, experiment, preset):
    from mlflow.tracking import MlflowClient

    c = netns()
    overrides = {"cocoa": [*COCOA, "experiment.target_rel_gap=1e-14", "experiment.max_time=60"],
                 "distbelief": [*DISTBELIEF, "experiment.distbelief.stop_at_target=false"]}[preset]
    kill = {}

    def kill_when_an_arm_runs():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not kill:
            try:
                runs = helpers.all_runs(experiment.uri)
            except Exception:  # the store is being created
                runs = []
            if any("arm" in r.data.tags and r.info.status == "RUNNING" for r in runs):
                time.sleep(1.0)
                kill["t"] = c.kill_scheduler()
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_an_arm_runs, daemon=True)
    killer.start()
    with pytest.raises(SystemExit) as error:
        experiment(*overrides, *remote(c), "cluster.timeout_s=20")
    ended = time.monotonic()
    killer.join(timeout=10)
    message = str(error.value)
    assert kill and message.startswith(f"Error: ClusterLost: lost the dask scheduler at {c.scheduler_address}")
    assert "\n" not in message and ended - kill["t"] < 60, (message, ended - kill["t"])
    runs = helpers.all_runs(experiment.uri)
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(failed) == 2  # the parent and the arm that was running
    for run in failed:
        assert run.data.tags["error"].startswith("ClusterLost: lost the dask scheduler")
        assert "\n" not in run.data.tags["error"]
    assert MlflowClient(experiment.uri)  # the store is readable after the failure


def test_tls_cluster_runs_the_experiment_and_refuses_plain_tcp(netns, experiment):
    c = netns(protocol="tls")
    files = c.tls_files["driver"]
    tls = {"tls_ca_file": files["ca"], "tls_client_cert": files["cert"], "tls_client_key": files["key"]}
    assert c.scheduler_address.startswith("tls://")
    experiment(*DUHL, "cluster=none", "tracking=none", out="none")
    experiment(*DUHL, *remote(c, **tls), out="tls")
    here, there = traces(experiment.tmp / "none"), traces(experiment.tmp / "tls")
    for arm, trace in there.items():
        cols = [k for k in MATH if k in trace]
        pd.testing.assert_frame_equal(trace[cols], here[arm][cols], check_exact=True)
    parent, arms = runs_of(experiment.uri, "single")
    assert parent.info.status == "FINISHED" and parent.data.tags["data_access"] == "scatter"

    # model parallelism: a replica's two partitions on the two hosts, their links over TLS, train as one
    # partition on one host does (the same minibatches: partitioned equals whole to rounding)
    experiment(*MODEL_PARALLEL, *remote(c, **tls), out="model-parallel")
    parent, arms = runs_of(experiment.uri, "distbelief_model_parallel")
    assert parent.info.status == "FINISHED" and {r.info.status for r in arms.values()} == {"FINISHED"}
    k1, k2 = (arms[name].data.metrics for name in ("large_k1", "large_k2"))
    assert k2["bytes_per_step"] == 8 * 64 * (2 * 6 + 2) and k1["bytes_per_step"] == 0  # layer 1 both ways, the logit
    assert k2["final_train_loss"] == pytest.approx(k1["final_train_loss"], rel=1e-9)

    plain = "tcp://" + c.scheduler_address.split("://")[1]
    with pytest.raises(SystemExit) as error:
        experiment(*DUHL, "cluster=remote", f"cluster.address={plain}", "cluster.timeout_s=5", out="plain")
    assert str(error.value).startswith(f"Error: ConnectionError: Could not reach the dask scheduler at '{plain}'")
    assert "\n" not in str(error.value)
    latest = max(helpers.all_runs(experiment.uri), key=lambda r: r.info.start_time)
    assert latest.info.status == "FAILED" and latest.data.tags["error"].startswith("ConnectionError: Could not")
