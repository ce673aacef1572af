"""pipelines.experiment.run_experiment in this process, on tiny data: what a run leaves in
MLflow, failures that end runs FAILED, checks that stop before any run, and the
CoCoA+ and DIANA presets end to end."""

import base64
import json
import math
import zlib

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from conftest import TINY, all_runs, compose_config, family

ARMS = {"duhl-gap", "sequential", "random", "resident"}
SMALL = ["data.n_samples=150", "data.n_features=30", "data.n_informative=5", "experiment.max_time=2",
         "cluster=none", "progress=false"]


def test_experiment_tracks_parent_arms_metrics_and_artifacts(experiment, capsys):
    result = experiment(*TINY)
    out = capsys.readouterr().out
    assert "reached rel_gap 0.0001" in out and "x vs sequential" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ARMS
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}

    # Params: the flattened resolved config, only what a GLM experiment uses; tags: commit, host, device.
    assert parent.data.params["model.name"] == "lasso"
    assert parent.data.params["data.n_samples"] == "120"
    assert parent.data.params["experiment.arms.resident.memory_budget"] == "None"
    assert not [k for k in parent.data.params if k.startswith("experiment.distbelief")]
    assert "experiment.target_suboptimality" not in parent.data.params
    assert {"git_commit", "host", "device"} <= set(parent.data.tags)
    # Arms: their settings under the config's keys, with the data and the model (no bare duplicates).
    seq = arms["sequential"].data.params
    assert seq["solver.selection"] == "sequential" and seq["device.memory_budget"] == "0.25"
    assert seq["model.name"] == "lasso" and seq["data.n_samples"] == "120" and seq["experiment.target_rel_gap"] == "0.0001"
    assert arms["resident"].data.params["device.memory_budget"] == "None"
    assert not {"name", "selection", "memory_budget", "tol"} & set(seq)
    assert {k: v for k, v in seq.items() if k.startswith(("data.", "model."))} == {
        k: v for k, v in parent.data.params.items() if k.startswith(("data.", "model."))}

    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        history = client.get_metric_history(run.info.run_id, "rel_gap")
        steps = [m.step for m in history]
        assert len(history) >= 2 and steps == sorted(steps)
        assert run.data.metrics["final_rel_gap"] == pytest.approx(history[-1].value)
        assert result[name]["final_rel_gap"] == pytest.approx(history[-1].value)
        if run.data.metrics["reached_target"]:
            # the first logged value at the target is the one the run reports (rel_gap holds the
            # certified rows; the estimates between them are rel_gap_estimate)
            first = next(m for m in history if m.value <= 1e-4)
            times = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "time_s")}
            assert run.data.metrics["time_to_target_s"] == pytest.approx(times[first.step])
            assert "bytes_to_target" in run.data.metrics
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert f"{name}.csv" in artifacts

    gap = arms["duhl-gap"].data.metrics
    assert gap["reached_target"] == 1.0, gap
    for baseline in ("sequential", "random", "resident"):
        other = arms[baseline].data.metrics
        expected = other["time_to_target_s"] / gap["time_to_target_s"]
        assert parent.data.metrics[f"speedup_vs_{baseline}"] == pytest.approx(expected, rel=5e-3)  # 3 digits
    assert 0 < parent.data.metrics["tracking_overhead"] < 1
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"rel_gap_vs_time.png", "rel_gap_vs_bytes.png", "traces", "comparison.md"} <= artifacts


