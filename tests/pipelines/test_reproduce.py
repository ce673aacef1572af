"""experiment=reproduce (make reproduce) end to end on tiny sizes, in this process: every seed
preset runs nested under one reproduce run, each claim is a line linked to the run it was
measured in, the table is printed and logged as an artifact; a failed run leaves its claims
"not measured" and the reproduce run FAILED."""

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from conftest import all_runs, compose_config
from pipelines.reproduce_claims import CLAIMS

SIZES = ["data.n_samples=120", "data.n_features=40", "data.n_informative=5"]
DUHL = ["experiment=default", *SIZES, "experiment.target_rel_gap=1e-4", "experiment.max_time=5"]
ONLY_GAP_AND_SEQUENTIAL = ["~experiment.arms.random", "~experiment.arms.resident", "experiment.baselines=[sequential]"]
# the four arms the claims read, a few steps each, a model of a few units
MODEL_PARALLEL_TINY = ["data.n_samples=400", "data.n_features=8", "data.n_informative=4", "model.hidden=[6,6]",
                       "experiment.distbelief.n_eval=100", "cluster.memory_limit=0", "~experiment.arms.large_k4",
                       "~experiment.arms.small_k4", "~experiment.arms.large_r2_k2",
                       *[f"experiment.arms.{a}.{k}={v}" for a in ("large_k1", "large_k2", "small_k1", "small_k2")
                         for k, v in (("steps_per_round", 2), ("max_steps", 4))],
                       "experiment.arms.small_k1.model.hidden=[4,4]", "experiment.arms.small_k2.model.hidden=[4,4]"]
TINY_RUNS = {
    "duhl": DUHL,
    "duhl_budget10": [*DUHL, "device.memory_budget=0.1", *ONLY_GAP_AND_SEQUENTIAL],
    "duhl_budget50": [*DUHL, "device.memory_budget=0.5", *ONLY_GAP_AND_SEQUENTIAL],
    "diana": ["experiment=diana", "data.n_samples=150", "data.n_features=30", "data.n_informative=5",
              "experiment.target_suboptimality=1e-4", "experiment.max_time=1"],
    "cocoa": ["experiment=cocoa", *SIZES, "experiment.target_rel_gap=1e-4", "experiment.max_time=2", "cluster=none"],
    "cocoa_svm": ["experiment=cocoa_svm", "data=synthetic_dense", "data.n_samples=200", "data.n_features=20",
                  "data.n_informative=5", "experiment.max_time=2", "cluster=none"],
    # rates tuned for two settings (downpour_fixed; downpour_adagrad, whose tuning adagrad_killed shares),
    # fixed for the other Downpour arms: 4 tuning runs, not 10
    "distbelief": ["experiment=distbelief", "data.n_samples=400", "experiment.max_time=1", "model.hidden=4",
                   "experiment.distbelief.eval_every_s=0.2", "experiment.distbelief.n_eval=200",
                   "experiment.distbelief.warmup_steps=5", "experiment.distbelief.lr_grid=[0.3,1.0]",
                   "experiment.distbelief.tune_samples=640", "+experiment.arms.sgd_1.lr=1.0",
                   "+experiment.arms.adagrad_1.lr=0.3", "+experiment.arms.adagrad_4.lr=0.3",
                   "experiment.arms.adagrad_killed.kill_worker_after_s=0.3",
                   "experiment.arms.adagrad_killed.max_time=1.5", "experiment.arms.sandblaster_lbfgs.max_time=1.5",
                   "cluster.memory_limit=0"],
    "distbelief_model_parallel": ["experiment=distbelief_model_parallel", *MODEL_PARALLEL_TINY],
}


