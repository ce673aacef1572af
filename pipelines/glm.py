"""A GLM experiment (``experiment.kind: glm``): DuHL, peer and distributed (CoCoA+,
DIANA) arms on one dataset and model, each to the same target, then the report.

:func:`plan` does every check that needs no data (one-line error, no data made,
no run opened); :func:`run` makes the data, compiles, runs each arm in a nested
MLflow run and reports (``pipelines.experiment`` calls both).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import scipy.sparse as sp
from omegaconf import DictConfig, OmegaConf

from pipelines import progress, report, ui
from pipelines.config import SolverConfig, check_config, solver_schema
from pipelines.deploy import arm_on, cluster_and_data
from pipelines.tracking import (PROJECT_ROOT, SWEEP_PARENT_ENV, RoundSampler, arm_run_name, config_params, flatten, shown_uri,
                                relative)
from solvers.duhl.budget import holds_part
from solvers.glm.models import get_model
from solvers.glm.models.sides import feature_coupling, weighs_coupling
from tasks.arms import (is_distributed, make_solver, prepare_on_disk, progress_metric, run_arm, runs_on_workers,
                        warm_workers, warmup)
from tasks.cluster import validate_cluster_config
from tasks.data import BYTE_COUNTED, cache_key, load_dataset, resolve_path, validate_data_config
from tasks.data.shards import MAKES_BY_RANGE
from tasks.distributed_glm.arms import Placement, cocoa_shards
from tasks.distributed_glm.arms import check_model as check_arm_model
from tasks.peers import missing_reason
from tasks.problems import build_problem, describe_labels, resolve_model
from tasks.resources import ArmResources, WorkerResources, cold_read_bandwidth

log = logging.getLogger(__name__)

SOLVER_KEYS = {f.name for f in dataclasses.fields(SolverConfig)}
DEVICE_SETTINGS = ("memory_budget", "host_budget", "prefetch", "gap_kernel", "concurrency")
ARM_KEYS = SOLVER_KEYS | set(DEVICE_SETTINGS) | {"max_time"}  # what any arm may override


@dataclass
class Plan:
    """The checked experiment: what to make and what to run."""

    data: Any  # a tasks.data config dataclass
    model: Dict[str, Any]
    arms: Dict[str, Dict[str, Any]]  # arm name -> solver settings (constructor arguments + name)
    main_arm: str
    baselines: List[str]
    metric: str = "rel_gap"  # the trace column the target applies to (suboptimality: DIANA)
    target: float = 0.0  # target_rel_gap, or experiment.target_suboptimality


def plan(cfg: DictConfig) -> Plan:
    """Every check that needs no data. Raises ValueError (one line) on a bad setting."""
    check_config(cfg)
    validate_cluster_config(cfg.cluster)
    data = validate_data_config(OmegaConf.to_container(cfg.data, resolve=True))
    cache_key(data, PROJECT_ROOT)  # a data file that is missing fails here
    model = OmegaConf.to_container(cfg.model, resolve=True)
    get_model(model["name"])  # a GLM of the registry (mlp is DistBelief's)
    resolve_model(model, 1, 1)  # a classifier's options (penalty, dual) checked now; the side is chosen on the data
    exp = cfg.experiment
    base = {**OmegaConf.to_container(cfg.solver, resolve=True),
            **{key: cfg.device[key] for key in DEVICE_SETTINGS},
            "device": cfg.device.name, "tol": exp.target_rel_gap, "max_time": exp.max_time}
    deltas = OmegaConf.to_container(exp.arms, resolve=True) or {default_arm(cfg.solver): {}}
    arms = {}
    for name, delta in deltas.items():
        delta = delta or {}
        if not isinstance(delta, dict):
            raise ValueError(f"Arm '{name}' must be a mapping of solver settings. Got {delta!r} instead.")
        schema = solver_schema(delta.get("name", base["name"]))  # cocoa, diana: more keys
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
        solver = make_solver(arms[name])  # the solver's own validation
        missing = missing_reason(solver.library) if hasattr(solver, "library") else None
        if missing:  # a peer library not installed: say so before any data is made
            raise ValueError(f"Arm '{name}': {missing}")
    check_disk_arms(validate_cluster_config(cfg.cluster), data, arms)
    metrics = sorted({progress_metric(s) for s in arms.values()})
    if len(metrics) > 1:
        raise ValueError(f"The arms of one experiment must share a progress metric; these mix {metrics}.")
    main_arm = exp.main_arm or next(iter(arms))  # null: the first (experiment=single: the only) arm
    for role, names in (("main_arm", [main_arm]), ("baselines", list(exp.baselines))):
        missing = [n for n in names if n not in arms]
        if missing:
            raise ValueError(f"The '{role}' parameter of experiment names arm(s) {missing} that are not in "
                             f"experiment.arms {sorted(arms)}.")
    target = float(exp.target_suboptimality if metrics == ["suboptimality"] else exp.target_rel_gap)
    return Plan(data, model, arms, main_arm, list(exp.baselines), metrics[0], target)


DENSE_KINDS = ("synthetic_dense", "synthetic_rows", "sklearn", "npy", "zarr")  # data whose cache holds a dense X.npy


def check_disk_arms(cluster: Any, data: Any, arms: Dict[str, Dict[str, Any]]) -> None:
    """The checks of arms on disk and of data_access=disk that need no data (one-line ValueError)."""
    disk = getattr(cluster, "data_access", None) == "disk"
    cocoa_on_disk = [n for n, s in arms.items() if s.get("name") == "cocoa" and s.get("host_budget") is not None]
    if cluster.name != "none" and cocoa_on_disk and not disk:
        raise ValueError(f"Arm '{cocoa_on_disk[0]}': CoCoA+ with a host_budget trains each part from its shard on its "
                         "worker's disk: set cluster.data_access=disk.")
    if not (disk or cocoa_on_disk):
        return
    if data.name not in DENSE_KINDS:
        raise ValueError(f"Shards on disk hold dense data today (data {list(DENSE_KINDS)}); data '{data.name}' is kept "
                         "in a sparse store, whose shards come with DuHL's sparse disk tier. Use data_access auto, mmap or "
                         "scatter, or no host_budget for CoCoA+.")
    if disk:
        diana = [n for n, s in arms.items() if s.get("name") == "diana"]
        if diana:
            raise ValueError(f"Arm '{diana[0]}': DIANA's workers hold their rows in RAM; cluster.data_access=disk keeps "
                             "CoCoA+'s shards on the workers' disks: use auto, mmap or scatter.")
        if cluster.shard_source == "maker" and data.name not in MAKES_BY_RANGE:
            raise ValueError(f"The 'shard_source' parameter 'maker' of cluster makes shards of {list(MAKES_BY_RANGE)} data "
                             f"only. Got data '{data.name}' instead: use stream (or file on a shared file system).")


def dual_only(plan: Plan, dataset: Any) -> Optional[str]:
    """Why this run needs a classifier's dual side where both exist (dual="auto" then takes it), or
    None: CoCoA+ arms partition a classifier's samples unless told otherwise (its dual; model.dual=false
    or an L1 penalty partitions its features), DIANA solves its own primal; a sparse store on disk serves
    the dual's CSR rows (the primal reads a dense feature-major X.npy from disk). (A main arm
    whose memory budget holds part of the data lets dual="auto" weigh the features' coupling:
    :func:`budget_coupling`.)"""
    kinds = {s.get("name") for s in plan.arms.values()}
    why = {"cocoa": "CoCoA+ partitions a classifier's samples unless model.dual=false (its features)",
           "diana": "DIANA's L2 logistic regression is the registry's 'logistic' (it solves it in the primal itself)"}
    reasons = [text for kind, text in why.items() if kind in kinds]
    if reasons:
        return "; ".join(reasons)
    if dataset.store is not None and any(s.get("host_budget") is not None for s in plan.arms.values()):
        return "the sparse store on disk is read by rows (samples as coordinates)"
    return None


def budget_coupling(plan: Plan, dataset: Any) -> Optional[float]:
    """The data's feature coupling where the main arm (a DuHL arm) holds part of the data in its
    memory budget, for dual="auto" to weigh there (solvers.glm.models.sides): the L2 logistic
    regression's, the one classifier it weighs; None otherwise (no pass over the data)."""
    main = plan.arms[plan.main_arm]
    model = plan.model
    if (weighs_coupling(model.get("name"), model.get("penalty", "l2"), model.get("dual", "auto"))
            and main.get("name", "duhl") == "duhl" and holds_part(main.get("memory_budget"), dataset.nbytes)):
        return feature_coupling(dataset.X)
    return None


