"""Shared by Downpour and Sandblaster: their result, a seeded shuffled train/test
split, which rows a replica owns, the rows a worker gets (:func:`rows_ref`: read
from the dataset cache on the worker, or shipped from the driver; see
tasks.parts), live workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import pandas as pd
import scipy.sparse as sp

from solvers.distbelief.models import MLP_KEYS, make_model
from tasks.cluster import cluster_lost, scheduler_lost
from tasks.data import read_cached
from tasks.parts import DataParts
from tasks.problems import labels_for


@dataclass
class DistBeliefResult:
    trace: pd.DataFrame
    status: str  # "converged" (targets met), "max_time", "max_steps", "max_iter", "failed"
    time_s: float
    train_loss: float
    test_accuracy: float
    w: np.ndarray
    failures: List[dict] = field(default_factory=list)  # {"time_s", "what", ...}
    counters: Dict[str, float] = field(default_factory=dict)


_DATASETS: Dict[str, Any] = {}  # folder -> memory-mapped Dataset, per process
_ORDERS: Dict[tuple, np.ndarray] = {}  # (n_rows, shuffle_seed) -> row permutation, per process


@dataclass
class DataSpec:
    """Where the data is and how it is cut. The rows are shuffled once by
    ``shuffle_seed`` (None: file order); positions [0, n_train) of that order
    train, the rest test. A file sorted by label (w8a's last 20% is almost one
    class) then still gives a test set like the training set."""

    folder: str
    n_rows: int
    n_features: int
    test_fraction: float = 0.2
    shuffle_seed: Optional[int] = 0

    @property
    def n_train(self) -> int:
        return int(round(self.n_rows * (1.0 - self.test_fraction)))

    def replica_rows(self, k: int, n_replicas: int) -> Tuple[int, int]:
        edges = np.linspace(0, self.n_train, n_replicas + 1).astype(int)
        return int(edges[k]), int(edges[k + 1])

    def order(self) -> np.ndarray:
        """Position -> file row (cached per process)."""
        if self.shuffle_seed is None:
            return np.arange(self.n_rows)
        key = (self.n_rows, self.shuffle_seed)
        if key not in _ORDERS:
            _ORDERS[key] = np.random.default_rng(self.shuffle_seed).permutation(self.n_rows)
        return _ORDERS[key]

    def rows(self, start: int, stop: int) -> np.ndarray:
        """File rows at positions [start, stop), sorted (reads stay sequential)."""
        return np.sort(self.order()[start:stop])


def data_spec(dataset, test_fraction: float = 0.2, shuffle_seed: Optional[int] = 0) -> DataSpec:
    if not 0 < test_fraction < 1:
        raise ValueError(f"The 'test_fraction' parameter must be a float in (0, 1). Got {test_fraction!r} instead.")
    return DataSpec(str(dataset.path), int(dataset.shape[0]), int(dataset.shape[1]), test_fraction, shuffle_seed)


def load_rows(spec: DataSpec, model_name: str, start: int, stop: int):
    """Rows at positions [start, stop) of the spec's order, in memory, with +-1 labels (on the worker)."""
    ds = _DATASETS.get(spec.folder)
    if ds is None:
        ds = _DATASETS[spec.folder] = read_cached(Path(spec.folder))
    if not hasattr(ds, "labels_" + model_name):
        setattr(ds, "labels_" + model_name, labels_for(model_name, ds.y))
    rows = spec.rows(start, stop)
    y = getattr(ds, "labels_" + model_name)[rows]
    if spec.shuffle_seed is None:
        X = ds.X[start:stop]
        X = sp.csr_matrix(X, copy=True) if sp.issparse(X) else np.ascontiguousarray(X)
    else:  # fancy indexing copies
        X = sp.csr_matrix(ds.X[rows]) if sp.issparse(ds.X) else np.ascontiguousarray(ds.X[rows])
    return X, np.array(y)


def rows_ref(parts: Optional[DataParts], spec: DataSpec, model_name: str, start: int, stop: int,
             worker: Optional[str] = None):
    """The ref (tasks.parts) of ``load_rows(spec, model_name, start, stop)`` for a task on
    ``worker``; ``parts`` None: the worker reads them from ``spec.folder``."""
    parts = parts if parts is not None else DataParts(None, spec.folder, "mmap")
    return parts.ref(load_rows, spec, model_name, int(start), int(stop), worker=worker)


def build_model(model_cfg: Mapping[str, Any], n_features: int, n_train: int):
    """The solvers.distbelief model of a model config (logistic/svm use C: alpha = 1 / (C n))."""
    kw = dict(model_cfg)
    name = kw.pop("name")
    if name == "ridge":
        name = "least_squares"
    alpha = kw.get("alpha")
    if alpha is None:
        alpha = 1.0 / (float(kw.get("C", 1.0)) * n_train)
    extra = {k: kw[k] for k in MLP_KEYS if k in kw} if name == "mlp" else {}
    if isinstance(extra.get("hidden"), (list, tuple)):  # OmegaConf's ListConfig, or a tuple
        extra["hidden"] = [int(h) for h in extra["hidden"]]
    return make_model(name, n_features, alpha=float(alpha), **extra)


def live_workers(client) -> List[str]:
    """The scheduler's workers now (a fresh query: ``Client.scheduler_info()`` returns a
    cache that a background refresh may leave without per-worker entries)."""
    if scheduler_lost(client):  # fail at once, not after the connect timeout
        raise cluster_lost(client, "asking for the live workers")
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return sorted(info.get("workers", {}))


def eval_rows(spec: DataSpec, model_name: str, n_eval: int):
    """Train rows (evenly spaced, at most n_eval) and test rows for the driver's evaluation."""
    ds = _DATASETS.get(spec.folder) or read_cached(Path(spec.folder))
    y = labels_for(model_name, ds.y)
    every = spec.order()
    train = every[np.linspace(0, spec.n_train - 1, min(n_eval, spec.n_train)).astype(int)]
    n_test = spec.n_rows - spec.n_train
    test = every[spec.n_train + np.linspace(0, n_test - 1, min(n_eval, n_test)).astype(int)]
    train, test = np.sort(train), np.sort(test)
    pick = (lambda rows: sp.csr_matrix(ds.X[rows])) if sp.issparse(ds.X) else (lambda rows: np.asarray(ds.X[rows]))
    return (pick(train), y[train]), (pick(test), y[test])