def test_the_ui_sees_colours_a_verdict_and_curves_against_solver_time(experiment, capsys):
    experiment(*TINY)
    out = capsys.readouterr().out
    parent, arms = family(experiment.uri)
    client = MlflowClient(experiment.uri)
    eid, pid = parent.info.experiment_id, parent.info.run_id
    # the printed link lands on the parent run's page, in the runs (not GenAI) workflow
    assert f"the comparison: http://127.0.0.1:5000/#/experiments/{eid}/runs/{pid}?workflowType=machine_learning" in out
    # one colour per arm, by role (main arm first); the parent none of theirs
    colours = {name: run.data.tags["mlflow.runColor"] for name, run in arms.items()}
    assert colours == {"duhl-gap": "#d62728", "sequential": "#1f77b4", "random": "#ff7f0e", "resident": "#2ca02c"}
    assert parent.data.tags["mlflow.runColor"] not in colours.values()
    # the description: the verdict first, then the arm table in markdown, rounded as in the terminal
    note = parent.data.tags["mlflow.note.content"]
    assert note.splitlines()[0] == parent.data.tags["verdict"] and parent.data.tags["verdict"] in out
    time_cell = f"{arms['random'].data.metrics['time_to_target_s']:.2f}"
    assert f"| random | converged | {time_cell} |" in note
    assert sum(line.startswith("| ") for line in note.splitlines()) == 2 + len(ARMS)  # header, rule, arms
    # rounds are stamped at the run's start + solver time: the UI's relative time is solver time
    for name, run in arms.items():
        times = client.get_metric_history(run.info.run_id, "time_s")
        gaps = client.get_metric_history(run.info.run_id, "rel_gap")
        logs = client.get_metric_history(run.info.run_id, "log10_rel_gap")
        estimates = client.get_metric_history(run.info.run_id, "rel_gap_estimate")  # rows between certificates
        assert sorted(m.timestamp for m in gaps + estimates) == sorted(m.timestamp for m in times)
        assert not {m.step for m in gaps} & {m.step for m in estimates}
        for t in times:
            assert t.timestamp - run.info.start_time == pytest.approx(1000 * t.value, abs=0.51), name
        assert [m.value for m in logs] == pytest.approx([math.log10(m.value) for m in gaps if m.value > 0])
    # a saved view of these arms: log rel_gap against relative time
    tag = client.get_experiment(eid).tags[f"mlflow.sharedViewState.arms-{pid}"]
    state = json.loads(zlib.decompress(base64.b64decode(json.loads(tag)["state"].split(";", 1)[1])))
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{pid}'" and state["runsHiddenMode"] == "SHOW_ALL"
    assert {(c["metricKey"], c["xAxisKey"], c["scaleType"]) for c in state["compareRunCharts"]} >= {
        ("rel_gap", "time-relative", "log"), ("log10_rel_gap", "time-relative", "linear")}
    found = client.search_runs([eid], state["searchFilter"])  # the filter MLflow itself runs
    assert {r.info.run_id for r in found} == {r.info.run_id for r in arms.values()}
    # no empty Default experiment beside it
    from mlflow.entities import ViewType

    assert [e.name for e in client.search_experiments(view_type=ViewType.ACTIVE_ONLY)] == ["duhl_lasso"]


def test_failure_inside_a_run_ends_it_failed_with_the_error(experiment):
    # "1B" passes the start-up check but is below one coordinate's data: the solver raises.
    with pytest.raises(ValueError, match="below one coordinate's data"):
        experiment(*TINY, "device.memory_budget=1B")
    runs = all_runs(experiment.uri)
    assert runs and all(r.info.status == "FAILED" for r in runs)
    assert any("memory_budget" in r.data.tags.get("error", "") for r in runs)


@pytest.mark.parametrize("override,expected", [
    ("device.memory_budget=abc", "'memory_budget' parameter of device"),
    ("data.n_samples=-5", "'n_samples' parameter of data 'synthetic_dense'"),
    ("model.alpha=-1", "'alpha' parameter of model 'lasso' must be a float > 0. Got -1"),
    ("model=elastic_net model.l1_ratio=2", "'l1_ratio' parameter of model 'elastic_net' must be a float in [0, 1]"),
    ("model=svm model.loss=bogus", "'loss' parameter of model 'svm' must be one of ('hinge', 'squared_hinge')"),
    ("+model.gamma=1", "Key 'gamma' not in"),
    ("experiment.main_arm=nope", "'main_arm' parameter of experiment names arm(s) ['nope']"),
])
def test_bad_setting_exits_with_one_line_before_any_run(experiment, override, expected):
    with pytest.raises(SystemExit) as error:
        experiment(*TINY, *override.split())
    message = str(error.value)
    assert message.startswith("Error: ") and "\n" not in message
    assert expected in message, message
    assert all_runs(experiment.uri) == []  # nothing opened, so nothing RUNNING


def test_cuda_without_a_gpu_exits_2_before_any_run(experiment, capsys):
    from solvers.duhl.block.devices import NoCudaDevice, check_device

    try:
        check_device("cuda")
        pytest.skip("a GPU is present")
    except NoCudaDevice:
        pass
    with pytest.raises(SystemExit) as error:
        experiment(*TINY, "device=cuda")
    assert error.value.code == 2
    assert "no CUDA device found: use device=cpu or device=cuda_sim" in capsys.readouterr().err
    assert all_runs(experiment.uri) == []