def default_arm(solver: Any) -> str:
    """The name of the one arm of an experiment without arms: duhl-<selection>, or the solver's name."""
    return f"duhl-{solver.selection}" if solver.name == "duhl" else str(solver.name)


def arm_params(name: str, settings: Dict[str, Any], plan: Plan) -> Dict[str, str]:
    """An arm's settings under the config's own keys (solver.*, device.*, experiment.*), with
    the data and the model, so a filter such as params.`model.name` = 'svm' selects arms too."""
    groups: Dict[str, Dict[str, Any]] = {"model": plan.model, "data": dataclasses.asdict(plan.data),
                                         "solver": {}, "device": {}, "experiment": {}}
    for key, value in settings.items():
        if key == "device":
            groups["device"]["name"] = value
        elif key in DEVICE_SETTINGS:
            groups["device"][key] = value
        elif key == "tol":
            groups["experiment"][f"target_{plan.metric}"] = value
        elif key == "max_time":
            groups["experiment"]["max_time"] = value
        else:
            groups["solver"][key] = value
    return {"arm": name, **flatten(groups)}


def parent_params(cfg: DictConfig, plan: Plan) -> Dict[str, str]:
    """The config groups a GLM experiment uses: not DistBelief's settings, not the other target."""
    unused = "target_rel_gap" if plan.metric == "suboptimality" else "target_suboptimality"
    return config_params(OmegaConf.to_container(cfg, resolve=True), ("experiment.distbelief", f"experiment.{unused}"))


