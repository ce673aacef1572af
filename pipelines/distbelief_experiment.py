"""``python -m pipelines.experiment experiment=distbelief``: the DistBelief
comparison as a Hydra experiment (``experiment.kind: distbelief``).

``pipelines.experiment.run_experiment`` hands such a config here. Checks that
need no data run first (one line, exit 1, no run opened); then the cluster is
opened with ``tasks.cluster.connect``, and each arm (``experiment.arms``: an
``algo`` of ``downpour`` / ``sandblaster`` and that runner's keyword
arguments) runs on the same data and model inside a nested MLflow run whose
per-round curves (time_s, samples, train_loss, test_accuracy, staleness_mean,
staleness_max) are sent in batches. Per run: time / samples to the target
loss and accuracy, final loss and accuracy, failures (also a tag). The table
is ``pipelines.distbelief.table``.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from pipelines.config import check_config
from pipelines.distbelief import arm_row, table
from pipelines.tracking import PROJECT_ROOT, SWEEP_PARENT_ENV, flatten, open_tracker, run_tags
from solvers.distbelief.models import make_model
from tasks.cluster import connect, validate_cluster_config
from tasks.data import cache_key, load_dataset, resolve_path, validate_data_config
from tasks.distbelief_common import build_model, data_spec
from tasks.downpour import run_downpour
from tasks.sandblaster import run_sandblaster

log = logging.getLogger(__name__)

RUNNERS = {"downpour": run_downpour, "sandblaster": run_sandblaster}
# Set by the pipeline, not by an arm.
RESERVED = {"client", "spec", "model_cfg", "callback", "on_start", "on_round", "target_loss", "target_accuracy",
            "snapshot_dir"}
MODELS = ("logistic", "svm", "mlp", "ridge")
PER_RUN = ("time_to_target_s", "samples_to_target", "time_to_accuracy_s", "samples_to_accuracy",
           "final_train_loss", "final_test_accuracy", "failures")


def runner_keys(algo: str) -> set:
    params = inspect.signature(RUNNERS[algo]).parameters
    return {n for n, p in params.items() if p.kind == p.KEYWORD_ONLY} - RESERVED


def plan(cfg: DictConfig) -> Dict[str, Any]:
    """Every check that needs no data; raises ValueError (one line)."""
    check_config(cfg)
    cluster = validate_cluster_config(cfg.cluster)
    if cluster.name == "none":
        raise ValueError("The 'name' parameter of cluster must name a Dask cluster for experiment.kind="
                         "'distbelief' (e.g. cluster=local). Got 'none' instead.")
    data = validate_data_config(OmegaConf.to_container(cfg.data, resolve=True))
    cache_key(data, PROJECT_ROOT)  # a missing data file fails here
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if model["name"] not in MODELS:
        raise ValueError(f"The 'name' parameter of model must be one of {list(MODELS)} for experiment.kind="
                         f"'distbelief'. Got {model['name']!r} instead.")
    model = {k: v for k, v in model.items() if k in ("name", "C", "alpha", "hidden")}
    make_model("least_squares" if model["name"] == "ridge" else model["name"], 2,
               **({"hidden": model["hidden"]} if model["name"] == "mlp" else {}))  # the model's own checks
    db = OmegaConf.to_container(cfg.experiment.distbelief, resolve=True)
    if not 0 < db["test_fraction"] < 1:
        raise ValueError(f"The 'test_fraction' parameter of experiment.distbelief must be a float in (0, 1). "
                         f"Got {db['test_fraction']!r} instead.")
    max_time = cfg.experiment.max_time
    if max_time is None or not max_time > 0:
        raise ValueError(f"The 'max_time' parameter of experiment must be a float > 0 for experiment.kind="
                         f"'distbelief'. Got {max_time!r} instead.")
    arms = {}
    for name, arm in (OmegaConf.to_container(cfg.experiment.arms, resolve=True) or {}).items():
        arm = dict(arm or {})
        algo = arm.pop("algo", None)
        if algo not in RUNNERS:
            raise ValueError(f"The 'algo' parameter of arm '{name}' must be one of {sorted(RUNNERS)}. "
                             f"Got {algo!r} instead.")
        unknown = sorted(set(arm) - runner_keys(algo))
        if unknown:
            raise ValueError(f"Arm '{name}' has unknown key(s) {unknown}. Known: {sorted(runner_keys(algo))}.")
        shared = {k: v for k, v in db.items() if k in runner_keys(algo)}
        arms[name] = {"algo": algo, **shared, "max_time": float(max_time), "seed": int(cfg.seed), **arm}
    if not arms:
        raise ValueError("The 'arms' parameter of experiment must name at least one arm for experiment.kind="
                         "'distbelief'.")
    for role, names in (("main_arm", [cfg.experiment.main_arm]), ("baselines", list(cfg.experiment.baselines))):
        missing = [n for n in names if n not in arms]
        if missing:
            raise ValueError(f"The '{role}' parameter of experiment names arm(s) {missing} that are not in "
                             f"experiment.arms {sorted(arms)}.")
    return {"data": data, "model": model, "arms": arms, "settings": db}


def speedups(rows: Dict[str, Dict[str, Any]], main_arm: str, baselines: List[str]) -> Dict[str, float]:
    """speedup_vs_<arm>: the baseline's time to the target loss / the main arm's (both reached)."""
    main = rows[main_arm]["time_to_target_s"]
    out = {}
    for b in baselines:
        t = rows[b]["time_to_target_s"]
        if b != main_arm and not math.isnan(main) and not math.isnan(t) and main > 0:
            out[f"speedup_vs_{b}"] = t / main
    return out


def run_distbelief_experiment(cfg: DictConfig, output_dir: Path, run_name: str = "",
                              overrides: List[str] = ()) -> Dict[str, Dict[str, Any]]:
    started = time.perf_counter()
    try:
        p = plan(cfg)
    except (ValueError, TypeError, OSError, OmegaConfBaseException) as error:
        raise SystemExit(f"Error: {' '.join(str(error).splitlines()[:1])}") from None
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))
    for noisy in ("distributed", "bokeh", "tornado"):  # Hydra's INFO logging would print every worker event
        logging.getLogger(noisy).setLevel(logging.WARNING)
    output_dir = Path(output_dir)
    db = p["settings"]
    target_loss, target_accuracy = db["target_loss"], db["target_accuracy"]
    stop_at = db["stop_at_target"]
    tracker = open_tracker(cfg.tracking)
    tags = {**run_tags(cfg.device.name), "kind": "distbelief"}
    parent_tags = {**tags, "overrides": " ".join(overrides)} if overrides else tags
    rows: Dict[str, Dict[str, Any]] = {}
    with tracker.run(run_name or cfg.experiment.name, os.environ.get(SWEEP_PARENT_ENV), parent_tags) as parent_id:
        tracker.log_params(parent_id, flatten(OmegaConf.to_container(cfg, resolve=True)))
        dataset = load_dataset(p["data"], resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT)
        spec = data_spec(dataset, db["test_fraction"], db["shuffle_seed"])
        n_params = build_model(p["model"], spec.n_features, spec.n_train).n_params
        console.print(f"data: {p['data'].name} {spec.n_rows} x {spec.n_features} (train {spec.n_train}, "
                      f"shuffled split seed {spec.shuffle_seed}), model {p['model']} ({n_params} parameters)")
        (output_dir / "traces").mkdir(parents=True, exist_ok=True)
        with connect(cfg.cluster) as client:
            for name, settings in p["arms"].items():
                kwargs = dict(settings)
                algo = kwargs.pop("algo")
                if algo == "downpour":
                    kwargs["snapshot_dir"] = str(output_dir / "snapshots" / name)
                with tracker.run(name, parent_id, {**tags, "arm": name, "algo": algo}) as arm_id:
                    tracker.log_params(arm_id, {"arm": name, "algo": algo, **kwargs})
                    result = RUNNERS[algo](client, spec, p["model"], **kwargs,
                                           target_loss=target_loss if stop_at else None,
                                           target_accuracy=target_accuracy if stop_at else None,
                                           callback=lambda row, arm_id=arm_id: tracker.log_round(arm_id, row))
                    row = arm_row(name, result, target_loss, target_accuracy)
                    rows[name] = row
                    tracker.log_metrics(arm_id, {k: row[k] for k in PER_RUN if not _nan(row[k])})
                    tracker.set_tags(arm_id, {"status": result.status, "failures": _failures(result.failures),
                                              "counters": json.dumps(result.counters, default=str)[:5000]})
                    csv = output_dir / "traces" / f"{name}.csv"
                    result.trace.to_csv(csv, index=False)
                    tracker.log_artifact(arm_id, csv)
                console.print(f"{name}: {result.status} in {result.time_s:.1f}s, counters {result.counters}")
        console.print(table(list(rows.values()), target_loss, target_accuracy))
        main_arm = cfg.experiment.main_arm
        ups = speedups(rows, main_arm, list(cfg.experiment.baselines))
        for key, value in ups.items():
            console.print(f"{main_arm} reached train loss {target_loss} {value:.2f}x sooner than {key[11:]}")
        n_failures = sum(r["failures"] for r in rows.values())
        tracker.set_tags(parent_id, {"main_arm": main_arm, "failures": n_failures})
        tracker.log_artifact(parent_id, output_dir / ".hydra", ".hydra")
        wall_s = time.perf_counter() - started
        tracker.log_metrics(parent_id, {**ups, "wall_s": wall_s, "failures": n_failures,
                                        "tracking_s": tracker.seconds, "tracking_setup_s": tracker.setup_s})
    if tracker.enabled:
        console.print(f"tracking: {tracker.seconds:.2f}s in MLflow calls of {wall_s:.1f}s wall time ({tracker.uri})")
    return rows


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _failures(failures: List[dict]) -> str:
    if not failures:
        return "none"
    return "; ".join(f"{f['time_s']:.1f}s {f['what']}" for f in failures)[:5000]