def test_cocoa_end_to_end(experiment, capsys):
    experiment("experiment=cocoa", *SMALL, "experiment.target_rel_gap=1e-4")
    out = capsys.readouterr().out
    assert "To rel_gap <= 0.0001" in out and "Mbit sent" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == {"k1", "k2", "k2_safe", "k4", "k4_safe", "k4_compressed"}
    assert parent.info.status == "FINISHED"
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        assert run.info.status == "FINISHED" and run.data.params["solver.n_parts"] in ("1", "2", "4")
        gaps = client.get_metric_history(run.info.run_id, "rel_gap")
        assert len(gaps) >= 2 and gaps[-1].value <= 1e-4, name
        assert client.get_metric_history(run.info.run_id, "bits_sent")
        m = run.data.metrics
        assert m["reached_target"] == 1 and "bits_to_target" in m
        assert run.data.tags["notes"].startswith("sigma' = ")  # the sigma' it used, in its notes
    assert arms["k1"].data.metrics["bits_to_target"] >= 0
    assert arms["k4"].data.metrics["bits_to_target"] > 0  # four parts send dv every round
    # shifted dithering: fewer bits to the same (certified) gap than exact messages
    assert arms["k4_compressed"].data.metrics["bits_to_target"] < arms["k4"].data.metrics["bits_to_target"]
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"rel_gap_vs_time.png", "rel_gap_vs_bits.png"} <= names


def test_cocoa_l1_end_to_end(experiment, data_cache, capsys):
    """The L1 logistic regression in the primal: every arm's certified gap reaches the target, its
    coefficients are sparse, and liblinear's objective lies within its certified bracket."""
    from sklearn.linear_model import LogisticRegression

    from tasks.data import load_dataset
    from tasks.problems import labels_for

    overrides = ["experiment=cocoa_l1", *SMALL, "data.n_samples=400", "experiment.target_rel_gap=1e-7"]
    experiment(*overrides)
    assert "model: logistic_l1" in capsys.readouterr().out
    parent, arms = family(experiment.uri)
    assert set(arms) == {"k1", "k2", "k4", "k4_safe"}
    ds = load_dataset(compose_config(*overrides).data, data_cache)
    X, s = np.asarray(ds.X), labels_for("logistic", ds.y)
    sk = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=0.01, fit_intercept=False, tol=1e-12,
                            max_iter=100000, random_state=0).fit(X, s)
    target = np.abs(sk.coef_).sum() + 0.01 * np.logaddexp(0, -s * (X @ sk.coef_.ravel())).sum()
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        assert run.info.status == "FINISHED" and run.data.metrics["reached_target"] == 1, name
        last = {k: client.get_metric_history(run.info.run_id, k)[-1].value for k in ("primal", "dual", "rel_gap")}
        assert last["rel_gap"] <= 1e-7 and last["dual"] <= target * (1 + 1e-12), name
        assert last["primal"] <= target * (1 + 1e-6), name


def test_diana_end_to_end(experiment, capsys):
    experiment("experiment=diana", *SMALL, "experiment.target_suboptimality=1e-4", "experiment.max_time=1")
    assert "To suboptimality <= 0.0001" in capsys.readouterr().out
    parent, arms = family(experiment.uri)
    assert {"gd", "diana_natural", "diana_dither", "no_shift_dither", "ef21_top_k"} <= set(arms)
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        sub = client.get_metric_history(run.info.run_id, "suboptimality")
        bits = client.get_metric_history(run.info.run_id, "bits_sent")
        assert len(sub) >= 2 and sub[-1].value < sub[0].value and bits[-1].value > 0, name
        assert "final_suboptimality" in run.data.metrics
        assert client.get_metric_history(run.info.run_id, "rel_gap") == []  # no gap: not called one
    for name in ("gd", "diana_natural"):
        m = arms[name].data.metrics
        assert m["reached_target"] == 1 and m["bits_to_target"] > 0 and m["time_to_target_s"] > 0
    # natural compression: 9 bits a coordinate instead of 32, and about as many rounds
    assert arms["diana_natural"].data.metrics["bits_to_target"] < arms["gd"].data.metrics["bits_to_target"]
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"suboptimality_vs_time.png", "suboptimality_vs_bits.png"} <= names


def test_lost_scheduler_fails_the_runs_with_a_clear_error(experiment, monkeypatch):
    import pipelines.glm as glm
    from tasks.distributed_glm.replicas import ClusterLost

    def lost(*args, **kwargs):
        raise ClusterLost("lost the dask scheduler: connection closed")

    monkeypatch.setattr(glm, "run_arm", lost)
    with pytest.raises(SystemExit, match="ClusterLost: lost the dask scheduler") as error:
        experiment("experiment=cocoa", *SMALL)
    assert "\n" not in str(error.value)
    parent, arms = family(experiment.uri)
    assert set(arms) == {"k1"}  # the first arm's failure ends the experiment
    assert parent.info.status == "FAILED" and arms["k1"].info.status == "FAILED"
    assert arms["k1"].data.tags["error"].startswith("ClusterLost: lost the dask scheduler")


