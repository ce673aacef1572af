"""``make reproduce`` (``experiment=reproduce``, ``experiment.kind: reproduce``): each seed
paper's headline claims beside what this machine measured.

The seed presets run in this process, one after another, through
``pipelines.experiment.run_experiment`` (``experiment.reproduce.runs``: a run's name ->
its overrides, e.g. ``[experiment=diana]``; ``experiment.reproduce.common`` is added to
every run). Each run's parent MLflow run nests under one "reproduce" run (as a
sweep's jobs do), and :data:`CLAIMS` turn their numbers into one line per claim:
the claim, what was measured, whether it holds, and the run it was measured in.
Every comparison is :mod:`pipelines.report`'s (``advantage``: time, rounds, bits
to the target). The table is printed, written to ``reproduce.md`` in the output
folder and logged as an artifact of the reproduce run. "Does not hold" is an
answer, not an error; a run that fails leaves its claims "not measured" (with
the error), and the reproduce run ends FAILED after writing the table.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from pipelines import reproduce_claims
from pipelines.tracking import PROJECT_ROOT, SWEEP_EXPERIMENT_ENV, SWEEP_PARENT_ENV

CLAIMS = reproduce_claims.CLAIMS
UI = "http://127.0.0.1:5000"  # `make ui`'s address


@dataclass
class Plan:
    runs: Dict[str, List[str]]  # run name -> the overrides it runs with
    configs: Dict[str, DictConfig]  # run name -> its composed config (checked)


def _passed_on(cfg: DictConfig) -> List[str]:
    """What every run inherits from the reproduce command: store, cache, seed, bars."""
    tracking = cfg.tracking
    out = [f"cache_dir={cfg.cache_dir}", f"seed={cfg.seed}", f"progress={cfg.progress}",
           f"tracking.enabled={tracking.enabled}"]
    if tracking.get("uri"):
        out.append(f"tracking.uri={tracking.uri}")
    return out


@contextmanager
def _config_dir() -> Iterator[None]:
    """Hydra's compose needs an initialised config search path: the app's when running
    under ``@hydra.main``, else (tests, notebooks) the project's conf/ for the duration."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
    else:
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
            yield


def compose_run(cfg: DictConfig, overrides: List[str]) -> DictConfig:
    from hydra import compose

    with _config_dir():
        return compose(config_name="config", overrides=list(overrides))


def plan(cfg: DictConfig) -> Plan:
    """Every run's config composed and planned before anything runs (one-line ValueError)."""
    from pipelines import distbelief, glm

    spec = OmegaConf.to_container(cfg.experiment.reproduce, resolve=True)
    unknown = sorted(set(spec["only"]) - set(spec["runs"]))
    if unknown:
        raise ValueError(f"The 'only' parameter of experiment.reproduce names run(s) {unknown} that are not in "
                         f"experiment.reproduce.runs {sorted(spec['runs'])}.")
    runs = {name: [*overrides, *spec["common"], *_passed_on(cfg)] for name, overrides in spec["runs"].items()
            if not spec["only"] or name in spec["only"]}
    if not runs:
        raise ValueError("The 'runs' parameter of experiment.reproduce must name at least one run.")
    configs = {}
    for name, overrides in runs.items():
        sub = compose_run(cfg, overrides)
        kind = sub.experiment.get("kind", "glm")
        if kind not in ("glm", "distbelief"):
            raise ValueError(f"Run '{name}' of experiment.reproduce must be a glm or distbelief experiment. "
                             f"Got kind {kind!r} instead.")
        (glm if kind == "glm" else distbelief).plan(sub)
        configs[name] = sub
    return Plan(runs, configs)


def link(experiment_id: Optional[str], run_id: str) -> str:
    return f"{UI}/#/experiments/{experiment_id}/runs/{run_id}" if experiment_id and run_id else ""


