"""pipelines.tracking against a real (temporary) sqlite MLflow store."""

import math

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from pipelines.tracking import NullTracker, RoundSampler, Tracker, config_params, flatten


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    return Tracker(uri, "tests", flush_every_s=3600)


def row(i, rel_gap, time_s):
    return {"round": i, "time_s": time_s, "epoch": i / 4, "rel_gap": rel_gap, "gap": rel_gap, "n_resident": 3}


def test_flatten_config():
    assert flatten({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2]}) == {"a.b": "1", "a.c.d": "None", "e": "[1, 2]"}


def test_rounds_are_buffered_then_sent_in_one_batch_with_steps(tracker):
    client = MlflowClient(tracker.uri)
    with tracker.run("arm") as run_id:
        for i in range(5):
            tracker.log_round(run_id, row(i, 10.0 ** -i, 0.1 * i))
        assert client.get_metric_history(run_id, "rel_gap") == []  # not sent yet
        tracker.flush(run_id)
        history = client.get_metric_history(run_id, "rel_gap")
        assert [m.step for m in history] == [0, 1, 2, 3, 4]
        assert history[-1].value == pytest.approx(1e-4)
        assert client.get_metric_history(run_id, "n_resident") == []  # not a vocabulary name
    assert client.get_run(run_id).info.status == "FINISHED"
    assert tracker.seconds > 0


def test_more_than_a_batch_of_params(tracker):
    with tracker.run("params") as run_id:
        tracker.log_params(run_id, {f"p{i}": i for i in range(250)})
    assert len(MlflowClient(tracker.uri).get_run(run_id).data.params) == 250


def test_error_ends_the_run_failed_with_the_error_tagged(tracker):
    with pytest.raises(RuntimeError):
        with tracker.run("boom") as run_id:
            raise RuntimeError("solver exploded")
    run = MlflowClient(tracker.uri).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["error"] == "RuntimeError: solver exploded"


def test_ctrl_c_ends_nested_runs_killed(tracker):
    with pytest.raises(KeyboardInterrupt):
        with tracker.run("parent") as parent_id:
            with tracker.run("child", parent_id) as child_id:
                raise KeyboardInterrupt
    client = MlflowClient(tracker.uri)
    assert client.get_run(child_id).data.tags["mlflow.parentRunId"] == parent_id
    assert {client.get_run(r).info.status for r in (parent_id, child_id)} == {"KILLED"}


def test_sampler_keeps_decades_intervals_and_the_crossing():
    sampler = RoundSampler(points_per_decade=1, min_interval_s=10.0, target_rel_gap=0.05)
    gaps = [1.0, 0.5, 0.2, 0.09, 0.06, 0.04, 0.03, 0.02, 0.003]
    kept = [sampler.keep(row(i, g, 0.1 * i)) for i, g in enumerate(gaps)]
    # first; 0.09 <= 1/10; 0.04 crosses the target; 0.003 <= 0.04/10
    assert kept == [True, False, False, True, False, True, False, False, True]
    every = RoundSampler(points_per_decade=0, min_interval_s=0, target_rel_gap=0.05)
    assert all(every.keep(row(i, g, 0)) for i, g in enumerate(gaps))
    timed = RoundSampler(points_per_decade=1, min_interval_s=1.0, target_rel_gap=1e-9)
    assert [timed.keep(row(i, 1.0, t)) for i, t in enumerate([0, 0.5, 1.0, 1.2, 2.1])] == [True, False, True, False, True]


def test_null_tracker_does_nothing():
    null = NullTracker()
    with null.run("x") as run_id:
        null.log_round(run_id, row(0, 1, 0))
        null.log_params(run_id, {"a": 1})
    assert null.seconds == 0 and not null.enabled
    # counts the experiment prints are numbers, not the catch-all no-op (a printed function)
    assert null.failed_dead_runs == 0


def test_rounds_are_stamped_at_the_runs_start_plus_solver_time_with_log10(tracker):
    client = MlflowClient(tracker.uri)
    with tracker.run("arm") as run_id:
        for i, (gap, t) in enumerate([(2.0, 0.0), (1e-3, 0.25), (1e-7, 1.5), (0.0, 2.0)]):
            tracker.log_round(run_id, row(i, gap, t))
    start = client.get_run(run_id).info.start_time
    gaps = client.get_metric_history(run_id, "rel_gap")
    assert [m.timestamp - start for m in gaps] == [0, 250, 1500, 2000]
    logs = client.get_metric_history(run_id, "log10_rel_gap")
    assert [(m.step, m.value) for m in logs] == [(0, pytest.approx(math.log10(2))), (1, pytest.approx(-3)),
                                                 (2, pytest.approx(-7))]  # a gap of 0 has no log
    assert [m.timestamp - start for m in logs] == [0, 250, 1500]


