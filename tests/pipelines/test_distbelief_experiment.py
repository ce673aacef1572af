"""experiment=distbelief: the preset composes, bad settings fail before any run,
and a tiny end-to-end run leaves a parent run with one nested run per arm
carrying curves and per-run numbers (read back from MLflow)."""

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, all_runs
from pipelines.config import register_configs
from pipelines.distbelief import plan

ARMS = {"sgd_1", "downpour_fixed", "downpour_adagrad", "sandblaster_lbfgs"}
TINY = ["experiment=distbelief", "data.n_samples=400", "experiment.max_time=1.5", "model.hidden=4",
        "experiment.distbelief.eval_every_s=0.2", "experiment.distbelief.n_eval=200",
        "experiment.distbelief.warmup_steps=5", "cluster.memory_limit=0", "progress=false"]


def compose_config(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("overrides", [[], ["model=logistic", "data=libsvm"], ["model=mlp", "data=synthetic_dense"]])
def test_preset_composes_and_plans(overrides):
    cfg = compose_config("experiment=distbelief", *overrides)
    assert cfg.experiment.kind == "distbelief" and cfg.cluster.name == "local"
    p = plan(cfg)
    assert set(p["arms"]) == ARMS
    assert p["arms"]["sgd_1"]["n_replicas"] == 1 and p["arms"]["downpour_adagrad"]["rule"] == "adagrad"
    assert p["arms"]["sandblaster_lbfgs"]["algo"] == "sandblaster" and "lr" not in p["arms"]["sandblaster_lbfgs"]


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


def test_cli_fails_before_any_run_without_a_cluster(cli):
    done = cli("experiment=distbelief", "cluster=none", timeout=120)
    assert done.returncode == 1 and "must name a Dask cluster" in done.stderr, done.stderr[-2000:]
    assert all_runs(cli.uri) == []


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_tiny_run_tracks_parent_and_arm_runs_with_curves(cli):
    done = cli(*TINY, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DistBelief: to train loss" in done.stdout and "sandblaster_lbfgs" in done.stdout

    runs = all_runs(cli.uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.params["experiment.kind"] == "distbelief" and parent.data.tags["failures"] == "0"
    arms = {r.data.tags["arm"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(arms) == ARMS and {r.info.status for r in runs} == {"FINISHED"}
    client = MlflowClient(cli.uri)
    for name, run in arms.items():
        loss = client.get_metric_history(run.info.run_id, "train_loss")
        samples = client.get_metric_history(run.info.run_id, "samples")
        assert len(loss) >= 2 and [m.step for m in loss] == sorted(m.step for m in loss), name
        assert samples[-1].value > 0
        assert run.data.metrics["final_train_loss"] == pytest.approx(loss[-1].value)
        assert 0 <= run.data.metrics["final_test_accuracy"] <= 1 and run.data.metrics["failures"] == 0
        assert run.data.tags["status"] in ("converged", "max_time", "max_iter") and run.data.tags["failures"] == "none"
        assert f"{name}.csv" in {a.path for a in client.list_artifacts(run.info.run_id)}
    for name in ("sgd_1", "downpour_fixed", "downpour_adagrad"):
        assert client.get_metric_history(arms[name].info.run_id, "staleness_max"), name
    assert arms["sgd_1"].data.metrics["staleness_max"] == 0  # one replica: never stale
