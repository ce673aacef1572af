"""`python -m pipelines.experiment` as a process: what only a process shows (the
resolved config Hydra writes, exit codes and one-line errors, signals, multirun
sweeps). Everything else is tested in-process (test_experiment.py)."""

import json
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, TINY, all_runs, family


def test_smoke_single_run_writes_the_config_and_tracks_it(cli, tmp_path):
    done = cli(*TINY, "experiment=single")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reached rel_gap 0.0001" in done.stdout
    assert (tmp_path / "out" / ".hydra" / "config.yaml").exists()
    parent, arms = family(cli.uri)
    assert parent.info.status == "FINISHED" and set(arms) == {"duhl-gap"}

    names = {a.path.split("/")[-1] for a in MlflowClient(cli.uri).list_artifacts(parent.info.run_id, ".hydra")}
    assert "config.yaml" in names


def test_a_second_run_compiles_nothing_and_says_so(cli):
    """Numba's cache keeps what the first run compiled: the same experiment again loads every kernel,
    and its warm-up line and `warmup_compiled` say so."""
    cli(*TINY, "experiment=single")  # compiles, or loads what an earlier test compiled
    done = cli(*TINY, "experiment=single")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("warm-up:")]
    assert len(lines) == 1 and "loaded from Numba's cache in" in lines[0], done.stdout
    runs = [r for r in all_runs(cli.uri) if "warmup_compiled" in r.data.metrics]
    assert len(runs) == 2 and min(r.data.metrics["warmup_compiled"] for r in runs) == 0


def test_unknown_option_exits_with_one_line_and_no_run(cli):
    done = cli(*TINY, "model=nope")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "model/nope" in done.stderr.strip().splitlines()[0], done.stderr
    assert all_runs(cli.uri) == []


def test_cuda_without_gpu_exits_2_with_one_line(cli):
    from solvers.duhl.block.devices import NoCudaDevice, check_device

    try:
        check_device("cuda")
        pytest.skip("a GPU is present")
    except NoCudaDevice:
        pass
    done = cli(*TINY, "device=cuda", timeout=120)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and "no CUDA device found: use device=cpu or device=cuda_sim" in lines[0]
    assert all_runs(cli.uri) == []


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
    assert all("model=" in r.data.tags["overrides"] for r in jobs)
    assert len({r.info.experiment_id for r in runs}) == 1
    assert all(r.info.status == "FINISHED" for r in runs)
    # named by what they change; their arms by their job, so legends tell them apart
    sweep = sweeps[0]
    assert sweep.info.run_name == "sweep single: model=lasso,ridge device.memory_budget=0.25,0.5"
    names = {r.info.run_name for r in jobs}
    assert names == {f"model={m} memory_budget={b}" for m in ("lasso", "ridge") for b in ("0.25", "0.5")}
    arms = {r.info.run_name for r in runs if r.data.tags.get("sweep_run_id") == sweep.info.run_id}
    assert arms == {f"duhl-gap ({name})" for name in names}
    # summed up on the sweep run: a table per job, a plot, the main metrics (medians over the jobs)
    client = MlflowClient(cli.uri)
    note = sweep.data.tags["mlflow.note.content"]
    assert note.startswith("Sweep of 4 jobs over model, device.memory_budget")
    times = []
    for job in jobs:
        number, values = job.data.tags["sweep_job"], json.loads(job.data.tags["sweep_values"])
        main = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id)
        times.append(main.data.metrics["time_to_target_s"])
        cell = f"{times[-1]:.2f}"
        assert f"| {number} | {values['model']} | {values['device.memory_budget']} | finished | {cell} |" in note
    assert sorted(int(job.data.tags["sweep_job"]) for job in jobs) == [0, 1, 2, 3]
    assert sweep.data.metrics["time_to_target_s"] == pytest.approx(statistics.median(times))
    assert {a.path for a in client.list_artifacts(sweep.info.run_id)} >= {"sweep_summary.md", "sweep_summary.png"}
    assert f"the sweep: http://127.0.0.1:5000/#/experiments/{sweep.info.experiment_id}/runs/{sweep.info.run_id}" in done.stdout


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


