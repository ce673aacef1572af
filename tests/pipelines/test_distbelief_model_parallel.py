"""experiment=distbelief_model_parallel: the preset composes with the model sizes the issue
asks for, bad settings fail before any run, a tiny end-to-end run leaves curves and per-run
step times in MLflow, and the two reproduce claims read the arms' counters."""

import math

import pytest
from mlflow.tracking import MlflowClient

from conftest import all_runs, compose_config, family
from pipelines.distbelief import plan
from pipelines.reproduce_claims import db_partitions_large, db_partitions_small
from pipelines.report import RunResults
from tasks.distbelief.common import build_model

ARMS = {"large_k1", "large_k2", "large_k4", "small_k1", "small_k2", "small_k4", "large_r2_k2"}
TINY = ["experiment=distbelief_model_parallel", "data.n_samples=400", "data.n_features=8", "data.n_informative=4",
        "model.hidden=[6,6]",
        "experiment.distbelief.n_eval=100", "progress=false", "~experiment.arms.large_k4",
        "~experiment.arms.small_k4", "experiment.arms.small_k1.model.hidden=[4,4]",
        "experiment.arms.small_k2.model.hidden=[4,4]",
        *[f"experiment.arms.{a}.{k}={v}" for a in ("large_k1", "large_k2", "small_k1", "small_k2", "large_r2_k2")
          for k, v in (("steps_per_round", 2), ("max_steps", 4))]]


def n_params(cfg, model):
    return build_model(model, cfg.data.n_features, 1).n_params


def test_preset_plans_k_1_2_4_at_two_model_sizes():
    cfg = compose_config("experiment=distbelief_model_parallel")
    p = plan(cfg)
    assert set(p["arms"]) == ARMS and cfg.cluster.name == "local" and cfg.cluster.n_workers == 2
    assert cfg.cluster.threads_per_worker == 1
    arms = p["arms"]
    assert {a["n_partitions"] for n, a in arms.items() if n.startswith("large_k")} == {1, 2, 4}
    assert {a["n_partitions"] for n, a in arms.items() if n.startswith("small_k")} == {1, 2, 4}
    assert arms["large_r2_k2"]["n_replicas"] == 2 and arms["large_r2_k2"]["n_partitions"] == 2
    assert all(a["algo"] == "model_parallel" for a in arms.values())
    assert n_params(cfg, p["model"]) >= 4_000_000  # the large model (the config's)
    assert 1_000 <= n_params(cfg, arms["small_k1"]["model"]) <= 50_000  # a few thousand
    assert arms["small_k1"]["model"] == arms["small_k2"]["model"] == arms["small_k4"]["model"]
    assert all("model" not in arms[a] for a in ("large_k1", "large_k2", "large_k4", "large_r2_k2"))


@pytest.mark.parametrize("override, message", [
    ("experiment.arms.small_k4.n_partitions=17", "arm 'small_k4': The 'n_partitions' parameter of the "
                                                 "model-parallel MLP must be an int in [1, 16]. Got 17 instead."),
    ("experiment.arms.large_k2.steps_per_round=0", "The 'steps_per_round' parameter of model parallelism must be"),
    ("+experiment.arms.large_k2.shards_on=nowhere", "The 'shards_on' parameter of model parallelism must be one of"),
    ("model.hidden=[]", "The 'hidden' parameter of model 'mlp' must be an int >= 1 or a non-empty list"),
    ("model.activation=sigmoid", "The 'activation' parameter of model 'mlp' must be one of ('tanh', 'relu')"),
    ("+experiment.arms.large_k2.model.alpha=-1", "arm 'large_k2': The 'alpha' parameter of model 'mlp'"),
    ("+experiment.arms.large_k2.blas_threadz=1", "unknown key(s) ['blas_threadz']"),
])
def test_bad_settings_are_one_line_errors(override, message):
    with pytest.raises(ValueError) as error:
        plan(compose_config("experiment=distbelief_model_parallel", override))
    assert message in str(error.value) and "\n" not in str(error.value)


def _results(large, small, n_large=4_724_737, n_small=4_401):
    def counters(step, n):
        return {"step_s": step, "n_params": n, "bytes_per_step": 1e6, "bytes_per_step_predicted": 1e6,
                "steps_measured": 40}
    extras = {f"{size}_k{k}": {"counters": counters(steps[k - 1], n)}
              for size, steps, n in (("large", large, n_large), ("small", small, n_small)) for k in (1, 2)}
    return {"distbelief_model_parallel": RunResults({}, extras=extras)}


@pytest.mark.parametrize("large, small, n_large, holds", [
    ((0.4, 0.22), (0.004, 0.02), 4_724_737, (True, True)),
    ((0.4, 0.30), (0.004, 0.0039), 4_724_737, (False, False)),  # 0.75x; the small one 2.5% faster
    ((0.4, 0.22), (0.004, 0.004), 3_000_000, (False, True)),  # too small to be the large model
])
def test_the_two_claims_read_the_step_ratios(large, small, n_large, holds):
    r = _results(large, small, n_large)
    (text_large, held_large), (text_small, held_small) = db_partitions_large(r), db_partitions_small(r)
    assert (held_large, held_small) == holds
    assert f"({large[1] / large[0]:.2f}x)" in text_large and f"{n_large:,} parameters" in text_large
    assert f"({small[1] / small[0]:.2f}x)" in text_small


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_tiny_run_logs_step_time_curves_and_the_ratio_to_one_partition(experiment, dask_client, capsys):
    # on the session's cluster (cluster=remote): the run's own LocalCluster would take longer than its arms
    result = experiment(*TINY, "cluster=remote", f"cluster.address={dask_client.scheduler.address}")
    out = capsys.readouterr().out
    assert "Model parallelism: one step of a replica" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == ARMS - {"large_k4", "small_k4"}
    assert {r.info.status for r in all_runs(experiment.uri)} == {"FINISHED"}
    client = MlflowClient(experiment.uri)
    for name, run in arms.items():
        for curve in ("step_s", "samples_per_s", "bytes_sent", "train_loss", "test_accuracy"):
            assert client.get_metric_history(run.info.run_id, curve), (name, curve)
        assert run.data.metrics["step_s_median"] > 0 and run.data.metrics["samples_per_s_median"] > 0
        assert run.data.params["n_partitions"] in ("1", "2") and run.data.tags["status"] == "max_steps"
    assert arms["small_k1"].data.params["model.hidden"] == "[4, 4]"
    assert arms["large_k1"].data.params["model.hidden"] == "[6, 6]"
    # K = 2 sends each layer's activations and gradients: 2 x 8 bytes x 64 rows x (6 + 6 - 3)
    assert arms["large_k2"].data.metrics["bytes_per_step"] == 8 * 64 * (2 * 6 + 2)  # layer 1 both ways, the logit
    assert arms["large_k1"].data.metrics["bytes_per_step"] == 0
    ratio = arms["large_k2"].data.metrics["speedup_vs_large_k1"]
    medians = {name: run.data.metrics["step_s_median"] for name, run in arms.items()}
    assert math.isclose(ratio, medians["large_k1"] / medians["large_k2"], rel_tol=1e-9)
    assert "speedup_vs_small_k1" in arms["small_k2"].data.metrics
    assert not [m for m in arms["large_r2_k2"].data.metrics if m.startswith("speedup_vs_")]  # no 2 x 1 arm
    verdict = parent.data.tags["verdict"]
    assert verdict.startswith("large_k2 (") and "the step time of large_k1" in verdict