def run_tracked_arm(cfg: DictConfig, plan: Plan, tracker: Any, arm_id: str, name: str, settings: Dict[str, Any],
                    problem: Any, csv: Path, show: bool, placement: Any = None):
    """One arm: solve while streaming sampled rows to MLflow, then its per-run numbers and CSV."""
    tracker.log_params(arm_id, arm_params(name, settings, plan))
    sampler = RoundSampler(cfg.tracking.points_per_decade, cfg.tracking.min_interval_s, plan.target, plan.metric)
    with progress.arm_progress(show, name, plan.target, plan.metric) as bar:
        def on_row(row: dict) -> None:
            bar(row)
            if sampler.keep(row):
                tracker.log_round(arm_id, row)

        # the workers' counters only for an arm that runs there (one that runs here reads and grows here)
        with ArmResources() as used, WorkerResources(placement.client if runs_on_workers(settings, placement)
                                                     else None) as workers:
            result = run_arm(problem, settings, callback=on_row, placement=placement)
    last = result.trace.iloc[-1].to_dict()
    if sampler.last_kept is None or sampler.last_kept["round"] != last["round"]:
        tracker.log_round(arm_id, last)  # the curve ends where the run ended
    stats = report.arm_stats(result.trace, plan.target, result.status, plan.metric)
    tracker.log_metrics(arm_id, {**stats.run_metrics(), **used.metrics(), **workers.metrics()})
    if "bytes_disk" in result.trace:  # the trace's count of disk bytes beside the operating system's
        log.info("arm %s: read %.3f GB from disk by the trace, %.3f GB by /proc/self/io; peak RSS +%.3f GB",
                 name, result.trace["bytes_disk"].iloc[-1] / 1e9, used.os_read_bytes / 1e9, used.peak_rss_delta / 1e9)
    notes = list(getattr(result, "notes", []) or [])  # what the solver chose or adjusted (sigma', H)
    tracker.set_tags(arm_id, {"status": result.status, **({"notes": "; ".join(notes)[:5000]} if notes else {})})
    for note in notes:
        log.info("arm %s: %s", name, note)
    if getattr(result, "events", None):  # replicas rerun after a worker died
        tracker.set_tags(arm_id, {"recoveries": len(result.events), "events": str(result.events)[:5000]})
    result.trace.to_csv(csv, index=False)
    tracker.log_artifact(arm_id, csv)
    log.info("arm %s: %s, %s %.2e after %.2fs", name, result.status, plan.metric, last[plan.metric], result.time_s)
    if getattr(result, "shards", None):  # parts on disk: where each part's shard is at the end
        tracker.set_tags(arm_id, {"shards": json.dumps(result.shards)[:5000]})
        for row in result.shards:
            log.info("arm %s: part %d's shard %s on %s%s", name, row["part"], row.get("shard", row.get("path")),
                     row.get("home", row.get("host")), "" if row.get("on_home", True) else " (missing there!)")
    extras = {"notes": list(getattr(result, "notes", []) or []), **used.metrics(), **workers.metrics(),
              **{k: getattr(result, k) for k in ("sigma", "sigma_s", "events") if hasattr(result, k)}}
    return result.trace, stats, extras


