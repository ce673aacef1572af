"""Every option of every config group composes and passes the start-up checks."""

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException, MissingConfigException

from pipelines.config import register_configs
from solvers.glm.models import MODELS
from solvers.glm.models.sides import OPTION_ENTRIES
from pipelines.experiment import plan_experiment

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("model", "data", "solver", "device", "cluster", "tracking", "experiment")
register_configs()


@pytest.fixture(scope="module")
def hydra_conf():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def options():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        return [(g, o) for g in GROUPS for o in loader.get_group_options(g)]


def test_every_group_has_its_options(hydra_conf):
    found = {g: set(hydra_conf.get_group_options(g)) for g in GROUPS}
    # every registered GLM a user names (a classifier's primal entries through model.penalty / model.dual),
    # and DistBelief's MLP
    assert found["model"] == (set(MODELS) - OPTION_ENTRIES) | {"mlp"}
    assert {"synthetic_dense", "synthetic_dense_4gb", "synthetic_rows", "synthetic_sparse", "libsvm", "sklearn", "sphere",
            "npy", "zarr", "criteo", "synthetic_criteo", "synthetic_criteo_8gb"} == found["data"]
    assert {"duhl", "duhl_gap", "duhl_random", "duhl_sequential", "duhl_importance", "cocoa", "diana"} <= found["solver"]
    assert {"default", "duhl_svm", "cocoa", "cocoa_disk", "cocoa_svm", "diana", "distbelief", "reproduce"} <= found["experiment"]
    assert {"mlflow", "none"} == found["tracking"]


def _missing_peers(cfg):
    """The peer libraries the config's arms need that do not import here."""
    from omegaconf import OmegaConf

    from tasks.peers import PEER_SOLVERS, missing_reason

    arms = OmegaConf.to_container(cfg.experiment.arms, resolve=True) or {}
    names = {str(cfg.solver.name)} | {a.get("name") for a in arms.values() if isinstance(a, dict)}
    return sorted(n for n in names if n in PEER_SOLVERS and missing_reason(n))


@pytest.mark.parametrize("group,option", options())
def test_option_composes_and_plans(hydra_conf, group, option):
    distbelief = (group, option) in (("model", "mlp"), ("experiment", "distbelief"),
                                     ("experiment", "distbelief_model_parallel"))  # DistBelief only
    extra = ["experiment=distbelief"] if distbelief else []
    if group == "cluster" and option != "none":  # a cluster runs replicated arms only
        extra = ["solver=cocoa", *(["cluster.address=tcp://127.0.0.1:8786"] if option == "remote" else [])]
    if (group, option) == ("solver", "diana"):  # DIANA: lasso / logistic without intercept
        extra = ["model.fit_intercept=false"]
    cfg = compose("config", overrides=[f"{group}={option}", *extra])
    chosen = cfg[group] if group != "experiment" else cfg.experiment
    assert chosen is not None
    if group in ("model", "data"):
        assert option.startswith(cfg[group].name)  # synthetic_dense_4gb: synthetic_dense at out_of_core's size
    if distbelief:
        from pipelines.distbelief import plan

        assert cfg.experiment.main_arm in plan(cfg)["arms"]
        return
    if (group, option) in (("data", "npy"), ("data", "zarr")):  # the user's own file: planning asks for it by name
        what = r"a \.npy file \(data\.path=path/to/X\.npy\)" if option == "npy" else r"a zarr array \(data\.path="
        with pytest.raises(ValueError, match=rf"The 'path' parameter of data '{option}' must name {what}"):
            plan_experiment(cfg)
        return
    missing = _missing_peers(cfg)
    if missing:  # a peer library this machine lacks ({missing}): named before any data is made
        from tasks.peers import missing_reason

        reasons = "|".join(re.escape(missing_reason(n)) for n in missing)
        with pytest.raises(ValueError, match=rf"Arm '.*': ({reasons})"):
            plan_experiment(cfg)
        return
    plan = plan_experiment(cfg)  # every check that needs no data
    if option == "reproduce":  # every seed preset's run, composed and planned
        assert set(plan.configs) == set(cfg.experiment.reproduce.runs) and plan.configs["diana"].experiment.name == "diana"
        return
    assert plan.arms and plan.main_arm in plan.arms


