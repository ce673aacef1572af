"""A Hydra callback that opens one MLflow "sweep" run for a multirun, and sums it up.

Every job of the multirun nests its experiment run under it (through an
environment variable, which joblib's worker processes inherit), so the MLflow
UI shows a sweep's jobs side by side in one experiment. A job's run is named by
the values it sweeps (``memory_budget=0.1 model=svm``). When the multirun ends,
the sweep run gets a summary: a table of the jobs (the main arm's time to the
target, its speedups) as its description and an artifact, a plot of the speedups
against each swept parameter, their medians as its metrics, and a saved view of
every job's arm curves. If the multirun dies (a job raised, a bad override,
Ctrl-C) Hydra never calls on_multirun_end; an atexit hook then ends the sweep
run FAILED, or KILLED after Ctrl-C, so no run is left RUNNING.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from pipelines import report, ui
from pipelines.tracking import (SWEEP_EXPERIMENT_ENV, SWEEP_KEYS_ENV, SWEEP_PARENT_ENV, TERMINATED, open_tracker,
                                relative, run_tags, stop_on_sigterm)


def swept(overrides: Sequence[str]) -> List[str]:
    """The overrides of a multirun that sweep (``model=lasso,svm``, ``x=range(1,4)``)."""
    return [o.input_line for o in OverridesParser.create().parse_overrides(list(overrides)) if o.is_sweep_override()]


def sweep_values(overrides: Sequence[str]) -> Dict[str, str]:
    """A job's values of the keys its multirun sweeps (``SWEEP_KEYS_ENV``), in sweep order."""
    keys = json.loads(os.environ.get(SWEEP_KEYS_ENV) or "[]")
    given = {o.key_or_group: o.get_value_element_as_str()
             for o in OverridesParser.create().parse_overrides(list(overrides))}
    return {key: given[key] for key in keys if key in given}


def short_names(keys: Sequence[str]) -> Dict[str, str]:
    """device.memory_budget -> memory_budget, unless two keys would then read the same."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def job_label(overrides: Sequence[str], fallback: str) -> str:
    """A sweep job's run name: its swept values (``memory_budget=0.1 model=svm``)."""
    values = sweep_values(overrides)
    names = short_names(list(values))
    return " ".join(f"{names[k]}={v}" for k, v in values.items()) or fallback


class MlflowSweepCallback(Callback):
    def __init__(self) -> None:
        self.tracker: Any = None
        self.run_id: Optional[str] = None
        self.interrupted = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.tracking.enabled:
            return
        self.tracker = open_tracker(config.tracking)
        overrides = list(config.hydra.overrides.task)
        sweeps = swept(overrides)
        os.environ[SWEEP_KEYS_ENV] = json.dumps(
            [o.key_or_group for o in OverridesParser.create().parse_overrides(sweeps)])
        self.run_id = self.tracker.start_run(f"sweep {config.experiment.name}: {' '.join(sweeps)}".strip(": "), tags={
            **run_tags(config.device.name), "sweep": "true", "sweep_overrides": " ".join(overrides),
            "sweep_dir": str(config.hydra.sweep.dir), "mlflow.runColor": ui.SWEEP_COLOUR})
        self.tracker.log_params(self.run_id, {"overrides": " ".join(overrides)})
        os.environ[SWEEP_PARENT_ENV] = self.run_id
        os.environ[SWEEP_EXPERIMENT_ENV] = self.tracker.experiment_id
        stop_on_sigterm()
        self._watch_for_interrupt()
        atexit.register(self._end_if_open)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.run_id is None:
            return
        run_id = self.run_id
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough for the table
            console = Console(width=max(console.width, 160))
        view_id = None
        try:
            view_id = summarize(self.tracker, run_id, Path(config.hydra.sweep.dir), console)
        except Exception as error:  # the jobs' runs are recorded; a summary that fails must not hide them
            print(f"Could not sum up MLflow sweep run {run_id}: {type(error).__name__}: {error}", file=sys.stderr)
        self._end("FINISHED")
        ui.print_links(console, self.tracker, run_id, view_id, "the sweep")

    def _watch_for_interrupt(self) -> None:
        # A KeyboardInterrupt reaches sys.excepthook before atexit hooks run.
        previous = sys.excepthook

        def hook(kind, value, traceback):  # type: ignore[no-untyped-def]
            self.interrupted = issubclass(kind, KeyboardInterrupt)
            previous(kind, value, traceback)

        sys.excepthook = hook

    def _end_if_open(self) -> None:
        self._end("KILLED" if self.interrupted or TERMINATED.is_set() else "FAILED")

    def _end(self, status: str) -> None:
        if self.run_id is None:
            return
        run_id, self.run_id = self.run_id, None
        for name in (SWEEP_PARENT_ENV, SWEEP_EXPERIMENT_ENV, SWEEP_KEYS_ENV):
            os.environ.pop(name, None)
        try:
            self.tracker.end_run(run_id, status)
        except Exception as error:  # at exit: report, never raise
            print(f"Could not end MLflow sweep run {run_id}: {error}", file=sys.stderr)


