"""``python -m pipelines.experiment``: the one entry point. Compose the config, then
run the experiment its ``experiment.kind`` names, tracked in MLflow, with a report.

    python -m pipelines.experiment                          # the default comparison
    python -m pipelines.experiment experiment=duhl_svm      # another preset
    python -m pipelines.experiment experiment=distbelief    # Downpour / Sandblaster
    python -m pipelines.experiment -m device.memory_budget=0.1,0.25,0.5 model=lasso,svm

Kinds: ``glm`` (:mod:`pipelines.glm`: DuHL, peer, CoCoA+ and DIANA arms),
``distbelief`` (:mod:`pipelines.distbelief`) and ``reproduce`` (:mod:`pipelines.reproduce`:
the seed presets, then each paper's claims beside what was measured). Order matters: every check that
needs no data runs first (one-line error, exit 1, no data made, no run opened;
device=cuda without a GPU: exit 2); then one parent run holds the experiment
and one nested run per arm. The config groups: docs/reference/configuration.md (make docs).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from pipelines import distbelief, glm, reproduce
from pipelines.config import register_configs
from pipelines.sweep import job_label, sweep_values
from pipelines.tracking import SWEEP_PARENT_ENV, open_tracker, run_tags, stop_on_sigterm
from pipelines.ui import PARENT_COLOUR
from tasks.arms import NoCudaDevice, check_device
from tasks.cluster import ClusterLost
from tasks.data import DataError

register_configs()
KINDS = {"glm": glm, "distbelief": distbelief, "reproduce": reproduce}


def _kind(cfg: DictConfig):
    kind = cfg.experiment.get("kind", "glm")
    if kind not in KINDS:
        raise ValueError(f"The 'kind' parameter of experiment must be one of {tuple(KINDS)}. "
                         f"Got {kind!r} instead.")
    return KINDS[kind]


def plan_experiment(cfg: DictConfig) -> Any:
    """Every check of the experiment that needs no data (ValueError: one line)."""
    return _kind(cfg).plan(cfg)


def run_experiment(cfg: DictConfig, output_dir: Path, run_name: str = "", overrides: List[str] = (),
                   job_num: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
    """Check, then run, the experiment of a composed config; returns per-arm numbers.
    ``job_num``: the job's number in a sweep (with the sweep run's id in the environment)."""
    started = time.perf_counter()
    try:
        kind = _kind(cfg)
        check_device(cfg.device.name)
        plan = kind.plan(cfg)
    except NoCudaDevice as error:  # one line, exit code 2, before any run is opened
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, TypeError, OSError, OmegaConfBaseException) as error:
        message = " ".join(str(error).split("\n")[0:1])  # OmegaConf adds full_key lines
        raise SystemExit(f"Error: {message}") from None
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the table
        console = Console(width=max(console.width, 160))
    for noisy in ("distributed", "bokeh", "tornado"):  # Hydra's INFO logging would print every worker event
        logging.getLogger(noisy).setLevel(logging.WARNING)
    output_dir = Path(output_dir)
    try:
        tracker = open_tracker(cfg.tracking)
    except ConnectionError as error:
        raise SystemExit(f"Error: {error}") from None
    if getattr(tracker, "failed_dead_runs", 0):
        console.print(f"tracking: {tracker.failed_dead_runs} run(s) left RUNNING by a process that died "
                      "are now FAILED (error: process died)")
    arm_tags = {**run_tags(cfg.device.name), "kind": cfg.experiment.get("kind", "glm")}
    parent_tags = {**arm_tags, "mlflow.runColor": PARENT_COLOUR,
                   **({"overrides": " ".join(overrides)} if overrides else {})}
    if os.environ.get(SWEEP_PARENT_ENV):  # the sweep's summary reads its jobs back by these tags
        arm_tags["sweep_run_id"] = os.environ[SWEEP_PARENT_ENV]
        parent_tags.update(sweep_job="" if job_num is None else job_num,
                           sweep_values=json.dumps(sweep_values(overrides)))
    tags = {"arm": arm_tags, "parent": parent_tags}
    more = {"runner": run_experiment} if kind is reproduce else {}  # it runs the other presets
    try:
        return kind.run(cfg, plan, tracker, tags, run_name or cfg.experiment.name, output_dir, console, started,
                        **more)
    except (ClusterLost, ConnectionError) as error:  # the runs are FAILED with the error tagged
        raise SystemExit(f"Error: {type(error).__name__}: {error}") from None
    except DataError as error:  # a file or label problem found once the data is read: one line
        raise SystemExit(f"Error: {' '.join(str(error).splitlines()[:1])}") from None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> Dict[str, Dict[str, Any]]:
    stop_on_sigterm()
    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    # A sweep's jobs share the experiment's name: each is named by what it changes.
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    name = job_label(overrides, f"{cfg.experiment.name} #{hydra_cfg.job.num}") if in_sweep else cfg.experiment.name
    return run_experiment(cfg, Path(hydra_cfg.runtime.output_dir), name, overrides,
                          hydra_cfg.job.num if in_sweep else None)


if __name__ == "__main__":
    main()
