"""`python -m pipelines.experiment` end to end on tiny data, read back from MLflow."""

import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, TINY, all_runs

ARMS = {"gap", "sequential", "random", "full"}


def test_experiment_tracks_parent_arms_metrics_and_artifacts(cli):
    done = cli(*TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reached rel_gap 0.0001" in done.stdout and "x vs sequential" in done.stdout

    runs = all_runs(cli.uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    arms = {r.data.tags["arm"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(arms) == ARMS
    assert {r.info.status for r in runs} == {"FINISHED"}

    # Params: the flattened resolved config; tags: commit, host, device.
    assert parent.data.params["model.name"] == "lasso"
    assert parent.data.params["data.n_samples"] == "120"
    assert parent.data.params["experiment.arms.full.memory_budget"] == "None"
    assert {"git_commit", "host", "device"} <= set(parent.data.tags)
    assert arms["sequential"].data.params["selection"] == "sequential"

    client = MlflowClient(cli.uri)
    for name, run in arms.items():
        history = client.get_metric_history(run.info.run_id, "rel_gap")
        steps = [m.step for m in history]
        assert len(history) >= 2 and steps == sorted(steps)
        assert run.data.metrics["final_rel_gap"] == pytest.approx(history[-1].value)
        if run.data.metrics["reached_target"]:
            assert run.data.metrics["time_to_target_s"] > 0
            assert run.data.metrics["epochs_to_target"] > 0
            assert "bytes_to_target" in run.data.metrics
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert f"{name}.csv" in artifacts

    gap = arms["gap"].data.metrics
    assert gap["reached_target"] == 1.0, gap
    for baseline in ("sequential", "random", "full"):
        assert parent.data.metrics[f"speedup_vs_{baseline}"] > 0
    assert 0 < parent.data.metrics["tracking_overhead"] < 1
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"rel_gap_vs_time.png", "rel_gap_vs_bytes.png", ".hydra", "traces"} <= artifacts
    assert "config.yaml" in {a.path.split("/")[-1] for a in client.list_artifacts(parent.info.run_id, ".hydra")}


def test_failure_inside_a_run_ends_it_failed_with_the_error(cli):
    # "1KB" passes the start-up check but is below one coordinate's data: the solver raises.
    done = cli(*TINY, "device.memory_budget=1B")
    assert done.returncode != 0
    runs = all_runs(cli.uri)
    assert runs and all(r.info.status == "FAILED" for r in runs)
    assert any("memory_budget" in r.data.tags.get("error", "") for r in runs)


@pytest.mark.parametrize("override,expected", [
    ("model=nope", "model/nope"),
    ("device.memory_budget=abc", "'memory_budget' parameter of DuHL"),
    ("data.n_samples=-5", "'n_samples' parameter of data 'synthetic_dense'"),
])
def test_bad_override_exits_with_one_line_and_no_run(cli, override, expected):
    done = cli(*TINY, override)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    first_line = done.stderr.strip().splitlines()[0]
    assert expected in first_line, done.stderr
    assert all_runs(cli.uri) == []  # nothing opened, so nothing RUNNING


def test_multirun_2x2_nests_four_jobs_under_one_sweep_run(cli):
    done = cli(*TINY, "model=lasso,ridge", "device.memory_budget=0.25,0.5", "experiment=single",
               multirun=True)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = all_runs(cli.uri)
    sweeps = [r for r in runs if r.data.tags.get("sweep") == "true"]
    assert len(sweeps) == 1 and sweeps[0].info.status == "FINISHED"
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == sweeps[0].info.run_id]
    assert len(jobs) == 4
    combos = {(r.data.params["model.name"], r.data.params["device.memory_budget"]) for r in jobs}
    assert combos == {("lasso", "0.25"), ("lasso", "0.5"), ("ridge", "0.25"), ("ridge", "0.5")}
    assert sorted(r.info.run_name for r in jobs) == [f"single #{i}" for i in range(4)]
    assert all("model=" in r.data.tags["overrides"] for r in jobs)
    assert len({r.info.experiment_id for r in runs}) == 1
    assert all(r.info.status == "FINISHED" for r in runs)


def test_multirun_with_a_bad_job_leaves_no_running_run(cli):
    done = cli(*TINY, "experiment=single", "data.n_samples=-5,100", multirun=True)
    assert done.returncode != 0
    statuses = {r.info.status for r in all_runs(cli.uri)}
    assert "RUNNING" not in statuses and "FAILED" in statuses


def arm_run_started(db):
    """Read-only look at the store (an MlflowClient here could race the job creating its tables)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            return connection.execute("SELECT count(*) FROM tags WHERE key = 'arm'").fetchone()[0] > 0
    except sqlite3.OperationalError:  # no file or no tables yet
        return False


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_interrupted_experiment_ends_every_run_killed(cli, tmp_path, stop):
    # An arm that would run for a minute: stop it once it is tracked.
    command = [sys.executable, "-m", "pipelines.experiment", *TINY, f"tracking.uri={cli.uri}",
               f"hydra.run.dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}",
               "experiment=single", "experiment.target_rel_gap=1e-300", "experiment.max_time=60",
               "solver.max_epochs=1e9", "tracking.flush_every_s=0.2"]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not arm_run_started(cli.db):
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no arm run appeared"
            time.sleep(0.5)
        process.send_signal(stop)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert {r.info.status for r in all_runs(cli.uri)} == {"KILLED"}