# ----------------------------------------------------------------- summary ---
def jobs(tracker: Any, sweep_id: str) -> List[Dict[str, Any]]:
    """The sweep's jobs, read back from MLflow (joblib's jobs ran in other processes), in
    job order: number, swept values, status, main arm's numbers, speedups, arm colours."""
    client, eid = tracker.client, tracker.experiment_id
    parents = client.search_runs([eid], f"tags.`mlflow.parentRunId` = '{sweep_id}'", max_results=10000)
    arms = client.search_runs([eid], f"tags.sweep_run_id = '{sweep_id}'", max_results=10000)
    rows = []
    for run in parents:
        tags, metrics = run.data.tags, run.data.metrics
        main = next((a for a in arms if a.data.tags.get("mlflow.parentRunId") == run.info.run_id
                     and a.data.tags.get("arm") == tags.get("main_arm")), None)
        rows.append({"job": int(tags.get("sweep_job", len(rows))), "name": run.info.run_name,
                     "values": json.loads(tags.get("sweep_values", "{}")), "status": run.info.status,
                     "main_arm": tags.get("main_arm", ""), "main": main.data.metrics if main else {},
                     "speedups": {k: v for k, v in metrics.items() if k.startswith("speedup_vs_")},
                     "texts": json.loads(tags.get("speedups", "{}"))})  # as the job's table wrote them
    colours = {a.data.tags["arm"]: a.data.tags["mlflow.runColor"] for a in arms
               if "arm" in a.data.tags and "mlflow.runColor" in a.data.tags}
    rows.sort(key=lambda r: r["job"])
    for r in rows:
        r["colours"] = colours
    return rows


def sweep_metric(rows: List[Dict[str, Any]]) -> str:
    for metric in ("rel_gap", "suboptimality", "train_loss"):
        if any(f"final_{metric}" in r["main"] for r in rows):
            return metric
    return "rel_gap"


def main_arm(rows: List[Dict[str, Any]]) -> str:
    """The jobs' main arm ('the main arm' when they differ)."""
    names = {r["main_arm"] for r in rows}
    return names.pop() if len(names) == 1 else "the main arm"


def table(rows: List[Dict[str, Any]], metric: str) -> Table:
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    names = short_names(keys)
    ups = list(dict.fromkeys(k for r in rows for k in r["speedups"]))
    several = main_arm(rows) == "the main arm"
    t = Table(title=f"Sweep: {main_arm(rows)}'s time to the {metric} target and its speedups, per job "
                    "('-': not reached; '>': a lower bound)")
    for column in ("job", *(names[k] for k in keys), "status", *(["main arm"] if several else []), "time (s)",
                   f"final {metric}", *(f"speedup vs {u[len('speedup_vs_'):]}" for u in ups)):
        t.add_column(column, justify="left" if column in ("status", "main arm", *names.values()) else "right")
    for r in rows:
        m = r["main"]
        t.add_row(str(r["job"]), *(str(r["values"].get(k, "")) for k in keys), r["status"].lower(),
                  *([r["main_arm"]] if several else []),
                  f"{m['time_to_target_s']:.2f}" if "time_to_target_s" in m else "-",
                  f"{m[f'final_{metric}']:.2e}" if f"final_{metric}" in m else "-",
                  *(r["texts"].get(u, f"{r['speedups'][u]:.1f}x") if u in r["speedups"] else "-" for u in ups))
    return t