def reproduce(store, data_cache, out, runs, *overrides):
    from pipelines.experiment import run_experiment

    cfg = compose_config("experiment=reproduce", f"tracking.uri={store.uri}", f"cache_dir={data_cache}",
                         "progress=false", *overrides)
    OmegaConf.update(cfg, "experiment.reproduce.runs", runs, merge=False)
    return run_experiment(cfg, out, "", ["experiment=reproduce"])


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_every_claim_is_measured_and_linked_to_its_run(store, data_cache, tmp_path, capsys):
    result = reproduce(store, data_cache, tmp_path / "out", TINY_RUNS)
    out = capsys.readouterr().out
    assert "The seed papers' claims, measured here" in out and "claims hold here" in out
    rows = result["rows"]
    assert [(r["seed"], r["claim"]) for r in rows] == [(c[0], c[1]) for c in CLAIMS]
    assert {r["holds"] for r in rows} <= {"holds", "does not hold"}  # every claim measured (tiny: any answer)
    assert all(r["measured"] and "not measured" not in r["measured"] for r in rows)

    client = MlflowClient(store.uri)
    runs = {r.info.run_id: r for r in all_runs(store.uri)}
    parent = runs[result["run_id"]]
    assert parent.info.status == "FINISHED" and parent.data.tags["reproduce"] == "true"
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    experiments = {r.info.run_name: r for r in runs.values()
                   if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(experiments) == set(TINY_RUNS)  # every preset's run nests under the reproduce run
    for row in rows:  # each line links to the run it was measured in
        linked = runs[row["run_id"]]
        assert linked.info.run_name == row["run"] and row["link"].endswith(row["run_id"])
    arms = [r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") == experiments["cocoa"].info.run_id]
    assert {r.data.tags["arm"] for r in arms} >= {"k1", "k2", "k4_compressed"}
    notes = {r.data.tags["arm"]: r.data.tags.get("notes", "") for r in arms}
    assert "sigma' = " in notes["k2"] and "(data;" in notes["k2"]

    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "reproduce.md" in artifacts
    text = (tmp_path / "out" / "reproduce.md").read_text()
    assert text == result["markdown"] and "load average" in text
    assert text.count("\n| ") == len(CLAIMS) + 2  # the header, its rule, a line per claim
    killed = result["results"]["distbelief"].extras["adagrad_killed"]
    assert killed["killed"], "the killed-worker arm killed nothing"
    extras = result["results"]["distbelief"].extras
    tuned = extras["downpour_fixed"]
    assert tuned["lr"] in (0.3, 1.0) and set(tuned["lr_losses"]) == {0.3, 1.0}
    assert extras["adagrad_killed"]["lr_losses"] == extras["downpour_adagrad"]["lr_losses"]  # one tuning, shared
    assert "lr_losses" not in extras["sgd_1"]  # an arm that fixes its rate is not tuned


def test_a_failed_run_leaves_its_claims_not_measured_and_the_reproduce_run_failed(store, data_cache, tmp_path):
    runs = {"diana": TINY_RUNS["diana"], "duhl": [*DUHL, "device.memory_budget=1B"]}  # 1B: the solver raises
    with pytest.raises(SystemExit, match=r"Error: run\(s\) \['duhl'\] failed") as error:
        reproduce(store, data_cache, tmp_path / "out", runs)
    assert "\n" not in str(error.value)
    text = (tmp_path / "out" / "reproduce.md").read_text()
    assert "not measured (duhl: ValueError" in text and "not measured (duhl_budget10: not run" in text
    assert "| DIANA | Fewer bits than uncompressed GD" in text and "4.6x" not in text.split("DuHL")[0]
    statuses = {r.info.run_name: r.info.status for r in all_runs(store.uri)
                if "mlflow.parentRunId" not in r.data.tags}
    assert statuses == {"reproduce": "FAILED"}
    children = {r.info.run_name: r.info.status for r in all_runs(store.uri)
                if r.info.run_name in ("diana", "duhl")}
    assert children == {"diana": "FINISHED", "duhl": "FAILED"}


def test_only_runs_some_and_unknown_names_fail_before_any_run(store, data_cache, tmp_path):
    with pytest.raises(SystemExit, match="'only' parameter of experiment.reproduce names run\\(s\\) \\['nope'\\]"):
        reproduce(store, data_cache, tmp_path / "out", TINY_RUNS, "experiment.reproduce.only=[nope]")
    assert all_runs(store.uri) == []
    result = reproduce(store, data_cache, tmp_path / "out", TINY_RUNS, "experiment.reproduce.only=[diana]")
    measured = {r["claim"][:20] for r in result["rows"] if r["holds"] != "not measured"}
    assert len(measured) == 2 and set(result["results"]) == {"diana"}