def markdown(rows: List[dict], header: List[str]) -> str:
    lines = [*header, "", "| seed | claim | measured here | holds | MLflow run |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        run = f"[{r['run_id'][:8]}]({r['link']})" if r["link"] else (r["run_id"][:8] or "-")
        cells = [r["seed"], r["claim"], r["measured"], r["holds"], f"{r['run']} {run}".strip()]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def table(rows: List[dict]) -> Table:
    t = Table(title="The seed papers' claims, measured here", show_lines=True)
    for column, ratio in (("seed", 1), ("claim", 4), ("measured here", 5), ("holds", 1), ("MLflow run", 2)):
        t.add_column(column, ratio=ratio, overflow="fold")
    for r in rows:
        colour = {"holds": "green", "does not hold": "red"}.get(r["holds"], "yellow")
        t.add_row(r["seed"], r["claim"], r["measured"], f"[{colour}]{r['holds']}[/{colour}]",
                  f"{r['run']} {r['run_id'][:8]}")
    return t


def run(cfg: DictConfig, p: Plan, tracker: Any, tags: Dict[str, str], run_name: str, output_dir: Path,
        console: Any, started: float, runner: Optional[Callable[..., Any]] = None) -> Dict[str, Any]:
    """Run every run of the plan under one parent run, then evaluate :data:`CLAIMS`."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    results: Dict[str, Any] = {}
    errors: Dict[str, str] = {}
    try:
        return _run(cfg, p, tracker, tags, run_name, output_dir, console, started, runner, results, errors)
    except RuntimeError as error:  # the reproduce run is FAILED (error tagged); the command exits with one line
        if not errors:
            raise
        raise SystemExit(f"Error: {error}") from None


def _run(cfg, p, tracker, tags, run_name, output_dir, console, started, runner, results, errors):
    load_before = os.getloadavg()
    with tracker.run(run_name, os.environ.get(SWEEP_PARENT_ENV), {**tags["parent"], "reproduce": "true"}) as parent:
        tracker.log_params(parent, {name: " ".join(o) for name, o in p.runs.items()})
        saved = {k: os.environ.get(k) for k in (SWEEP_PARENT_ENV, SWEEP_EXPERIMENT_ENV)}
        if tracker.enabled:  # every run's parent nests under this one, in this MLflow experiment
            os.environ[SWEEP_PARENT_ENV], os.environ[SWEEP_EXPERIMENT_ENV] = parent, tracker.experiment_id
        try:
            for name, sub in p.configs.items():
                console.rule(f"[bold]{name}[/bold]: {' '.join(p.runs[name][:3])}")
                t0 = time.perf_counter()
                try:
                    results[name] = runner(sub, output_dir / name, name, p.runs[name])
                except (Exception, SystemExit) as error:  # its claims say so; the others still run
                    errors[name] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
                    console.print(f"[red]{name} failed: {errors[name]}[/red]")
                console.print(f"{name}: {time.perf_counter() - t0:.1f}s")
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        rows = reproduce_claims.evaluate(results, errors)
        for row in rows:
            result = results.get(row["run"])
            row["run_id"] = getattr(result, "run_id", "") or ""
            row["link"] = link(tracker.experiment_id, row["run_id"])
        wall_s = time.perf_counter() - started
        load_after = os.getloadavg()
        header = [f"# Seed claims reproduced ({time.strftime('%Y-%m-%d %H:%M %Z')})", "",
                  f"Machine: {socket.gethostname()}, {os.cpu_count()} cores, {platform.platform()}; "
                  f"load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load_before)} before, "
                  f"{', '.join(f'{x:.2f}' for x in load_after)} after; {wall_s:.0f}s in all.",
                  f"Reproduce run {parent[:8]} {link(tracker.experiment_id, parent)}".rstrip()]
        text = markdown(rows, header)
        (output_dir / "reproduce.md").write_text(text)
        console.print(table(rows))
        held = sum(r["holds"] == "holds" for r in rows)
        summary = f"{held} of {len(rows)} claims hold here; table in {_relative(output_dir / 'reproduce.md')}"
        console.print(f"[bold]{summary}[/bold]")
        tracker.log_artifact(parent, output_dir / "reproduce.md")
        tracker.set_tags(parent, {"verdict": summary, **({"errors": str(errors)[:5000]} if errors else {})})
        tracker.log_metrics(parent, {"wall_s": wall_s, "claims_held": held, "claims": len(rows)})
        if tracker.enabled:
            console.print(f"reproduce run {parent} in {tracker.uri}: {link(tracker.experiment_id, parent)}")
        if errors:
            raise RuntimeError(f"run(s) {sorted(errors)} failed: {errors}; their claims are not measured")
    return {"rows": rows, "results": results, "run_id": parent, "markdown": text}


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)
