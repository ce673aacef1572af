"""experiment=distbelief: the preset composes, bad settings fail before any run,
and a tiny end-to-end run leaves a parent run with one nested run per arm
carrying curves and per-run numbers (read back from MLflow)."""

import pytest
from mlflow.tracking import MlflowClient

from conftest import all_runs, compose_config, family
from pipelines.distbelief import plan

ARMS = {"sgd_1", "downpour_fixed", "downpour_adagrad", "adagrad_1", "adagrad_4", "sandblaster_lbfgs", "adagrad_killed"}
# (the rate tuning and the killed worker run in tests/pipelines/test_reproduce.py)
TINY = ["experiment=distbelief", "data.n_samples=400", "experiment.max_time=3", "model.hidden=4",
        "experiment.distbelief.eval_every_s=0.2", "experiment.distbelief.n_eval=200",
        "experiment.distbelief.warmup_steps=5", "cluster.memory_limit=0", "progress=false",
        "experiment.distbelief.lr_grid=[]", "~experiment.arms.adagrad_killed", "~experiment.arms.adagrad_4",
        "experiment.arms.sandblaster_lbfgs.max_time=3"]  # (two L-BFGS rounds at least, on a busy machine)


@pytest.mark.parametrize("overrides", [[], ["model=logistic", "data=libsvm"], ["model=mlp", "data=synthetic_dense"]])
def test_preset_composes_and_plans(overrides):
    cfg = compose_config("experiment=distbelief", *overrides)
    assert cfg.experiment.kind == "distbelief" and cfg.cluster.name == "local"
    p = plan(cfg)
    assert set(p["arms"]) == ARMS
    assert p["arms"]["sgd_1"]["n_replicas"] == 1 and p["arms"]["downpour_adagrad"]["rule"] == "adagrad"
    assert p["arms"]["sandblaster_lbfgs"]["algo"] == "sandblaster" and "lr" not in p["arms"]["sandblaster_lbfgs"]
    # fair rates: every Downpour arm is tuned on the one grid, Sandblaster has no rate
    grid = list(cfg.experiment.distbelief.lr_grid)
    assert grid and all(a["tune_lr"] == grid for a in p["arms"].values() if a["algo"] == "downpour")
    assert "tune_lr" not in p["arms"]["sandblaster_lbfgs"]
    assert p["arms"]["adagrad_killed"]["kill_worker_after_s"] > 0


@pytest.mark.parametrize("override, message", [
    ("cluster=none", "must name a Dask cluster"),
    ("model=lasso", "'name' parameter of model"),
    ("+experiment.arms.bad={algo: downpour, n_fetchh: 2}", "unknown key(s) ['n_fetchh']"),
    ("+experiment.arms.bad={algo: hogwild}", "'algo' parameter of arm 'bad'"),
    ("experiment.main_arm=nope", "'main_arm' parameter"),
])
def test_bad_settings_are_one_line_errors(override, message):
    with pytest.raises(ValueError) as error:
        plan(compose_config("experiment=distbelief", override))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_no_cluster_fails_before_any_run(experiment):
    with pytest.raises(SystemExit, match="must name a Dask cluster"):
        experiment("experiment=distbelief", "cluster=none")
    assert all_runs(experiment.uri) == []


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_tiny_run_tracks_parent_and_arm_runs_with_curves(experiment, capsys):
    result = experiment(*TINY)
    out = capsys.readouterr().out
    assert "DistBelief: to train loss" in out and "sandblaster_lbfgs" in out
    parent, arms = family(experiment.uri)
    assert parent.data.params["experiment.kind"] == "distbelief" and parent.data.tags["failures"] == "0"
    assert set(arms) == set(result) == ARMS - {"adagrad_killed", "adagrad_4"}
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        loss = client.get_metric_history(run.info.run_id, "train_loss")
        samples = client.get_metric_history(run.info.run_id, "samples")
        assert len(loss) >= 2 and [m.step for m in loss] == sorted(m.step for m in loss), name
        # MLflow returns a history in no set order; 3 s an arm: with 1.5 s an arm on a busy CI machine
        # once ended before its replica's first push (samples 0 at its last row)
        assert max(samples, key=lambda m: m.step).value > 0, name
        assert run.data.metrics["final_train_loss"] == pytest.approx(loss[-1].value)
        assert 0 <= run.data.metrics["final_test_accuracy"] <= 1 and run.data.metrics["failures"] == 0
        assert run.data.tags["status"] in ("converged", "max_time", "max_iter") and run.data.tags["failures"] == "none"
        assert f"{name}.csv" in {a.path for a in client.list_artifacts(run.info.run_id)}
    for name in ("sgd_1", "downpour_fixed", "downpour_adagrad"):
        assert client.get_metric_history(arms[name].info.run_id, "staleness_max"), name
    assert arms["sgd_1"].data.metrics["staleness_max"] == 0  # one replica: never stale
    # what the UI shows: the groups DistBelief uses, data and model on the arms, a colour per arm, the verdict
    assert not [k for k in parent.data.params if k.startswith(("solver.", "device.", "experiment.target_"))]
    assert parent.data.params["experiment.distbelief.n_shards"] == "2"
    assert arms["sgd_1"].data.params["model.name"] == "mlp" and arms["sgd_1"].data.params["data.n_samples"] == "400"
    assert len({run.data.tags["mlflow.runColor"] for run in arms.values()}) == len(arms)
    note = parent.data.tags["mlflow.note.content"]
    assert note.splitlines()[0] == parent.data.tags["verdict"] and parent.data.tags["verdict"].startswith("downpour_adagrad")
    assert all(f"| {name} |" in note for name in arms)
    assert "comparison.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