def test_default_experiment_is_the_duhl_comparison(hydra_conf):
    cfg = compose("config")
    plan = plan_experiment(cfg)
    assert cfg.model.name == "lasso" and cfg.data.name == "synthetic_dense"
    assert set(plan.arms) == {"duhl-gap", "sequential", "random", "resident"}
    assert plan.main_arm == "duhl-gap"
    assert plan.arms["resident"]["memory_budget"] is None
    assert plan.arms["sequential"]["selection"] == "sequential"
    assert all(a["memory_budget"] == 0.25 for n, a in plan.arms.items() if n != "resident")
    assert all(a["tol"] == cfg.experiment.target_rel_gap for a in plan.arms.values())


def test_solver_override_reaches_every_arm(hydra_conf):
    plan = plan_experiment(compose("config", overrides=["solver.local_epochs=3", "device.memory_budget=0.5"]))
    assert {a["local_epochs"] for a in plan.arms.values()} == {3}
    assert plan.arms["duhl-gap"]["memory_budget"] == 0.5


def test_duhl_svm_preset(hydra_conf):
    cfg = compose("config", overrides=["experiment=duhl_svm"])
    assert cfg.model.name == "svm" and cfg.model.loss == "hinge"
    assert set(plan_experiment(cfg).arms) == {"duhl-gap", "sequential", "random", "resident"}


@pytest.mark.parametrize("override", ["data.n_samples=abc", "seed=abc",
                                      "data.nope=1", "experiment.max_time=soon", "progress=maybe"])
def test_wrong_type_or_unknown_key_fails_at_compose(hydra_conf, override):
    with pytest.raises(ConfigCompositionException):
        compose("config", overrides=[override])


def test_unknown_option_fails(hydra_conf):
    with pytest.raises(MissingConfigException, match="model/nope"):
        compose("config", overrides=["model=nope"])


@pytest.mark.parametrize("override,message", [
    ("+model.foo=1", "foo"),
    ("data.n_samples=-5", "'n_samples'.*-5"),
    ("device.memory_budget=abc", "'memory_budget'.*abc"),
    ("experiment=single solver.selection=best", "'selection'.*best"),
    ("experiment.arms.duhl-gap.selection=best", "'selection'.*best"),
    ("+experiment.arms.odd.colour=red", "colour"),
    ("experiment.main_arm=nope", "main_arm"),
    ("solver.local_epochs=x", "'local_epochs' parameter of solver must be 'auto' or an int >= 1. Got 'x'"),
    ("solver=cocoa solver.local_epochs=x", "'local_epochs' parameter of solver must be 'auto' or an int >= 1"),
    ("solver=cocoa solver.sigma=big", "'sigma' parameter of solver must be 'safe', 'data' or a float > 0"),
    ("experiment=reproduce experiment.reproduce.only=[nope]", "'only' parameter of experiment.reproduce"),
    ("data=libsvm", None),  # fine when the file exists, else names the file
])
def test_start_up_checks_name_the_bad_value(hydra_conf, override, message):
    cfg = compose("config", overrides=override.split())
    if message is None:
        try:
            plan_experiment(cfg)
        except FileNotFoundError as error:
            assert "w8a" in str(error)
        return
    with pytest.raises(Exception, match=message):
        plan_experiment(cfg)


def test_joblib_launcher_is_available_for_parallel_sweeps(hydra_conf):
    cfg = compose("config", overrides=["hydra/launcher=joblib"], return_hydra_config=True)
    assert "JoblibLauncher" in cfg.hydra.launcher._target_
    assert cfg.hydra.callbacks.mlflow_sweep._target_ == "pipelines.sweep.MlflowSweepCallback"


