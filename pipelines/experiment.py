"""``python -m pipelines.experiment``: compose the config, make the data, run
every arm of the experiment, track it in MLflow and report.

    python -m pipelines.experiment                          # the default comparison
    python -m pipelines.experiment experiment=duhl_svm      # another preset
    python -m pipelines.experiment -m device.memory_budget=0.1,0.25,0.5 model=lasso,svm

Order matters: every check that needs no data runs first (one-line error, no
data made, no run opened); then one parent run holds the experiment and one
nested run per arm. See README.md for the config groups.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from pipelines import progress, report
from pipelines.config import SCHEMAS, SolverConfig, check_config, register_configs
from pipelines.tracking import (PROJECT_ROOT, SWEEP_PARENT_ENV, RoundSampler, flatten, open_tracker,
                                run_tags, stop_on_sigterm)
from tasks.cluster import connect, validate_cluster_config
from tasks.data import cache_key, load_dataset, resolve_path, validate_data_config
from tasks.distributed_arms import Placement
from tasks.distributed_arms import check_model as check_arm_model
from tasks.replicas import ClusterLost
from tasks.solve import (NoCudaDevice, build_problem, check_device, check_model, make_solver,
                         progress_metric, run_arm, warmup)

log = logging.getLogger(__name__)
register_configs()

SOLVER_KEYS = {f.name for f in dataclasses.fields(SolverConfig)}
ARM_KEYS = SOLVER_KEYS | {"memory_budget", "prefetch", "gap_kernel", "concurrency", "max_time"}  # what an arm may override


@dataclass
class Plan:
    """The checked experiment: what to make and what to run."""

    data: Any  # a tasks.data config dataclass
    model: Dict[str, Any]
    arms: Dict[str, Dict[str, Any]]  # arm name -> solver settings (constructor arguments + name)
    main_arm: str
    baselines: List[str]
    target_rel_gap: float
    metric: str = "rel_gap"  # the trace column the target applies to (suboptimality: DIANA)
    target: float = 0.0  # target_rel_gap, or experiment.target_suboptimality


def plan_experiment(cfg: DictConfig) -> Plan:
    """Every check that needs no data. Raises ValueError (one line) on a bad setting."""
    check_config(cfg)
    validate_cluster_config(cfg.cluster)
    data = validate_data_config(OmegaConf.to_container(cfg.data, resolve=True))
    cache_key(data, PROJECT_ROOT)  # a data file that is missing fails here
    model = OmegaConf.to_container(cfg.model, resolve=True)
    check_model(model)
    exp = cfg.experiment
    if not exp.target_rel_gap > 0:
        raise ValueError(f"The 'target_rel_gap' parameter of experiment must be a float > 0. Got {exp.target_rel_gap!r} instead.")
    base = {**OmegaConf.to_container(cfg.solver, resolve=True), "memory_budget": cfg.device.memory_budget,
            "prefetch": cfg.device.prefetch, "gap_kernel": cfg.device.gap_kernel,
            "concurrency": cfg.device.concurrency,
            "device": cfg.device.name, "tol": exp.target_rel_gap, "max_time": exp.max_time}
    deltas = OmegaConf.to_container(exp.arms, resolve=True) or {cfg.solver.selection: {}}
    arms = {}
    for name, delta in deltas.items():
        delta = delta or {}
        if not isinstance(delta, dict):
            raise ValueError(f"Arm '{name}' must be a mapping of solver settings. Got {delta!r} instead.")
        schema = SCHEMAS["solver"].get(delta.get("name", base["name"]), SolverConfig)  # cocoa, diana: more keys
        keys = {f.name for f in dataclasses.fields(schema)}
        unknown = sorted(set(delta) - keys - ARM_KEYS)
        if unknown:
            raise ValueError(f"Arm '{name}' has unknown key(s) {unknown}. Known: {sorted(keys | ARM_KEYS)}.")
        # Type-check the solver keys against the schema, as Hydra does for the top level.
        OmegaConf.merge(OmegaConf.structured(schema), {k: v for k, v in delta.items() if k in keys})
        arms[name] = {**base, **delta}
        if progress_metric(arms[name]) == "suboptimality":  # no duality gap (DIANA)
            arms[name]["tol"] = exp.target_suboptimality
        check_arm_model(arms[name].get("name", "duhl"), model)
        make_solver(arms[name])  # the solver's own validation
    metrics = sorted({progress_metric(s) for s in arms.values()})
    if len(metrics) > 1:
        raise ValueError(f"The arms of one experiment must share a progress metric; these mix {metrics}.")
    for role, names in (("main_arm", [exp.main_arm]), ("baselines", list(exp.baselines))):
        missing = [n for n in names if n not in arms]
        if missing:
            raise ValueError(f"The '{role}' parameter of experiment names arm(s) {missing} that are not in "
                             f"experiment.arms {sorted(arms)}.")
    if metrics == ["suboptimality"] and not exp.target_suboptimality > 0:
        raise ValueError("The 'target_suboptimality' parameter of experiment must be a float > 0. "
                         f"Got {exp.target_suboptimality!r} instead.")
    target = float(exp.target_suboptimality if metrics == ["suboptimality"] else exp.target_rel_gap)
    return Plan(data, model, arms, exp.main_arm, list(exp.baselines), float(exp.target_rel_gap), metrics[0], target)


def run_tracked_arm(cfg: DictConfig, plan: Plan, tracker: Any, arm_id: str, name: str, settings: Dict[str, Any],
                    problem: Any, csv: Path, show: bool, placement: Any = None):
    """One arm: solve while streaming sampled rows to MLflow, then its per-run numbers and CSV."""
    tracker.log_params(arm_id, {"arm": name, **settings})
    sampler = RoundSampler(cfg.tracking.points_per_decade, cfg.tracking.min_interval_s, plan.target, plan.metric)
    with progress.arm_progress(show, name, plan.target, plan.metric) as bar:
        def on_row(row: dict) -> None:
            bar(row)
            if sampler.keep(row):
                tracker.log_round(arm_id, row)

        result = run_arm(problem, settings, callback=on_row, placement=placement)
    last = result.trace.iloc[-1].to_dict()
    if sampler.last_kept is None or sampler.last_kept["round"] != last["round"]:
        tracker.log_round(arm_id, last)  # the curve ends where the run ended
    stats = report.arm_stats(result.trace, plan.target, result.status)
    tracker.log_metrics(arm_id, stats.run_metrics())
    if getattr(result, "events", None):  # replicas rerun after a worker died
        tracker.set_tags(arm_id, {"recoveries": len(result.events), "events": str(result.events)[:5000]})
    result.trace.to_csv(csv, index=False)
    tracker.log_artifact(arm_id, csv)
    log.info("arm %s: %s, %s %.2e after %.2fs", name, result.status, plan.metric, last[plan.metric], result.time_s)
    return result.trace, stats


def run_experiment(cfg: DictConfig, output_dir: Path, run_name: str = "",
                   overrides: List[str] = ()) -> Dict[str, Dict[str, float]]:
    if cfg.experiment.get("kind", "duhl") == "distbelief":  # Downpour / Sandblaster on a Dask cluster
        from pipelines.distbelief_experiment import run_distbelief_experiment

        return run_distbelief_experiment(cfg, output_dir, run_name, overrides)
    started = time.perf_counter()
    try:
        check_device(cfg.device.name)
        plan = plan_experiment(cfg)
    except NoCudaDevice as error:  # one line, exit code 2, before any run is opened
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, TypeError, OSError, OmegaConfBaseException) as error:
        message = " ".join(str(error).split("\n")[0:1])  # OmegaConf adds full_key lines
        raise SystemExit(f"Error: {message}") from None
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the table
        console = Console(width=max(console.width, 120))
    show = progress.wanted(cfg.progress)
    for noisy in ("distributed", "bokeh", "tornado"):  # Hydra's INFO logging would print every worker event
        logging.getLogger(noisy).setLevel(logging.WARNING)
    output_dir = Path(output_dir)
    tracker = open_tracker(cfg.tracking)
    tags = run_tags(cfg.device.name)
    parent_tags = {**tags, "overrides": " ".join(overrides)} if overrides else tags

    try:
        return _run_tracked(cfg, plan, tracker, tags, parent_tags, run_name, output_dir, console, show, started)
    except (ClusterLost, ConnectionError) as error:  # the runs are FAILED with the error tagged
        raise SystemExit(f"Error: {type(error).__name__}: {error}") from None


def _run_tracked(cfg, plan, tracker, tags, parent_tags, run_name, output_dir, console, show, started):
    with tracker.run(run_name or cfg.experiment.name, os.environ.get(SWEEP_PARENT_ENV), parent_tags) as parent_id:
        tracker.log_params(parent_id, flatten(OmegaConf.to_container(cfg, resolve=True)))

        with progress.data_progress(show, f"data {plan.data.name}") as update:
            dataset = load_dataset(plan.data, resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT, update)
        console.print(f"data: {plan.data.name} {dataset.shape[0]} x {dataset.shape[1]}, "
                      f"{dataset.nbytes / 1e6:.1f} MB ({dataset.path})")
        problem = build_problem(plan.model, dataset.X, dataset.y)
        warmup_s = warmup(plan.model, dataset.X, dataset.y, plan.arms)
        console.print(f"warm-up (kernel compilation): {warmup_s:.2f}s, not counted in any arm")

        traces, stats = {}, {}
        (output_dir / "traces").mkdir(parents=True, exist_ok=True)
        with connect(cfg.cluster) as client:  # None: cluster=none, everything in this process
            placement = Placement(client, dataset.path, dataset.X, dataset.y, plan.model,
                                  float(getattr(validate_cluster_config(cfg.cluster), "timeout_s", 60.0)))
            for name, settings in plan.arms.items():
                with tracker.run(name, parent_id, {**tags, "arm": name}) as arm_id:
                    traces[name], stats[name] = run_tracked_arm(cfg, plan, tracker, arm_id, name, settings, problem,
                                                                output_dir / "traces" / f"{name}.csv", show,
                                                                placement)

        console.print(report.table(stats, plan.baselines, plan.target))
        plots = report.save_plots(traces, plan.target, output_dir,
                                  f"{cfg.experiment.name}: {plan.model['name']} on {plan.data.name}, "
                                  f"budget {cfg.device.memory_budget}")
        verdict = report.verdict(stats, plan.main_arm, plan.baselines, plan.target)
        console.print(f"[bold]{verdict}[/bold]")
        console.print(f"plots: {', '.join(str(p) for p in plots)}")

        speedups = report.speedup_metrics(stats, plan.main_arm)
        tracker.set_tags(parent_id, {"verdict": verdict, "main_arm": plan.main_arm})
        for path in plots:
            tracker.log_artifact(parent_id, path)
        tracker.log_artifact(parent_id, output_dir / ".hydra", ".hydra")
        tracker.log_artifact(parent_id, output_dir / "traces", "traces")
        wall_s = time.perf_counter() - started
        overhead = tracker.seconds / wall_s
        tracker.log_metrics(parent_id, {**speedups, "warmup_s": warmup_s, "wall_s": wall_s,
                                        "tracking_overhead": overhead, "tracking_s": tracker.seconds,
                                        "tracking_setup_s": tracker.setup_s})
    if tracker.enabled:
        console.print(f"tracking: {tracker.seconds:.2f}s in MLflow calls = {overhead:.1%} of {wall_s:.1f}s "
                      f"wall time; set-up {tracker.setup_s:.1f}s (import, open the store) ({tracker.uri})")
    return {name: {**s.run_metrics(), **({"speedups": speedups} if name == plan.main_arm else {})}
            for name, s in stats.items()}


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> Dict[str, Dict[str, float]]:
    stop_on_sigterm()
    hydra_cfg = HydraConfig.get()
    # A sweep's jobs share the experiment's name: number them as Hydra does.
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    name = f"{cfg.experiment.name} #{hydra_cfg.job.num}" if in_sweep else cfg.experiment.name
    return run_experiment(cfg, Path(hydra_cfg.runtime.output_dir), name, list(hydra_cfg.overrides.task))


if __name__ == "__main__":
    main()