def run(cfg: DictConfig, plan: Plan, tracker: Any, tags: Dict[str, str], run_name: str, output_dir: Path,
        console: Any, started: float) -> Dict[str, Dict[str, float]]:
    show = progress.wanted(cfg.progress)
    colours = ui.arm_colours(plan.arms, plan.main_arm, plan.baselines)
    with tracker.run(run_name, os.environ.get(SWEEP_PARENT_ENV), tags["parent"]) as parent_id:
        tracker.log_params(parent_id, parent_params(cfg, plan))

        with progress.data_progress(show, f"data {plan.data.name}", plan.data.name in BYTE_COUNTED) as update:
            dataset = load_dataset(plan.data, resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT, update)
        console.print(f"data: {plan.data.name} {dataset.shape[0]} x {dataset.shape[1]}, "
                      f"{dataset.nbytes / 1e6:.1f} MB ({relative(dataset.path)}; {dataset.verified} "
                      f"checked in {dataset.verify_s:.2f}s)")
        # a classifier's side (primal or dual: model.penalty, model.dual) on the data's shape
        model, side = resolve_model(plan.model, *dataset.shape, dual_for=dual_only(plan, dataset),
                                    coupling=budget_coupling(plan, dataset))
        if side is not None:
            console.print(f"model: {model['name']} ({side})")
            tracker.set_tags(parent_id, {"model_entry": model["name"], "formulation": side})
        plan = dataclasses.replace(plan, model=model)
        labels = describe_labels(plan.model["name"], dataset.y)
        if labels:
            console.print(f"labels: {labels}")
            tracker.set_tags(parent_id, {"labels": labels})
        on_disk = [name for name, s in plan.arms.items() if s.get("host_budget") is not None]
        # arms that read the data from disk need no copy in RAM: none is built when every arm does
        problem = build_problem(plan.model, dataset.X, dataset.y) if len(on_disk) < len(plan.arms) else None
        what = f"{plan.model['name']}, {dataset.X.dtype}{' sparse' if sp.issparse(dataset.X) else ' dense'}"
        with console.status(f"warm-up: compiling the kernels the arms use ({what}; a first run only, "
                            "then loaded from Numba's cache)"):
            warm = warmup(plan.model, dataset.X, dataset.y, plan.arms)
        warmup_s = warm.seconds
        if warm.compiled:
            console.print(f"warm-up: compiled the kernels for {what} in {warmup_s:.2f}s (a first run; Numba's cache "
                          "keeps them for the next), not counted in any arm")
        else:
            console.print(f"warm-up: the kernels for {what} loaded from Numba's cache in {warmup_s:.2f}s, not counted "
                          "in any arm")
        if on_disk:
            # a sparse dataset's store (LIBSVM, Criteo) has no X.npy: its entries are read instead
            probe = dataset.path / "X.npy" if dataset.store is None else dataset.path
            gbps = cold_read_bandwidth(probe)
            tracker.set_tags(parent_id, {"disk_read_gbps": f"{gbps:.2f}"})
            what = "X.npy" if dataset.store is None else f"the sparse store {dataset.store.name}"
            console.print(f"disk: {gbps:.2f} GB/s, one cold read of up to 1 GB of {what} past the page cache; "
                          f"arms reading from disk: {', '.join(on_disk)}")

        traces, stats, extras = {}, {}, {}
        (output_dir / "traces").mkdir(parents=True, exist_ok=True)
        # client None: cluster=none, everything in this process
        with cluster_and_data(cfg.cluster, dataset.path, console, output_dir, plan.data) as (client, parts):
            if parts is not None:
                tracker.set_tags(parent_id, {"data_access": parts.access})
            placement = Placement(client, dataset.path, dataset.X, dataset.y, plan.model,
                                  float(getattr(validate_cluster_config(cfg.cluster), "timeout_s", 60.0)), parts=parts)
            if client is not None:
                seconds = warm_workers(client, plan.model, dataset.X, dataset.y, plan.arms)
                if seconds:
                    console.print(f"warm-up on the workers (the replicated arms' kernels): {seconds:.2f}s, not counted "
                                  "in any arm")
            if any(not is_distributed(plan.arms[name]) for name in on_disk):  # (CoCoA+'s shards have their own)
                console.print(f"coordinate statistics for the arms on disk (features, or samples for a classifier): "
                              f"one pass, {prepare_on_disk(placement):.2f}s")
            for name, settings in plan.arms.items():
                start = time.perf_counter()
                shards = cocoa_shards(placement, settings)
                if shards:
                    made = [r for r in shards if r.get("made")]
                    console.print(f"shards of arm {name}: {len(shards)} ({sum(r['bytes'] for r in shards) / 1e6:.1f} MB), "
                                  f"{len(made)} made now, {len(shards) - len(made)} found on disk, in "
                                  f"{time.perf_counter() - start:.2f}s (not counted in any arm)")
            for name, settings in plan.arms.items():
                arm_tags = {**tags["arm"], "arm": name, "mlflow.runColor": colours[name]}
                with tracker.run(arm_run_name(name, run_name), parent_id, arm_tags) as arm_id, \
                        arm_on(client, parts, tracker, arm_id):
                    traces[name], stats[name], extras[name] = run_tracked_arm(
                        cfg, plan, tracker, arm_id, name, settings, problem, output_dir / "traces" / f"{name}.csv",
                        show, placement)

        summary = report.table(stats, plan.baselines, plan.target)
        console.print(summary)
        if on_disk:
            console.print(report.disk_table(traces, extras, dataset.nbytes))
        budget = (f"host_budget {cfg.device.host_budget}" if on_disk else f"budget {cfg.device.memory_budget}")
        title = f"{cfg.experiment.name}: {plan.model['name']} on {plan.data.name}, {budget}"
        plots = report.save_plots(traces, plan.target, output_dir, title, colours)
        verdict = report.verdict(stats, plan.main_arm, plan.baselines, plan.target)
        console.print(f"[bold]{verdict}[/bold]")
        console.print(f"plots: {', '.join(relative(p) for p in plots)}")

        speedups = report.speedup_metrics(stats, plan.main_arm)
        view_id = describe(tracker, parent_id, run_name, title, plan, stats, verdict, summary, output_dir)
        tracker.set_tags(parent_id, {"verdict": verdict, "main_arm": plan.main_arm,
                                     "speedups": json.dumps(report.speedup_texts(stats, plan.main_arm))})
        for path in plots:
            tracker.log_artifact(parent_id, path)
        tracker.log_artifact(parent_id, output_dir / ".hydra", ".hydra")
        tracker.log_artifact(parent_id, output_dir / "traces", "traces")
        wall_s = time.perf_counter() - started
        overhead = tracker.seconds / wall_s
        tracker.log_metrics(parent_id, {**{k: report.significant(v) for k, v in speedups.items()},
                                        "warmup_s": warmup_s, "warmup_compiled": warm.compiled, "wall_s": wall_s,
                                        "tracking_overhead": overhead,
                                        "tracking_s": tracker.seconds, "tracking_setup_s": tracker.setup_s})
    if tracker.enabled:
        console.print(f"tracking: {tracker.seconds:.2f}s in MLflow calls = {overhead:.1%} of {wall_s:.1f}s "
                      f"wall time; set-up {tracker.setup_s:.1f}s (import, open the store) ({shown_uri(tracker.uri)})")
        ui.print_links(console, tracker, parent_id, view_id, "the comparison")
    return report.RunResults({name: {**s.run_metrics(), **({"speedups": speedups} if name == plan.main_arm else {})}
                              for name, s in stats.items()}, run_id=parent_id, stats=stats, extras=extras,
                             traces=traces, settings=plan.arms, target=plan.target)