def test_a_new_store_has_no_empty_default_experiment(tracker):
    experiments = MlflowClient(tracker.uri).search_experiments(view_type=ViewType.ALL)
    assert {(e.name, e.lifecycle_stage) for e in experiments} == {("tests", "active"), ("Default", "deleted")}


def test_a_default_experiment_with_runs_is_kept(store):
    client = MlflowClient(store.uri)
    client.create_run("0")  # somebody logged to Default
    Tracker(store.uri, "mine")
    assert client.get_experiment("0").lifecycle_stage == "active"


def test_config_params_drop_what_the_experiment_does_not_use():
    config = {"experiment": {"name": "x", "target_rel_gap": 1e-6, "distbelief": {"lr": 0.1}}, "solver": {"name": "duhl"}}
    assert config_params(config, ["experiment.distbelief"]) == {
        "experiment.name": "x", "experiment.target_rel_gap": "1e-06", "solver.name": "duhl"}
    assert config_params(config, ["solver", "experiment.target_rel_gap"]) == {
        "experiment.name": "x", "experiment.distbelief.lr": "0.1"}


def test_a_sigterm_inside_a_store_call_ends_the_runs_killed_after_the_call(tracker, monkeypatch):
    """stop_on_sigterm: a SIGTERM that arrives during a store call (here: inside the child's
    log_batch) is raised when that call ends, not inside it (a cut sqlite transaction can keep the
    runs' KILLED from being written), once: the parent and child then end KILLED, exit code 143."""
    import os
    import signal
    import threading

    import pipelines.tracking as tracking

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    previous = signal.getsignal(signal.SIGTERM)
    real_log_batch = tracker.client.log_batch
    arrived_inside = []

    def log_batch_with_a_sigterm(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the call
        arrived_inside.append(tracking.TERMINATED.is_set())
        return real_log_batch(*args, **kwargs)

    try:
        tracking.stop_on_sigterm()
        with pytest.raises(SystemExit) as stopped:
            with tracker.run("parent") as parent_id:
                with tracker.run("child", parent_id) as child_id:
                    monkeypatch.setattr(tracker.client, "log_batch", log_batch_with_a_sigterm)
                    tracker.set_tags(child_id, {"k": "v"})
                    monkeypatch.setattr(tracker.client, "log_batch", real_log_batch)
                    raise AssertionError("the SIGTERM was not raised when the call ended")
    finally:
        signal.signal(signal.SIGTERM, previous)
        tracking.TERMINATED.clear()
        tracking._IN_CALL.update(depth=0, pending=0)
    assert stopped.value.code == 143 and arrived_inside == [True]
    client = MlflowClient(tracker.uri)
    assert client.get_run(child_id).data.tags["k"] == "v"  # the call the signal came in finished
    assert {client.get_run(r).info.status for r in (parent_id, child_id)} == {"KILLED"}


def test_a_ctrl_c_inside_a_store_call_ends_the_runs_killed_after_the_call(tracker, monkeypatch):
    """The same for Ctrl-C (SIGINT): its KeyboardInterrupt is raised when the store call it came in
    ends, not inside it (CI once left an arm RUNNING after a Ctrl-C, with the right exit code)."""
    import os
    import signal
    import threading

    import pipelines.tracking as tracking

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    real_log_batch = tracker.client.log_batch
    finished_inside = []

    def log_batch_with_a_ctrl_c(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside the call
        done = real_log_batch(*args, **kwargs)
        finished_inside.append(True)
        return done

    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts from a terminal
        tracking.stop_on_sigterm()
        with pytest.raises(KeyboardInterrupt):
            with tracker.run("parent") as parent_id:
                with tracker.run("child", parent_id) as child_id:
                    monkeypatch.setattr(tracker.client, "log_batch", log_batch_with_a_ctrl_c)
                    tracker.set_tags(child_id, {"k": "v"})
                    monkeypatch.setattr(tracker.client, "log_batch", real_log_batch)
                    raise AssertionError("the Ctrl-C was not raised when the call ended")
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        tracking._IN_CALL.update(depth=0, pending=0)
    assert finished_inside == [True]
    client = MlflowClient(tracker.uri)
    assert client.get_run(child_id).data.tags["k"] == "v"  # the call the signal came in finished
    assert {client.get_run(r).info.status for r in (parent_id, child_id)} == {"KILLED"}

