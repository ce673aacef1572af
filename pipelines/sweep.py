"""A Hydra callback that opens one MLflow "sweep" run for a multirun.

Every job of the multirun nests its experiment run under it (through an
environment variable, which joblib's worker processes inherit), so the MLflow
UI shows a sweep's jobs side by side in one experiment. If the multirun dies
(a job raised, a bad override, Ctrl-C) Hydra never calls on_multirun_end; an
atexit hook then ends the sweep run FAILED, or KILLED after Ctrl-C, so no run
is left RUNNING.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipelines.tracking import (SWEEP_EXPERIMENT_ENV, SWEEP_PARENT_ENV, TERMINATED, open_tracker, run_tags,
                                stop_on_sigterm)


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
        self.run_id = self.tracker.start_run(f"sweep {config.experiment.name}", tags={
            **run_tags(config.device.name), "sweep": "true", "sweep_overrides": " ".join(overrides),
            "sweep_dir": str(config.hydra.sweep.dir)})
        self.tracker.log_params(self.run_id, {"overrides": " ".join(overrides)})
        os.environ[SWEEP_PARENT_ENV] = self.run_id
        os.environ[SWEEP_EXPERIMENT_ENV] = self.tracker.experiment_id
        stop_on_sigterm()
        self._watch_for_interrupt()
        atexit.register(self._end_if_open)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end("FINISHED")

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
        os.environ.pop(SWEEP_PARENT_ENV, None)
        os.environ.pop(SWEEP_EXPERIMENT_ENV, None)
        try:
            self.tracker.end_run(run_id, status)
        except Exception as error:  # at exit: report, never raise
            print(f"Could not end MLflow sweep run {run_id}: {error}", file=sys.stderr)