def test_every_kind_plans_from_its_preset():
    from pipelines.experiment import plan_experiment

    assert plan_experiment(compose_config("experiment=default")).main_arm == "duhl-gap"
    single = plan_experiment(compose_config("experiment=single", "solver=duhl_random"))
    assert list(single.arms) == ["duhl-random"] and single.main_arm == "duhl-random"
    assert "downpour_adagrad" in plan_experiment(compose_config("experiment=distbelief"))["arms"]
    with pytest.raises(ValueError, match="'kind' parameter of experiment must be one of"):
        plan_experiment(compose_config("experiment.kind=hogwild"))


def test_runs_left_running_by_a_dead_process_are_failed_at_the_next_start(experiment):
    """SIGKILL or a power cut leaves runs RUNNING; the next experiment on this host finds
    them by their host and pid tags, sees the process is gone, and ends them FAILED."""
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has just ended
    client = MlflowClient(experiment.uri)
    eid = client.create_experiment("crashed")
    orphan = client.create_run(eid, run_name="orphan", tags={"host": socket.gethostname(), "pid": dead}).info.run_id
    alive = client.create_run(eid, run_name="alive", tags={"host": socket.gethostname(),
                                                           "pid": str(__import__("os").getpid())}).info.run_id
    experiment(*TINY, "experiment=single")
    assert client.get_run(orphan).info.status == "FAILED"
    assert client.get_run(orphan).data.tags["error"].startswith(f"process died: pid {dead}")
    assert client.get_run(alive).info.status == "RUNNING"  # this process is alive: left alone


def test_an_unreachable_tracking_server_fails_in_seconds_with_one_line(experiment):
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(SystemExit) as error:
        experiment(*TINY, f"tracking.uri=http://127.0.0.1:{port}")
    assert time.monotonic() - started < 30
    message = str(error.value)
    assert message.startswith(f"Error: the MLflow tracking server at http://127.0.0.1:{port} does not answer")
    assert "\n" not in message


def test_multiclass_labels_stop_with_the_option_and_a_chosen_class_runs(experiment):
    with pytest.raises(SystemExit) as error:
        experiment("data=sklearn", "data.dataset=iris", "model=logistic", "experiment=single", "progress=false")
    assert "set data.positive_class=<one of them>" in str(error.value) and "\n" not in str(error.value)
    parent, _ = family(experiment.uri)
    assert parent.info.status == "FAILED" and "positive_class" in parent.data.tags["error"]


def test_a_continuous_target_split_for_a_classifier_is_said_and_tagged(experiment, capsys):
    experiment(*TINY, "model=svm", "experiment=single")
    assert "labels: the target is continuous" in capsys.readouterr().out
    parent, arms = family(experiment.uri)
    assert "median" in parent.data.tags["labels"]
    assert arms["duhl-gap"].data.tags["status"] == "converged"


def test_an_arm_stopped_by_its_limit_says_so(experiment):
    experiment(*TINY, "experiment=single", "experiment.target_rel_gap=1e-300", "solver.max_epochs=3")
    _, arms = family(experiment.uri)
    assert arms["duhl-gap"].data.tags["status"] == "max_epochs"
    assert arms["duhl-gap"].data.metrics["reached_target"] == 0


def test_a_peer_arm_stopped_at_max_time_keeps_its_points_and_says_so(experiment):
    """scikit-learn's schedule on a Lasso with a tiny alpha (minutes at tol 1e-4): its arm ends
    at experiment.max_time, FINISHED with status max_time and the points fitted before logged;
    the fits' times (the trace's time_s, each point from scratch) sum to at most max_time."""
    import pandas as pd

    experiment(*TINY, "experiment=single", "solver=peer_sklearn", "data.n_samples=1000", "data.n_features=1000",
               "model.alpha=1e-4", "experiment.target_rel_gap=1e-300", "experiment.max_time=2")
    _, arms = family(experiment.uri)
    run = arms["peer_sklearn"]
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "max_time"
    assert run.data.metrics["reached_target"] == 0 and "forked child process" in run.data.tags["notes"]
    assert (run.info.end_time - run.info.start_time) / 1e3 < 2 + 5  # the slack: builds, our evaluations, MLflow
    trace = pd.read_csv(experiment.out / "traces" / "peer_sklearn.csv")
    assert trace["round"].iloc[0] == 0 and len(trace) >= 2 and trace["time_s"].sum() <= 2
    history = MlflowClient(experiment.uri).get_metric_history(run.info.run_id, "rel_gap")
    assert 2 <= len(history) <= len(trace) and min(h.value for h in history) == pytest.approx(trace["rel_gap"].min())


