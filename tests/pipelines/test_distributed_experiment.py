"""experiment=cocoa and experiment=diana end to end on tiny data (cluster=none): a parent
run and one nested run per arm with curves and per-run numbers, read back from MLflow;
a lost scheduler ends the runs FAILED with the error on them and a one-line exit."""

import shutil

import pytest
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, all_runs
from pipelines.config import register_configs

TINY = ["data.n_samples=150", "data.n_features=30", "data.n_informative=5", "experiment.max_time=2",
        "cluster=none", "progress=false"]


def family(uri):
    runs = all_runs(uri)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    arms = {r.data.tags["arm"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    return parents[0], arms


def test_cocoa_end_to_end(cli):
    done = cli("experiment=cocoa", *TINY, "experiment.target_rel_gap=1e-4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "To rel_gap <= 0.0001" in done.stdout and "Mbit sent" in done.stdout
    parent, arms = family(cli.uri)
    assert set(arms) == {"k1", "k2_adding", "k2_averaging", "k4_adding", "k4_averaging"}
    assert parent.info.status == "FINISHED"
    client = MlflowClient(cli.uri)
    for name, run in arms.items():
        assert run.info.status == "FINISHED" and run.data.params["n_parts"] in ("1", "2", "4")
        gaps = client.get_metric_history(run.info.run_id, "rel_gap")
        assert len(gaps) >= 2 and gaps[-1].value <= 1e-4, name
        assert client.get_metric_history(run.info.run_id, "bits_sent")
        m = run.data.metrics
        assert m["reached_target"] == 1 and m["time_to_target_s"] > 0 and "bits_to_target" in m
    assert arms["k1"].data.metrics["bits_to_target"] >= 0
    assert arms["k4_adding"].data.metrics["bits_to_target"] > 0  # four parts send dv every round
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"rel_gap_vs_time.png", "rel_gap_vs_bits.png"} <= names


def test_diana_end_to_end(cli):
    done = cli("experiment=diana", *TINY, "experiment.target_suboptimality=1e-4", "experiment.max_time=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "To suboptimality <= 0.0001" in done.stdout
    parent, arms = family(cli.uri)
    assert {"gd", "diana_natural", "diana_dither", "no_shift_dither", "ef21_top_k"} <= set(arms)
    client = MlflowClient(cli.uri)
    for name, run in arms.items():
        sub = client.get_metric_history(run.info.run_id, "suboptimality")
        bits = client.get_metric_history(run.info.run_id, "bits_sent")
        assert len(sub) >= 2 and sub[-1].value < sub[0].value and bits[-1].value > 0, name
        assert "final_suboptimality" in run.data.metrics
    for name in ("gd", "diana_natural"):
        m = arms[name].data.metrics
        assert m["reached_target"] == 1 and m["bits_to_target"] > 0 and m["time_to_target_s"] > 0
    # natural compression: 9 bits a coordinate instead of 32, and about as many rounds
    assert arms["diana_natural"].data.metrics["bits_to_target"] < arms["gd"].data.metrics["bits_to_target"]
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"suboptimality_vs_time.png", "suboptimality_vs_bits.png"} <= names


def test_lost_scheduler_fails_the_runs_with_a_clear_error(tmp_path, empty_store, data_cache, monkeypatch):
    import pipelines.experiment as experiment
    from tasks.distributed_glm.replicas import ClusterLost

    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=cocoa", *TINY, f"tracking.uri={uri}", f"cache_dir={data_cache}"])

    def lost(*args, **kwargs):
        raise ClusterLost("lost the dask scheduler: connection closed")

    monkeypatch.setattr(experiment, "run_arm", lost)
    with pytest.raises(SystemExit, match="ClusterLost: lost the dask scheduler") as error:
        experiment.run_experiment(cfg, tmp_path / "out")
    assert "\n" not in str(error.value)
    parent, arms = family(uri)
    assert set(arms) == {"k1"}  # the first arm's failure ends the experiment
    assert parent.info.status == "FAILED" and arms["k1"].info.status == "FAILED"
    assert arms["k1"].data.tags["error"].startswith("ClusterLost: lost the dask scheduler")
