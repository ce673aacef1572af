"""MLflow tracking: explicit run ids, batched metrics, and the cost measured.

``MlflowClient`` rather than the fluent API: runs are nested by id (sweep -> experiment -> arm)
with no hidden global "active run", which matters when one process runs several Hydra jobs.
Every call goes through ``Tracker.timed`` so the experiment can report what tracking cost
(goal: <= 2% of wall time). Per-round metrics are buffered and sent with ``log_batch`` (one
call costs ~5 ms on sqlite, so one call per round would dominate a fast solver)."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

import pandas as pd

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def relative(path) -> str:
    """A path as printed to a user: relative to the project root when under it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


# Set by the sweep callback so that every job of a multirun nests under one run.
SWEEP_PARENT_ENV = "DUHL_SWEEP_PARENT_RUN_ID"
SWEEP_EXPERIMENT_ENV = "DUHL_SWEEP_EXPERIMENT_ID"
SWEEP_KEYS_ENV = "DUHL_SWEEP_KEYS"  # the keys a multirun sweeps over (JSON list), which name its jobs
# An experiment's description in the MLflow UI.
EXPERIMENT_NOTE = ("duhl-lab: a run per comparison, its arms nested under it (+); its description holds the "
                   "verdict. Sweeps nest their comparisons.")
# The per-round names of ARCHITECTURE.md's vocabulary; other trace columns go to the CSV only.
ROUND_METRICS = ("time_s", "epoch", "primal", "dual", "gap", "rel_gap", "bytes_h2d", "swaps", "bits_sent",
                 "suboptimality", "train_loss", "test_accuracy", "staleness_mean", "samples", "staleness_max",
                 "certified", "bytes_disk", "disk_s", "step_s", "samples_per_s", "bytes_sent")
# A CoCoA+ part's own counters (part<k>_bytes_disk, part<k>_bits_sent): logged beside them.
PER_PART = re.compile(r"part\d+_(bytes_disk|bits_sent)")
# Logged beside them as log10_<name>: the UI's log axis reads ticks below 1e-6 as "0".
LOG10_METRICS = ("rel_gap", "suboptimality")
# In a row with certified = 0 these are estimates (stale gaps): logged as <name>_estimate.
ESTIMATED = ("dual", "gap", "rel_gap")
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit for log_batch
MAX_PARAMS_PER_BATCH = 100


def resolve_tracking_uri(uri: Optional[str]) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else sqlite:///<project root>/mlflow.db."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}"


def shown_uri(uri: str) -> str:
    """The tracking URI as printed: a sqlite file under the project relative to its root."""
    return f"sqlite:///{relative(uri[len('sqlite:///'):])}" if uri.startswith("sqlite:///") else uri


def flatten(config: Mapping[str, Any]) -> Dict[str, str]:
    """{'data': {'n_samples': 5}} -> {'data.n_samples': '5'} (MLflow params are strings)."""
    flat = pd.json_normalize(config, sep=".").iloc[0].to_dict() if config else {}
    return {key: str(value) for key, value in flat.items()}


def config_params(config: Mapping[str, Any], drop: Iterable[str] = ()) -> Dict[str, str]:
    """The flattened config without the keys under ``drop`` (groups or keys the experiment does not use)."""
    drop = tuple(drop)
    return {key: value for key, value in flatten(config).items()
            if not any(key == d or key.startswith(d + ".") for d in drop)}


def arm_run_name(arm: str, parent_name: str) -> str:
    """An arm run's name: the arm, and in a sweep's job the job's name (its swept values) too,
    so the UI's legends tell the jobs' arms apart."""
    return f"{arm} ({parent_name})" if os.environ.get(SWEEP_PARENT_ENV) else arm