def plot(rows: List[Dict[str, Any]], path: Path) -> Optional[Path]:
    """The main arm's speedup against each other arm (its time to the target when it has no
    other arm) against each swept parameter: a panel per parameter, a line per other arm (in
    its colour) and per value of the other parameters."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    names = short_names(keys)
    main = main_arm(rows)
    ups = list(dict.fromkeys(k for r in rows for k in r["speedups"]))
    series = {u: (lambda r, u=u: r["speedups"].get(u)) for u in ups} or {
        "time_to_target_s": lambda r: r["main"].get("time_to_target_s")}
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        values = list(dict.fromkeys(r["values"][key] for r in rows if key in r["values"]))
        try:
            position = {v: float(v) for v in values}
        except (TypeError, ValueError):  # a group (model=lasso,svm): categories in sweep order
            position = {v: i for i, v in enumerate(values)}
            ax.set_xticks(range(len(values)), values)
        others = [k for k in keys if k != key]
        groups = list(dict.fromkeys(tuple(r["values"].get(o) for o in others) for r in rows))
        for name, value in series.items():
            other_arm = name[len("speedup_vs_"):] if ups else main
            for g, group in enumerate(groups):
                points = sorted((position[r["values"][key]], value(r)) for r in rows if key in r["values"]
                                and tuple(r["values"].get(o) for o in others) == group and value(r) is not None)
                if points:
                    label = (f"vs {other_arm}" if ups else main) + (
                        f" ({', '.join(f'{names[o]}={v}' for o, v in zip(others, group))})" if others else "")
                    ax.plot(*zip(*points), marker="os^vD*"[g % 6], linestyle=("-", "--", ":", "-.")[g % 4],
                            color=rows[0]["colours"].get(other_arm), label=label)
        ax.set(xlabel=key, yscale="log")
        if ups:
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set(ylabel=f"speedup of {main}", title=f"{main} against each arm, by {names[key]}")
        else:
            ax.set(ylabel=f"{main}: time to the target (s)", title=f"{main}, by {names[key]}")
        unit = "x" if ups else ""
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}{unit}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(  # 2 and 5 of each decade
            lambda v, _: f"{v:g}{unit}" if v > 0 and round(v / 10 ** math.floor(math.log10(v))) in (2, 5) else ""))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def medians(rows: List[Dict[str, Any]]) -> Dict[str, float]:
    """The sweep run's metrics: each speedup's median over the jobs (rounded), and the main arm's
    median time to the target, over the jobs that have them."""
    ups = {u: [r["speedups"][u] for r in rows if u in r["speedups"]] for r in rows for u in r["speedups"]}
    out = {u: report.significant(statistics.median(v)) for u, v in ups.items()}
    times = [r["main"]["time_to_target_s"] for r in rows if "time_to_target_s" in r["main"]]
    return {**out, **({"time_to_target_s": statistics.median(times)} if times else {})}


def summarize(tracker: Any, sweep_id: str, out_dir: Path, console: Any) -> Optional[str]:
    """The sweep run's description, artifacts, metrics and view (see the module's doc); returns the view id."""
    rows = jobs(tracker, sweep_id)
    if not rows:
        return None
    metric = sweep_metric(rows)
    summary = table(rows, metric)
    console.print(summary)
    out_dir.mkdir(parents=True, exist_ok=True)
    plotted = plot(rows, out_dir / "sweep_summary.png")
    keys = list(dict.fromkeys(k for r in rows for k in r["values"]))
    params = [f"{k}.name" if "." not in k else k for k in keys]  # a group override (model=svm): its name
    with tracker.timed():
        name = tracker.client.get_run(sweep_id).info.run_name
    view_id = ui.save_arms_view(tracker, sweep_id, ui.view_name(name), [metric],
                                ["time_to_target_s", f"final_{metric}"], params, by="sweep_run_id")
    head = f"Sweep of {len(rows)} jobs over {', '.join(keys)}; metrics on this run: medians over its jobs."
    note = ui.note(head, report.markdown(summary), tracker.experiment_id, view_id)
    (out_dir / "sweep_summary.md").write_text(note + "\n")
    tracker.set_tags(sweep_id, {"mlflow.note.content": note})
    for path in (out_dir / "sweep_summary.md", plotted):
        if path is not None:
            tracker.log_artifact(sweep_id, path)
    tracker.log_metrics(sweep_id, medians(rows))
    if plotted is not None:
        console.print(f"sweep plot: {relative(plotted)}")
    return view_id