def test_an_l1_logistic_regression_runs_in_the_primal_beside_a_peer(experiment, capsys):
    """model=logistic model.penalty=l1: the primal entry (tagged, printed, in the arms' params),
    DuHL and liblinear's L1 solver both at the target on the objective re-scored by our code."""
    experiment(*TINY, "model=logistic", "model.penalty=l1", "model.C=0.5", "model.fit_intercept=false",
               "experiment=single", "+experiment.arms.duhl-gap={selection:gap}",
               "+experiment.arms.liblinear={name:peer_sklearn}", "experiment.main_arm=duhl-gap")
    out = capsys.readouterr().out
    assert "model: logistic_l1 (dual='auto' chose the primal formulation: penalty='l1'" in out
    parent, arms = family(experiment.uri)
    assert parent.data.tags["model_entry"] == "logistic_l1" and "primal" in parent.data.tags["formulation"]
    assert parent.data.params["model.penalty"] == "l1"
    for name in ("duhl-gap", "liblinear"):
        assert arms[name].data.params["model.name"] == "logistic_l1", name
        assert arms[name].data.metrics["reached_target"] == 1, name


def test_a_tall_l2_logistic_regression_takes_the_primal(experiment, capsys):
    """All data resident: scikit-learn's rule (the primal for tall data); with the device's
    memory_budget of a quarter: the dual, saying why."""
    experiment(*TINY, "model=logistic", "model.fit_intercept=false", "experiment=single", "device.memory_budget=null")
    assert "model: logistic_l2 (dual='auto' chose the primal formulation: n_samples=120 >= n_features=40)" in \
        capsys.readouterr().out
    _, arms = family(experiment.uri)
    assert arms["duhl-gap"].data.metrics["reached_target"] == 1


CLICKS = ["data=synthetic_criteo", "data.n_samples=3000", "data.hash_bits=8", "data.nnz_per_row=4", "data.n_informative=20",
          "experiment.target_rel_gap=1e-4", "experiment.max_time=10", "progress=false"]


@pytest.mark.parametrize("data, entry, why", [
    (CLICKS, "logistic", "dual formulation: the memory budget holds part of the data and its features are coupled "
                         "(sum_j cos^2(x_j, 1) = "),
    (TINY, "logistic_l2", "primal formulation: n_samples=120 >= n_features=40 (the memory budget holds part of the "
                          "data; its features' coupling sum_j cos^2(x_j, 1) = "),
])
def test_a_budgeted_l2_logistic_regression_takes_the_dual_where_its_features_are_coupled(experiment, capsys, data,
                                                                                        entry, why):
    """With the main arm's memory_budget holding a quarter: binary click-like features (coupled
    through their frequent values) take the dual; the synthetic set's centred ones the primal."""
    experiment(*data, "model=logistic", "model.fit_intercept=false", "experiment=single", "device.memory_budget=0.25")
    assert f"model: {entry} (dual='auto' chose the {why.split()[0]} formulation" in capsys.readouterr().out
    parent, arms = family(experiment.uri)
    assert parent.data.tags["model_entry"] == entry
    assert parent.data.tags["formulation"].startswith(f"dual='auto' chose the {why}"), parent.data.tags["formulation"]
    assert arms["duhl-gap"].data.metrics["reached_target"] == 1


def test_the_coupling_is_computed_only_where_dual_auto_weighs_it():
    """The L2 logistic regression with dual='auto' and a main arm's budget holding part of the
    data: its coupling (three constant columns: cos^2 = 1 each); any other run: None, no pass."""
    from types import SimpleNamespace

    from pipelines.glm import budget_coupling

    X = np.ones((10, 3))
    data = SimpleNamespace(X=X, nbytes=X.nbytes)

    def plan(budget=0.25, **model):
        return SimpleNamespace(arms={"duhl-gap": {"name": "duhl", "memory_budget": budget}}, main_arm="duhl-gap",
                               model={"name": "logistic", "penalty": "l2", "dual": "auto", **model})

    assert budget_coupling(plan(), data) == pytest.approx(3.0, rel=1e-12)
    for other in (plan(penalty="l1"), plan(dual=True), plan(budget=None), plan(budget=1.0), plan(name="svm")):
        assert budget_coupling(other, data) is None