def run_tags(device: str) -> Dict[str, str]:
    """git commit (with a '-dirty' mark), host, device."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return {"git_commit": commit + dirty, "mlflow.source.git.commit": commit,
            "host": socket.gethostname(), "pid": str(os.getpid()), "device": device}


TERMINATED = threading.Event()  # set when SIGTERM arrived (the sweep run ends KILLED, not FAILED)
# the main thread's store calls in progress, and a SIGTERM or Ctrl-C that came during one, raised when it ends
# (a call cut mid-transaction can keep the run's KILLED from being written: CI runs left an arm RUNNING)
_IN_CALL = {"depth": 0, "pending": 0}
_CTRL_C = -1  # pending: a KeyboardInterrupt (else the exit code of a SIGTERM)


def stop_on_sigterm() -> None:
    """`kill`, CI time-outs and schedulers send SIGTERM, which would end Python without
    unwinding: exit by SystemExit(143) (128 + 15, the signal convention) instead, so every
    open run ends KILLED, as on Ctrl-C; inside a tracking call, once that call has ended. Ctrl-C's
    KeyboardInterrupt waits for the call's end too (unless this process ignores SIGINT)."""
    def terminate(signum: int, frame: Any) -> None:
        TERMINATED.set()
        if _IN_CALL["depth"]:
            _IN_CALL["pending"] = 128 + signum
            return
        raise SystemExit(128 + signum)

    def interrupt(signum: int, frame: Any) -> None:
        if _IN_CALL["depth"]:
            _IN_CALL["pending"] = _IN_CALL["pending"] or _CTRL_C
            return
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminate)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, interrupt)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def fail_dead_runs(client: Any) -> int:
    """Runs of the store still RUNNING though the process that ran them on this host is gone
    (SIGKILL, a power cut) end FAILED with ``error=process died``. Returns how many."""
    from mlflow.entities import RunTag, ViewType

    host = socket.gethostname()
    ids = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    if not ids:
        return 0
    found = client.search_runs(ids, filter_string=f"attributes.status = 'RUNNING' and tags.host = '{host}'",
                               run_view_type=ViewType.ALL, max_results=1000)
    dead = [r for r in found if r.data.tags.get("pid", "").isdigit() and not _pid_alive(int(r.data.tags["pid"]))]
    for run in dead:
        reason = f"process died: pid {run.data.tags['pid']} on {host} ended while the run was RUNNING"
        client.log_batch(run.info.run_id, tags=[RunTag("error", reason)])
        client.set_terminated(run.info.run_id, status="FAILED")
    return len(dead)


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """An http(s) tracking URI must answer within seconds (MLflow's own client retries for
    minutes); a ConnectionError of one line otherwise."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s).raise_for_status()
    except requests.RequestException as error:
        reason = type(error).__name__ if not str(error) else str(error).splitlines()[0][:200]
        raise ConnectionError(f"the MLflow tracking server at {uri} does not answer ({reason}); start it, "
                              "set tracking.uri to another store, or tracking=none") from None
    # later calls: fail within a minute, not after MLflow's default retries of several minutes
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")


class Tracker:
    """One MLflow experiment; runs are opened and closed by id."""

    enabled = True

    def __init__(self, uri: Optional[str], experiment_name: str, flush_every_s: float = 5.0,
                 experiment_id: Optional[str] = None):
        self.seconds = 0.0  # time spent in MLflow calls
        self.flush_every_s = flush_every_s
        self._pending: Dict[str, List[Any]] = {}
        self._start_ms: Dict[str, int] = {}  # run id -> its start time, the origin of its rounds' timestamps
        self._last_flush = time.perf_counter()
        # Set-up is measured apart from the calls: importing MLflow (~2 s) and
        # opening the store (~5 s when a new sqlite file is created and migrated)
        # are paid once per process, however much an experiment logs.
        start = time.perf_counter()
        from mlflow.tracking import MlflowClient

        self.uri = resolve_tracking_uri(uri)
        check_server(self.uri)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.failed_dead_runs = fail_dead_runs(self.client)
        self.experiment_id = experiment_id or self._experiment(experiment_name)
        self.setup_s = time.perf_counter() - start

    @contextmanager
    def timed(self) -> Iterator[None]:
        """A call to the store: timed, and not cut by SIGTERM (see stop_on_sigterm)."""
        start = time.perf_counter()
        main = threading.current_thread() is threading.main_thread()
        _IN_CALL["depth"] += main
        try:
            yield
        finally:
            _IN_CALL["depth"] -= main
            self.seconds += time.perf_counter() - start
        if main and _IN_CALL["pending"] and not _IN_CALL["depth"]:  # raised once: the KILLED calls run through
            code, _IN_CALL["pending"] = _IN_CALL["pending"], 0
            if code == _CTRL_C:
                raise KeyboardInterrupt
            raise SystemExit(code)

    def _experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:///"):  # artifacts beside the database, not in the cwd
            location = (Path(self.uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
        try:
            experiment_id = self.client.create_experiment(name, artifact_location=location,
                                                          tags={"mlflow.note.content": EXPERIMENT_NOTE})
        except MlflowException:  # a concurrent job created it first
            return self.client.get_experiment_by_name(name).experiment_id
        self._drop_empty_default()
        return experiment_id

    def _drop_empty_default(self) -> None:
        """A new store holds an experiment 'Default' (id 0) that nothing here logs to and the
        UI lists first: delete it while it holds no run (sqlite: a soft delete, hidden in the
        UI and not made again; a store that refuses keeps it)."""
        from mlflow.entities import ViewType
        from mlflow.exceptions import MlflowException

        try:
            default = self.client.get_experiment("0")
            if (default.name == "Default" and default.lifecycle_stage == "active"
                    and not self.client.search_runs(["0"], run_view_type=ViewType.ALL, max_results=1)):
                self.client.delete_experiment("0")
        except MlflowException:
            pass

    # ----------------------------------------------------------- runs ---
    def start_run(self, name: str, parent_id: Optional[str] = None,
                  tags: Optional[Mapping[str, str]] = None) -> str:
        tags = dict(tags or {})
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        with self.timed():
            info = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info
        self._start_ms[info.run_id] = info.start_time
        return info.run_id

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        self.flush(run_id)
        with self.timed():
            self.client.set_terminated(run_id, status=status)

    @contextmanager
    def run(self, name: str, parent_id: Optional[str] = None,
            tags: Optional[Mapping[str, str]] = None) -> Iterator[str]:
        """A run that ends FINISHED, FAILED (error tagged) or KILLED (Ctrl-C), never RUNNING."""
        run_id = self.start_run(name, parent_id, tags)
        try:
            yield run_id
        except (KeyboardInterrupt, SystemExit):
            self._close_quietly(run_id, "KILLED")
            raise
        except BaseException as error:
            self.set_tags(run_id, {"error": f"{type(error).__name__}: {error}"[:5000]})
            self._close_quietly(run_id, "FAILED")
            raise
        else:
            self.end_run(run_id)

    def _close_quietly(self, run_id: str, status: str) -> None:
        try:
            self.end_run(run_id, status)
        except Exception:  # the original error matters more than a failed bookkeeping call
            pass

    # -------------------------------------------------------- logging ---
    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        with self.timed():
            self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        with self.timed():
            for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
                self.client.log_batch(run_id, params=items[i:i + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        self._queue(run_id, metrics, step)
        self.flush(run_id)

    def log_round(self, run_id: str, row: Mapping[str, Any]) -> None:
        """Buffer one trace row (vocabulary names only); send when a flush is due.

        Its timestamp is the run's start + the row's solver time ``time_s``, so the UI's
        "Time (Relative)" axis is solver time (overheads excluded) and arms compare on it."""
        metrics = {k: row[k] for k in ROUND_METRICS if k in row}
        metrics.update({k: v for k, v in row.items() if PER_PART.fullmatch(k)})
        if row.get("certified", 1) == 0:  # between certificates the gap is an estimate: its own curve
            metrics.update({f"{k}_estimate": metrics.pop(k) for k in ESTIMATED if k in metrics})
        for key in LOG10_METRICS:
            value = metrics.get(key)  # (not of an estimate)
            if value is not None and value > 0:  # a gap of exactly 0 has no log
                metrics[f"log10_{key}"] = math.log10(value)
        stamp = None
        if run_id in self._start_ms and pd.notna(row.get("time_s")):
            stamp = self._start_ms[run_id] + int(round(1000 * float(row["time_s"])))
        self._queue(run_id, metrics, int(row["round"]), stamp)
        if time.perf_counter() - self._last_flush >= self.flush_every_s:
            self.flush()

    def _queue(self, run_id: str, metrics: Mapping[str, float], step: int, stamp: Optional[int] = None) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000) if stamp is None else stamp
        self._pending.setdefault(run_id, []).extend(
            Metric(key, float(value), stamp, step) for key, value in metrics.items()
            if value is not None and pd.notna(value))

    def flush(self, run_id: Optional[str] = None) -> None:
        run_ids = [run_id] if run_id else list(self._pending)
        with self.timed():
            for rid in run_ids:
                metrics = self._pending.pop(rid, [])
                for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
                    self.client.log_batch(rid, metrics=metrics[i:i + MAX_METRICS_PER_BATCH])
        self._last_flush = time.perf_counter()

    def log_artifact(self, run_id: str, path: Path, artifact_path: Optional[str] = None) -> None:
        path = Path(path)
        with self.timed():
            if path.is_dir():
                self.client.log_artifacts(run_id, str(path), artifact_path)
            elif path.exists():
                self.client.log_artifact(run_id, str(path), artifact_path)


class RoundSampler:
    """Which trace rows are sent to MLflow (each costs ~0.3 ms per metric on sqlite).

    Keeps the first row, a row each time rel_gap falls by 1/points_per_decade
    of a decade, a row at least every min_interval_s of solver time, and the
    first row at or below the target; the caller adds the last row. A curve in
    the UI then looks the same as with every round, at a bounded cost.
    points_per_decade=0 keeps every row.
    """

    def __init__(self, points_per_decade: int, min_interval_s: float, target_rel_gap: float,
                 key: str = "rel_gap"):
        self.key = key  # the column followed: rel_gap, or suboptimality (DIANA)
        self.factor = 10 ** (-1 / points_per_decade) if points_per_decade > 0 else None
        self.min_interval_s = min_interval_s
        self.target = target_rel_gap
        self.last_kept: Optional[Mapping[str, Any]] = None
        self.crossed = False

    def keep(self, row: Mapping[str, Any]) -> bool:
        value = row[self.key]
        crossing = not self.crossed and value <= self.target
        self.crossed = self.crossed or crossing
        last = self.last_kept
        keep = (self.factor is None or last is None or crossing
                or value <= last[self.key] * self.factor
                or row["time_s"] - last["time_s"] >= self.min_interval_s)
        if keep:
            self.last_kept = row
        return keep


class NullTracker:
    """tracking=none: same interface, records nothing."""

    enabled = False
    seconds = 0.0
    setup_s = 0.0
    experiment_id = None
    uri = None
    failed_dead_runs = 0

    def start_run(self, *args: Any, **kwargs: Any) -> str:
        return ""

    @contextmanager
    def run(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        yield ""

    def __getattr__(self, name: str) -> Any:  # end_run, log_*, set_tags, flush: no-ops
        return lambda *args, **kwargs: None


def open_tracker(tracking_cfg: Mapping[str, Any]) -> Any:
    if not tracking_cfg["enabled"]:
        return NullTracker()
    return Tracker(tracking_cfg.get("uri"), tracking_cfg["experiment_name"],
                   tracking_cfg.get("flush_every_s", 5.0),
                   experiment_id=os.environ.get(SWEEP_EXPERIMENT_ENV))