def from_a_terminal(command):
    """``command`` (a Python one) started as a shell in a terminal starts it: SIGINT and SIGTERM at their
    defaults. A child inherits an ignored signal, and the test runner's process may ignore SIGINT (a full
    suite run saw the experiment start with SIGINT ignored: SigIgn set, no handler)."""
    reset = ("import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; "
             "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    assert command[0] == sys.executable
    return [sys.executable, "-c", reset, *command[1:]]


def signal_disposition(pid, sig):
    """Whether process ``pid`` ignores, blocks or catches ``sig`` (its /proc status masks)."""
    masks = dict(line.split(":\t") for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith(("SigIgn", "SigBlk", "SigCgt")))
    return ", ".join(f"{k} {bool(int(v, 16) >> (sig - 1) & 1)}" for k, v in masks.items())


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_interrupted_experiment_ends_every_run_killed(cli, tmp_path, stop):
    # An arm that would run for a minute: stop it once it is tracked. 600 x 400 in float32, not TINY's 120 x 40
    # (nor float64: the Lasso's certified gap reaches exactly 0, <= any target, within 10 epochs; float32's
    # rounding keeps it above 1e-17)
    sized = [o for o in TINY if not o.startswith(("data.n_samples=", "data.n_features="))]
    command = [sys.executable, "-m", "pipelines.experiment", *sized, "data.n_samples=600", "data.n_features=400",
               "data.dtype=float32",
               f"tracking.uri={cli.uri}",
               f"hydra.run.dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}",
               "experiment=single", "experiment.target_rel_gap=1e-300", "experiment.max_time=60",
               "solver.max_epochs=1e9", "tracking.flush_every_s=0.2"]
    ours = signal.getsignal(stop)  # this test process's own (a child inherits an ignored signal)
    process = subprocess.Popen(from_a_terminal(command), cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not arm_run_started(cli.db):
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no arm run appeared"
            time.sleep(0.5)
        # the child's disposition as the signal is sent: started as a terminal starts it, an ignored signal
        # here is the experiment's own doing
        disposition = f"the experiment's {signal_disposition(process.pid, stop)}; this test process's handler {ours}"
        process.send_signal(stop)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the experiment went on after {stop.name} ({disposition}); its stderr ends: "
                    f"{process.stderr.read().decode()[-2000:]}")
    finally:
        if process.poll() is None:
            process.kill()
    # SIGTERM: 128 + 15, the signal convention; Ctrl-C: Python's own KeyboardInterrupt exit
    assert process.returncode == (143 if stop == signal.SIGTERM else 130) or (
        stop == signal.SIGINT and process.returncode == -signal.SIGINT), disposition
    assert {r.info.status for r in all_runs(cli.uri)} == {"KILLED"}


# SIGTERM only: Ctrl-C reaches the same wait (test_interrupted_experiment_ends_every_run_killed
# covers both signals); each case costs 17 s of make test
@pytest.mark.parametrize("stop", [signal.SIGTERM], ids=["kill"])
def test_a_signal_during_a_peers_long_fit_ends_the_run_killed_at_once(cli, tmp_path, stop):
    """scikit-learn's coordinate descent is one C call (minutes at tol 1e-4 here: a tiny alpha)
    that returns to Python only when done; the fit runs in a child process (tasks/stoppable.py),
    so the signal ends the experiment within seconds."""
    command = [sys.executable, "-m", "pipelines.experiment", *TINY, f"tracking.uri={cli.uri}",
               f"hydra.run.dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}",
               "experiment=single", "solver=peer_sklearn", "data.n_samples=1000", "data.n_features=1000",
               "model.alpha=1e-4", "experiment.target_rel_gap=1e-300", "experiment.max_time=600",
               "tracking.flush_every_s=0.2"]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not arm_run_started(cli.db):
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no arm run appeared"
            time.sleep(0.5)
        while not Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split():
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no fit process appeared"
            time.sleep(0.2)
        time.sleep(8.0)  # past the loose tolerances (0.1 s, ~1 s): inside the fit at 1e-4 (minutes)
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        process.send_signal(stop)
        sent = time.monotonic()
        process.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    # the exit (runs closed KILLED, the interpreter's shutdown) takes seconds on a loaded machine;
    # the fit in flight would have taken minutes (before, the signal waited for it: 131 s here)
    assert took < 30, f"the run took {took:.1f} s to end after the signal"
    assert process.returncode == (143 if stop == signal.SIGTERM else 130) or (
        stop == signal.SIGINT and process.returncode == -signal.SIGINT)
    runs = all_runs(cli.uri)
    assert {r.info.status for r in runs} == {"KILLED"} and len(runs) == 2  # the experiment and its arm
