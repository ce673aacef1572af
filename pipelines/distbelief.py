"""A DistBelief experiment (``experiment.kind: distbelief``; Dean et al. 2012, Fig. 4-5):
single-replica SGD, Downpour with a fixed rate, Downpour with Adagrad, Sandblaster
L-BFGS on the same data and model: time and samples to a target training loss
and to a target test accuracy. Model-parallel arms (``algo: model_parallel``, Fig. 3:
an MLP's layers cut across K workers per replica) add a step-time table
(:mod:`pipelines.distbelief_steps`); an arm's ``model`` changes the model for it alone.

Fair rates: with ``experiment.distbelief.lr_grid`` set, every Downpour arm that does
not fix its own ``lr`` is tuned on that grid with the same budget (``tune_samples``
minibatch samples per rate over all replicas; the rate with the lowest training
loss at the end wins), then run. An arm's ``kill_worker_after_s`` ends the process of a worker that holds a
replica (not the parameter server) that many seconds after the replicas start:
its nanny restarts it and Downpour must carry on.

:func:`plan` does every check that needs no data (one line, no run opened);
:func:`run` opens the cluster, runs each arm (``experiment.arms``: an ``algo``
of ``downpour`` / ``sandblaster`` / ``model_parallel`` and that runner's keyword arguments) in a
nested MLflow run with its curves (time_s, samples, train_loss, test_accuracy,
staleness_mean, staleness_max; model-parallel arms also step_s, samples_per_s, bytes_sent),
and reports with ``pipelines.report``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from pipelines import distbelief_steps, report, ui
from pipelines.config import check_config
from pipelines.deploy import arm_on, cluster_and_data
from pipelines.tracking import PROJECT_ROOT, SWEEP_PARENT_ENV, arm_run_name, config_params, flatten, shown_uri
from solvers.distbelief.models import MLP_KEYS, make_model
from tasks.cluster import restore_workers, validate_cluster_config
from tasks.data import cache_key, load_dataset, resolve_path, validate_data_config
from tasks.distbelief.common import build_model, data_spec, live_workers
from tasks.distbelief.downpour import run_downpour
from tasks.distbelief.model_parallel import check_settings as check_model_parallel
from tasks.distbelief.model_parallel import run_model_parallel
from tasks.distbelief.sandblaster import run_sandblaster
from tasks.problems import describe_labels

RUNNERS = {"downpour": run_downpour, "sandblaster": run_sandblaster, "model_parallel": run_model_parallel}
# Set by the pipeline, not by an arm.
RESERVED = {"client", "spec", "model_cfg", "callback", "on_start", "on_round", "target_loss", "target_accuracy",
            "snapshot_dir", "parts"}
MODELS = ("logistic", "svm", "mlp", "ridge")
UNUSED = ("solver", "device", "experiment.target_rel_gap", "experiment.target_suboptimality")  # not params here
# arm keys the pipeline handles; ``model``: this arm's changes to the model config (another size)
PIPELINE_KEYS = {"downpour": {"kill_worker_after_s", "model"}, "sandblaster": {"model"}, "model_parallel": {"model"}}
MODEL_KEYS = ("name", "C", "alpha", *MLP_KEYS)


def _checked_model(model: Dict[str, Any], owner: str) -> Dict[str, Any]:
    """The model config's keys DistBelief uses, after the model's own checks (one line)."""
    model = {k: v for k, v in model.items() if k in MODEL_KEYS}
    extra = {k: model[k] for k in MLP_KEYS if k in model} if model["name"] == "mlp" else {}
    try:
        make_model("least_squares" if model["name"] == "ridge" else model["name"], 2, **extra)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}" if owner else str(error)) from None
    return model


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
    if getattr(cluster, "data_access", None) == "disk":
        raise ValueError("The 'data_access' parameter of cluster 'disk' keeps CoCoA+'s shards on the workers' disks; "
                         "DistBelief's replicas read rows in RAM: use auto, mmap or scatter. Got 'disk' instead.")
    data = validate_data_config(OmegaConf.to_container(cfg.data, resolve=True))
    cache_key(data, PROJECT_ROOT)  # a missing data file fails here
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if model["name"] not in MODELS:
        raise ValueError(f"The 'name' parameter of model must be one of {list(MODELS)} for experiment.kind="
                         f"'distbelief'. Got {model['name']!r} instead.")
    model = _checked_model(model, "")
    db = OmegaConf.to_container(cfg.experiment.distbelief, resolve=True)
    max_time = cfg.experiment.max_time
    if max_time is None:
        raise ValueError("The 'max_time' parameter of experiment must be a float > 0 for experiment.kind="
                         "'distbelief'. Got None instead.")
    arms = {}
    for name, arm in (OmegaConf.to_container(cfg.experiment.arms, resolve=True) or {}).items():
        arm = dict(arm or {})
        algo = arm.pop("algo", None)
        if algo not in RUNNERS:
            raise ValueError(f"The 'algo' parameter of arm '{name}' must be one of {sorted(RUNNERS)}. "
                             f"Got {algo!r} instead.")
        known = runner_keys(algo) | PIPELINE_KEYS[algo]
        unknown = sorted(set(arm) - known)
        if unknown:
            raise ValueError(f"Arm '{name}' has unknown key(s) {unknown}. Known: {sorted(known)}.")
        changes = arm.pop("model", None) or {}
        if not isinstance(changes, dict) or "name" in changes:
            raise ValueError(f"The 'model' parameter of arm '{name}' must be a mapping of model settings to change "
                             f"(not the model's name). Got {changes!r} instead.")
        arm_model = _checked_model({**model, **changes}, f"arm '{name}'")
        if algo == "model_parallel":
            if arm_model["name"] != "mlp":
                raise ValueError(f"Arm '{name}' (model_parallel) cuts an MLP's layers: model=mlp. "
                                 f"Got model {arm_model['name']!r} instead.")
            try:
                check_model_parallel(arm_model, **arm)
            except ValueError as error:
                raise ValueError(f"arm '{name}': {error}") from None
        shared = {k: v for k, v in db.items() if k in runner_keys(algo)}
        tune = algo == "downpour" and bool(db["lr_grid"]) and "lr" not in arm
        arms[name] = {"algo": algo, **shared, "max_time": float(max_time), "seed": int(cfg.seed), **arm,
                      **({"tune_lr": list(db["lr_grid"])} if tune else {}),
                      **({"model": arm_model} if changes else {})}
    if not arms:
        raise ValueError("The 'arms' parameter of experiment must name at least one arm for experiment.kind="
                         "'distbelief'.")
    for role, names in (("main_arm", [cfg.experiment.main_arm]), ("baselines", list(cfg.experiment.baselines))):
        missing = [n for n in names if n not in arms]
        if missing:
            raise ValueError(f"The '{role}' parameter of experiment names arm(s) {missing} that are not in "
                             f"experiment.arms {sorted(arms)}.")
    return {"data": data, "model": model, "arms": arms, "settings": db}


def table(loss: Dict[str, report.ArmStats], accuracy: Dict[str, report.ArmStats], failures: Dict[str, int],
          target_loss, target_accuracy) -> Table:
    t = Table(title=f"DistBelief: to train loss <= {target_loss} / test accuracy >= {target_accuracy} "
                    "('-': not reached)")
    for c in ("arm", "status", "time to loss (s)", "samples to loss", "time to acc. (s)", "samples to acc.",
              "final loss", "final acc.", "run (s)", "failures"):
        t.add_column(c, justify="left" if c in ("arm", "status") else "right")

    def f(v, fmt):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    for name, s in loss.items():
        a = accuracy[name]
        t.add_row(name, s.status, f(s.time_to_target_s, ".2f"), f(s.samples_to_target, ".0f"),
                  f(a.time_to_target_s, ".2f"), f(a.samples_to_target, ".0f"), f(s.final, ".4f"),
                  f(a.final, ".4f"), f(s.time_s, ".1f"), str(failures[name]))
    return t


def _failures(failures: List[dict]) -> str:
    if not failures:
        return "none"
    return "; ".join(f"{f['time_s']:.1f}s {f['what']}" for f in failures)[:5000]


def _kill_a_replica_worker(client, info: Dict[str, Any], after_s: float, killed: List[str],
                           timers: List[threading.Timer]) -> None:
    """``after_s`` seconds from now, end the process of a worker holding a replica but not the
    parameter server (its nanny restarts it); a timer thread, so Downpour's driver keeps going
    (the caller cancels it if the arm ends first)."""
    victims = sorted({w for w in info["replicas"].values() if w != info["ps_worker"]})

    def kill() -> None:
        if victims:
            killed.append(victims[0])
            try:  # the worker dies before it can answer
                client.run(os._exit, 1, workers=victims[:1], on_error="ignore")
            except Exception:  # noqa: BLE001 - a closed connection is the expected answer
                pass

    timers.append(threading.Timer(after_s, kill))
    timers[-1].start()


def tune_lr(client, spec, model, kwargs: Dict[str, Any], grid: List[float], samples: int, seen: Dict,
            parts: Any = None) -> tuple:
    """(best rate, {rate: training loss after ``samples``}) for one Downpour arm's settings: each rate
    gets the same budget, ``samples`` minibatch samples over all its replicas (counted in samples, not
    seconds, so that a busy machine does not pick the rate), and the lowest training loss at its end
    wins. Arms with the same settings (apart from lr) share one tuning."""
    key = json.dumps({k: v for k, v in kwargs.items() if k not in ("lr", "snapshot_dir", "max_time")},
                     sort_keys=True, default=str)
    if key not in seen:
        replicas = kwargs.get("n_replicas") or len(live_workers(client))
        steps = max(1, math.ceil(samples / (kwargs.get("batch_size", 32) * replicas)))
        losses = {}
        for lr in grid:
            trial = run_downpour(client, spec, model, **{**kwargs, "lr": lr, "max_steps": steps, "snapshot_dir": None},
                                 parts=parts)
            loss = float(trial.trace["train_loss"].iloc[-1])  # evaluated once every replica has stopped
            losses[lr] = loss if math.isfinite(loss) else math.inf
        seen[key] = (min(losses, key=losses.get), losses)
    return seen[key]


def _stats(trace, target, status, metric) -> report.ArmStats:
    # a target not set is never reached: below any loss, above any accuracy
    unset = math.inf if metric in report.RISING else -math.inf
    return report.arm_stats(trace, unset if target is None else target, status, metric)


def run(cfg: DictConfig, p: Dict[str, Any], tracker: Any, tags: Dict[str, str], run_name: str,
        output_dir: Path, console: Any, started: float) -> Dict[str, Dict[str, Any]]:
    db = p["settings"]
    target_loss, target_accuracy = db["target_loss"], db["target_accuracy"]
    stop_at = db["stop_at_target"]
    loss: Dict[str, report.ArmStats] = {}
    accuracy: Dict[str, report.ArmStats] = {}
    failures: Dict[str, int] = {}
    main_arm, baselines = cfg.experiment.main_arm, list(cfg.experiment.baselines)
    colours = ui.arm_colours(p["arms"], main_arm, baselines)
    data_model = flatten({"model": p["model"], "data": dataclasses.asdict(p["data"])})
    extras: Dict[str, dict] = {}
    tuned: Dict[str, tuple] = {}
    with tracker.run(run_name, os.environ.get(SWEEP_PARENT_ENV), tags["parent"]) as parent_id:
        # the groups DistBelief uses: not solver/ or device/, not the GLM targets
        tracker.log_params(parent_id, config_params(OmegaConf.to_container(cfg, resolve=True), UNUSED))
        dataset = load_dataset(p["data"], resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT)
        labels = describe_labels(p["model"]["name"], dataset.y)
        if labels:
            console.print(f"labels: {labels}")
            tracker.set_tags(parent_id, {"labels": labels})
        spec = data_spec(dataset, db["test_fraction"], db["shuffle_seed"])
        n_params = build_model(p["model"], spec.n_features, spec.n_train).n_params
        console.print(f"data: {p['data'].name} {spec.n_rows} x {spec.n_features} (train {spec.n_train}, "
                      f"shuffled split seed {spec.shuffle_seed}), model {p['model']} ({n_params:,} parameters)")
        for name, settings in p["arms"].items():
            if "model" in settings:
                arm_params = build_model(settings["model"], spec.n_features, spec.n_train).n_params
                console.print(f"{name}: model {settings['model']} ({arm_params:,} parameters)")
        (output_dir / "traces").mkdir(parents=True, exist_ok=True)
        with cluster_and_data(cfg.cluster, dataset.path, console, output_dir) as (client, parts):
            tracker.set_tags(parent_id, {"data_access": parts.access})
            n_workers = len(live_workers(client))
            for name, settings in p["arms"].items():
                kwargs = dict(settings)
                algo = kwargs.pop("algo")
                grid, kill_after = kwargs.pop("tune_lr", None), kwargs.pop("kill_worker_after_s", None)
                model = kwargs.pop("model", p["model"])
                extras[name] = {}
                if algo != "sandblaster" and parts.access == "mmap":  # shard snapshots need a shared filesystem
                    kwargs["snapshot_dir"] = str(output_dir / "snapshots" / name)
                arm_tags = {**tags["arm"], "arm": name, "algo": algo, "mlflow.runColor": colours[name]}
                with tracker.run(arm_run_name(name, run_name), parent_id, arm_tags) as arm_id, \
                        arm_on(client, parts, tracker, arm_id):
                    if grid:
                        kwargs["lr"], losses = tune_lr(client, spec, model, kwargs, grid, db["tune_samples"],
                                                       tuned, parts)
                        extras[name].update(lr=kwargs["lr"], lr_losses=losses)
                        tracker.set_tags(arm_id, {"lr_tuning": ", ".join(f"{k:g}: {v:.4f}" for k, v in losses.items())
                                                  + f" -> {kwargs['lr']:g} (training loss after "
                                                  f"{db['tune_samples']} samples)"})
                        console.print(f"{name}: lr {kwargs['lr']:g} of {grid} (training loss after "
                                      f"{db['tune_samples']} samples: {', '.join(f'{v:.3f}' for v in losses.values())})")
                    killed: List[str] = []
                    timers: List[threading.Timer] = []
                    if kill_after is not None:
                        kwargs["on_start"] = lambda info, after=kill_after: _kill_a_replica_worker(
                            client, info, after, killed, timers)
                    tracker.log_params(arm_id, {"arm": name, "algo": algo, **{k: v for k, v in kwargs.items()
                                                                             if k != "on_start"},
                                                **({"kill_worker_after_s": kill_after} if kill_after else {}),
                                                **data_model, **flatten({"model": model})})
                    result = RUNNERS[algo](client, spec, model, **kwargs, parts=parts,
                                           target_loss=target_loss if stop_at else None,
                                           target_accuracy=target_accuracy if stop_at else None,
                                           callback=lambda row, arm_id=arm_id: tracker.log_round(arm_id, row))
                    for timer in timers:  # an arm that ended before its kill: nothing to kill any more
                        timer.cancel()
                    loss[name] = _stats(result.trace, target_loss, result.status, "train_loss")
                    accuracy[name] = _stats(result.trace, target_accuracy, result.status, "test_accuracy")
                    failures[name] = len(result.failures)
                    extras[name].update(failures=list(result.failures), killed=killed, counters=result.counters,
                                        run_id=arm_id)
                    if killed:  # the next arm starts with every worker back (the nanny restarts it)
                        restore_workers(client, n_workers, timeout_s=60)  # (or a fresh one if it is not)
                    metrics = {**loss[name].run_metrics(), "final_test_accuracy": accuracy[name].final,
                               "failures": failures[name]}
                    if accuracy[name].reached:
                        metrics.update(time_to_accuracy_s=accuracy[name].time_to_target_s,
                                       samples_to_accuracy=accuracy[name].samples_to_target)
                    if algo == "model_parallel":
                        metrics.update(distbelief_steps.run_metrics(result.counters))
                    tracker.log_metrics(arm_id, metrics)
                    tracker.set_tags(arm_id, {"status": result.status, "failures": _failures(result.failures),
                                              "counters": json.dumps(result.counters, default=str)[:5000]})
                    csv = output_dir / "traces" / f"{name}.csv"
                    result.trace.to_csv(csv, index=False)
                    tracker.log_artifact(arm_id, csv)
                console.print(f"{name}: {result.status} in {result.time_s:.1f}s, counters {result.counters}")
        summary = table(loss, accuracy, failures, target_loss, target_accuracy)
        console.print(summary)
        steps = distbelief_steps.step_rows(p["arms"], extras)
        steps_table = distbelief_steps.table(steps) if steps else None
        if steps_table is not None:
            console.print(steps_table)
            for row in steps:  # each model-parallel arm against its one-partition arm, on its own run
                if row["speedup"] is not None:
                    tracker.log_metrics(row["run_id"], {f"speedup_vs_{row['baseline']}": row["speedup"]})
        ups = {k: v for k, v in report.speedup_metrics(loss, main_arm).items()
               if k[len("speedup_vs_"):] in baselines}
        for key, value in ups.items():
            console.print(f"{main_arm} reached train loss {target_loss} {value:.2f}x sooner than {key[11:]}")
        if target_loss is not None:
            verdict = report.verdict(loss, main_arm, baselines, target_loss)
        elif steps:
            verdict = distbelief_steps.verdict(steps)
        else:
            verdict = f"No target_loss set: {main_arm} and its baselines ran {cfg.experiment.max_time}s each."
        n_failures = sum(failures.values())
        view_id = None
        if tracker.enabled:
            curves = ["train_loss", "test_accuracy", *(distbelief_steps.CURVES if steps else ())]
            columns = ["time_to_target_s", "time_to_accuracy_s", "final_train_loss", "final_test_accuracy",
                       *(distbelief_steps.COLUMNS if steps else ())]
            view_id = ui.save_arms_view(tracker, parent_id, ui.view_name(run_name), curves, columns, ["algo"])
            ui.save_comparisons_view(tracker, [f"speedup_vs_{b}" for b in baselines])
        tables = report.markdown(summary) + (f"\n\n{report.markdown(steps_table)}" if steps_table is not None else "")
        note = ui.note(verdict, tables, tracker.experiment_id, view_id)
        (output_dir / "comparison.md").write_text(f"# {run_name}: DistBelief, {p['model']['name']} on "
                                                  f"{p['data'].name}\n\n{note}\n")
        texts = {k: v for k, v in report.speedup_texts(loss, main_arm).items() if k in ups}
        tracker.set_tags(parent_id, {"main_arm": main_arm, "failures": n_failures, "verdict": verdict,
                                     "mlflow.note.content": note, "speedups": json.dumps(texts)})
        tracker.log_artifact(parent_id, output_dir / "comparison.md")
        tracker.log_artifact(parent_id, output_dir / ".hydra", ".hydra")
        wall_s = time.perf_counter() - started
        tracker.log_metrics(parent_id, {**{k: report.significant(v) for k, v in ups.items()}, "wall_s": wall_s, "failures": n_failures,
                                        "tracking_s": tracker.seconds, "tracking_setup_s": tracker.setup_s})
    if tracker.enabled:
        console.print(f"tracking: {tracker.seconds:.2f}s in MLflow calls of {wall_s:.1f}s wall time ({shown_uri(tracker.uri)})")
        ui.print_links(console, tracker, parent_id, view_id, "the comparison")
    return report.RunResults({name: {**loss[name].run_metrics(), "final_test_accuracy": accuracy[name].final,
                                     "failures": failures[name], "status": loss[name].status} for name in loss},
                             run_id=parent_id, stats=loss, extras=extras, accuracy=accuracy, settings=p["arms"],
                             target=target_loss)