def describe(tracker: Any, parent_id: str, run_name: str, title: str, plan: Plan, stats: Dict[str, Any],
             verdict: str, summary: Any, output_dir: Path) -> Any:
    """The verdict and the arm table as the parent run's description and as comparison.md,
    and a saved view of the arms' curves; returns the view's id (None without tracking)."""
    view_id = None
    if tracker.enabled:
        columns = ["time_to_target_s", f"final_{plan.metric}", "epochs_to_target",
                   *(["bytes_to_target"] if any(not math.isnan(s.bytes_h2d) for s in stats.values()) else []),
                   *(["bits_to_target"] if any(not math.isnan(s.bits_sent) for s in stats.values()) else [])]
        view_id = ui.save_arms_view(tracker, parent_id, ui.view_name(run_name), [plan.metric],
                                    columns, ["solver.name", "solver.selection", "device.memory_budget"])
        ui.save_comparisons_view(tracker, [f"speedup_vs_{b}" for b in plan.baselines])
    table = report.markdown(summary)
    path = output_dir / "comparison.md"
    path.write_text(f"# {title}\n\n" + ui.note(verdict, table, tracker.experiment_id, view_id,
                                                 ui.ui_base(tracker.uri) + "/" if tracker.enabled else "") + "\n")
    tracker.set_tags(parent_id, {"mlflow.note.content": ui.note(verdict, table, tracker.experiment_id, view_id)})
    tracker.log_artifact(parent_id, path)
    return view_id