def test_cocoa_preset_plans_k_and_aggregation_arms_on_a_cluster(hydra_conf):
    cfg = compose("config", overrides=["experiment=cocoa"])
    plan = plan_experiment(cfg)
    assert cfg.cluster.name == "local" and plan.metric == "rel_gap"
    assert {(a["n_parts"], a["sigma"], a["compressor"] is not None) for a in plan.arms.values()} == {
        (1, "safe", False), (2, "data", False), (2, "safe", False), (4, "data", False), (4, "safe", False),
        (4, "data", True)}
    assert all(a["name"] == "cocoa" and a["memory_budget"] is None for a in plan.arms.values())
    svm = plan_experiment(compose("config", overrides=["experiment=cocoa_svm"]))  # the paper's comparison
    assert {(a["n_parts"], a["aggregation"]) for a in svm.arms.values()} == {
        (4, "adding"), (4, "averaging"), (8, "adding"), (8, "averaging")}


def test_diana_preset_plans_compressors_by_method(hydra_conf):
    cfg = compose("config", overrides=["experiment=diana"])
    plan = plan_experiment(cfg)
    assert plan.metric == "suboptimality" and plan.target == cfg.experiment.target_suboptimality
    methods = {a["method"] for a in plan.arms.values()}
    assert methods == {"gd", "diana", "no_shift", "ef21"}
    assert all(a["tol"] == cfg.experiment.target_suboptimality for a in plan.arms.values())
    assert plan_experiment(compose("config", overrides=["experiment=diana", "cluster=local"])).arms


@pytest.mark.parametrize("overrides,message", [
    (["experiment=diana", "model.fit_intercept=true"], "no intercept"),
    (["experiment=diana", "model=svm"], "'model' parameter of DIANA"),
    (["experiment=cocoa", "+experiment.arms.bad={n_parts: 0}"], "'n_parts'.*0"),
    (["experiment=diana", "+experiment.arms.bad={method: adam}"], "'method'.*adam"),
    (["experiment=diana", "+experiment.arms.bad={compressor: top_k}"], "unbiased|top_k|'k'"),
    (["experiment=cocoa", "+experiment.arms.bad={name: diana, method: gd}"], "share a progress metric|intercept"),
])
def test_distributed_arm_settings_fail_before_data(hydra_conf, overrides, message):
    with pytest.raises(ValueError, match=message):
        plan_experiment(compose("config", overrides=overrides))


@pytest.mark.parametrize("overrides", [["model=logistic", "model.penalty=l1"],
                                       ["model=logistic", "model.penalty=elasticnet", "model.l1_ratio=0.3"],
                                       ["model=logistic", "model.dual=false"], ["model=logistic", "model.dual=true"],
                                       ["model=svm", "model.penalty=l1", "model.loss=squared_hinge"]])
def test_a_classifiers_penalty_and_side_compose_and_plan(hydra_conf, overrides):
    plan = plan_experiment(compose("config", overrides=overrides))
    assert plan.model["name"] in ("logistic", "svm")  # the family: its entry is chosen on the data's shape
    assert {k: str(v).lower() for k, v in plan.model.items() if f"model.{k}" in " ".join(overrides)} == {
        o.split("=")[0][len("model."):]: o.split("=")[1] for o in overrides if o.startswith("model.")}


@pytest.mark.parametrize("overrides,message", [
    (["model=logistic", "model.penalty=l3"], "'penalty' parameter of model 'logistic' must be one of"),
    (["model=logistic", "model.dual=maybe"], "'dual' parameter of model 'logistic'"),
    (["model=svm", "model.penalty=l1"], "penalty='l1' and loss='hinge' is not supported"),  # scikit-learn's
    (["model=logistic", "model.penalty=l1", "model.dual=true"], "not supported when dual=True"),
    (["experiment=diana", "model.penalty=l1"], "'penalty' parameter of model 'logistic' must be 'l2' with DIANA"),
])
def test_a_classifiers_bad_options_fail_before_data(hydra_conf, overrides, message):
    with pytest.raises(ValueError, match=message):
        plan_experiment(compose("config", overrides=overrides))
