"""CoCoA+ and DIANA as experiment arms (``solver.name: cocoa`` / ``diana`` in tasks.arms.SOLVERS).

An arm is built from its settings (checked before any data is made, like
DuHL's) and run by ``solve(problem, placement)``. ``placement`` says where:
with ``placement.client`` None the math runs in this process
(:mod:`solvers.distributed_glm`); with a Dask client, the parts / workers are
replicas on the cluster (:mod:`tasks.distributed_glm.replicas`) that get their shards
through ``placement.parts`` (:mod:`tasks.parts`: memory-mapped from the cache, or shipped).

The results look like DuHL's to the report: a trace in the metric vocabulary
(``time_s``, ``epoch``, ``bits_sent``, and ``rel_gap`` for CoCoA+ or
``suboptimality`` = F - F* for DIANA), ``status``, ``time_s``. An arm's
``progress_metric`` names the column its target applies to.

DIANA solves the primal without an intercept (``model.fit_intercept: false``);
F* is a tight in-memory solve on all the data (the oracle), computed once per
model and data and kept in ``placement.cache``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import numpy as np
import scipy.sparse as sp

from solvers.distributed_glm.cocoa import CoCoA
from solvers.distributed_glm.diana import Diana, make_spec, reference_optimum, shard_rows
from solvers.glm.checks import check_params
from tasks.data.shards import ensure_shard
from tasks.distributed_glm.disk import file_source, local_disk_factory, shard_spec
from tasks.distributed_glm.replicas import cocoa_factory, diana_on_cluster, skeleton_problem
from tasks.parts import DataParts, DiskShards
from tasks.problems import labels_for


@dataclass
class Placement:
    """Where an arm runs and what it reads: the client (None: in-process) and the dataset."""

    client: Any
    path: Any  # the dataset's cache folder (on the driver)
    X: Any
    y: Any
    model: Dict[str, Any]
    timeout_s: float = 60.0  # every wait on a replica
    cache: Dict[Any, Any] = field(default_factory=dict)  # DIANA's F* per model
    parts: Any = None  # how workers get their data (DataParts, DiskShards); None: they memory-map ``path``

    def __post_init__(self):
        if self.parts is None and self.client is not None:
            self.parts = DataParts(self.client, self.path, "mmap")


class CocoaArm(CoCoA):
    """CoCoA+ (``n_parts``, ``aggregation``, ``local_solver``...; see CoCoA) as an arm. With a
    ``host_budget`` each part trains with DuHL from its own shard on disk (the workers' disks with
    ``cluster.data_access=disk``; in-process, shards in the cache folder's ``shards/``)."""

    progress_metric = "rel_gap"
    distributed = True

    def solve(self, problem, a0=None, placement: Optional[Placement] = None):
        disk = placement is not None and isinstance(placement.parts, DiskShards)
        if self.host_budget is not None and placement is None:
            raise ValueError("CoCoA+ with a host_budget trains each part from its shard on disk: run it with a "
                             "placement (the dataset's cache folder).")
        if placement is not None and placement.client is not None and self.host_budget is not None and not disk:
            raise ValueError("CoCoA+ with a host_budget trains each part from its shard on its worker's disk: set "
                             "cluster.data_access=disk.")
        sigma = setup_s = None
        if placement is not None and (self.sigma != "data" or problem is not None):
            # sigma' from the data, which the driver holds: once per K and aggregation
            key = ("sigma", self.sigma, self.n_parts, self.aggregation)
            if key not in placement.cache:
                placement.cache[key] = self.sigma_value(problem, placement.cache.setdefault("sigma", {}))
            sigma, setup_s = placement.cache[key]
        elif self.sigma == "data" and problem is None:
            raise ValueError("CoCoA+'s sigma='data' computes sigma' from the data in the driver's RAM; with every arm "
                             "on disk there is none: use sigma='safe' or a number.")
        skeleton = None if placement is None else skeleton_problem(placement.model, np.asarray(placement.y),
                                                                     placement.X.shape[1])
        try:
            if placement is None or placement.client is None:
                if self.host_budget is None:
                    self.executor_factory = None
                    return super().solve(problem, a0, sigma=sigma, setup_s=setup_s or 0.0)
                path = Path(placement.path)
                self.executor_factory = local_disk_factory(path, placement.model, np.asarray(placement.y),
                                                           path.parent / "shards", placement.X.dtype)
                return super().solve(skeleton, a0, sigma=sigma, setup_s=setup_s or 0.0)
            self.executor_factory = cocoa_factory(placement.client, placement.parts, placement.model,
                                                  placement.timeout_s, y=np.asarray(placement.y))
            return super().solve(skeleton, a0, sigma=sigma, setup_s=setup_s)
        finally:
            self.executor_factory = None


def cocoa_shards(placement: Placement, settings: Dict[str, Any]) -> list:
    """Before a CoCoA+ arm whose parts read shards (a host_budget, or data_access=disk): every part's
    shard made where the arm's replicas will start (on a cluster the workers in address order, part i
    on the i-th modulo their number, as the replicas are placed; in-process the cache folder's
    shards/), or found there. Set-up, like making the dataset: outside the arm's time and memory.
    Returns describe_shard's rows (``made``: made now)."""
    from solvers.distributed_glm.cocoa import partition

    disk = isinstance(placement.parts, DiskShards)
    if settings.get("name") != "cocoa" or not (disk or settings.get("host_budget") is not None):
        return []
    skeleton = skeleton_problem(placement.model, np.asarray(placement.y), placement.X.shape[1])
    ranges = partition(skeleton.n_coords, int(settings.get("n_parts", 2)))
    path = Path(placement.path)
    specs = [shard_spec(path.name, skeleton, lo, hi, placement.X.dtype) for lo, hi in ranges]
    if placement.client is None:
        source = file_source(path, skeleton)
        return [ensure_shard(spec, source, str(path.parent / "shards")) for spec in specs]
    workers = sorted(placement.client.scheduler_info(n_workers=-1)["workers"])
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(specs), thread_name_prefix="shards") as pool:
        rows = pool.map(lambda k: placement.parts.ensure(specs[k], skeleton, np.asarray(placement.y),
                                                         workers[k % len(workers)])[1], range(len(specs)))
        return [dict(row, worker=workers[k % len(workers)]) for k, row in enumerate(rows)]


def diana_data(model_cfg: Dict[str, Any], X, y):
    """(spec, X, y) as DIANA's workers see them (tasks.distributed_glm.replicas builds the
    same on a worker): float64 rows, logistic labels in {-1, +1}."""
    name = model_cfg["name"]
    X = X if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    spec = make_spec(name, X.shape[0], X.shape[1], alpha=model_cfg.get("alpha", 1.0), C=model_cfg.get("C", 1.0))
    return spec, X, labels_for(name, y)


class DianaArm:
    """DIANA and its baselines (``method``: diana, gd, no_shift, ef21) as an arm.

    ``tol`` is the target suboptimality F - F*; ``max_epochs`` caps the rounds (a
    round is one full local gradient per worker: one epoch). ``memory_budget``,
    ``selection`` and ``local_epochs`` are accepted so the shared solver settings
    apply, and ignored.
    """

    progress_metric = "suboptimality"
    distributed = True
    warmup = False  # NumPy only: nothing to compile

    def __init__(self, n_workers=4, method="diana", compressor="identity", gamma=None, shift_lr=None,
                 tol=1e-6, max_epochs=100000, max_time=None, random_state=0, callback=None,
                 memory_budget=None, selection="gap", local_epochs=1, device="cpu"):
        if device != "cpu":
            raise ValueError(f"The 'device' parameter of DIANA must be 'cpu' (it runs NumPy). Got {device!r} instead.")
        check_params("DIANA", max_epochs=max_epochs, max_time=max_time)
        if isinstance(compressor, dict) or hasattr(compressor, "items"):
            compressor = dict(compressor)
        self.memory_budget, self.selection, self.local_epochs, self.device = memory_budget, selection, local_epochs, device
        self.callback = callback
        self.diana = Diana(n_workers=n_workers, method=method, compressor=compressor, gamma=gamma,
                           shift_lr=shift_lr, tol=tol, max_rounds=int(max_epochs), max_time=max_time,
                           random_state=random_state, callback=self._on_row if callback else None)

    def _on_row(self, row: dict) -> None:
        self.callback({**row, "epoch": float(row["round"])})

    def solve(self, problem=None, placement: Optional[Placement] = None):
        if placement is None:
            raise ValueError("DIANA arms need the dataset (a Placement), not only a Problem.")
        if isinstance(placement.parts, DiskShards):
            raise ValueError("DIANA's workers hold their rows in RAM: cluster.data_access=disk is for CoCoA+ arms "
                             "(use auto, mmap or scatter).")
        model = placement.model
        if model.get("fit_intercept"):
            raise ValueError("DIANA fits no intercept: set model.fit_intercept=false.")
        key = ("f_star", model["name"], model.get("alpha"), model.get("C"))
        if placement.client is None or key not in placement.cache:
            spec, X, y = diana_data(model, placement.X, placement.y)
            if key not in placement.cache:
                placement.cache[key] = reference_optimum(spec, X, y)[0]
        else:
            spec = make_spec(model["name"], placement.X.shape[0], placement.X.shape[1],
                             alpha=model.get("alpha", 1.0), C=model.get("C", 1.0))
        f_star = placement.cache[key]
        if placement.client is None:
            # the shards' smoothness (an SVD each): once per model, data and number of workers
            key_L = ("L", model["name"], self.diana.n_workers)
            if key_L not in placement.cache:
                placement.cache[key_L] = max(spec.smoothness(X[lo:hi]) for lo, hi in
                                             shard_rows(X.shape[0], self.diana.n_workers))
            result = self.diana.solve(spec, X, y, f_star=f_star, L=placement.cache[key_L])
        else:
            result = diana_on_cluster(placement.client, placement.parts, model, self.diana, spec, f_star,
                                      placement.timeout_s)
        result.trace["epoch"] = result.trace["round"].astype(float)
        return result


def check_model(name: str, model_cfg: Dict[str, Any]) -> None:
    """The model checks an arm needs before any data is made (one-line ValueError)."""
    if name == "diana":
        if model_cfg.get("name") not in ("lasso", "logistic"):
            raise ValueError(f"The 'model' parameter of DIANA must be 'lasso' or 'logistic'. "
                             f"Got {model_cfg.get('name')!r} instead.")
        if model_cfg.get("fit_intercept"):
            raise ValueError("DIANA fits no intercept: set model.fit_intercept=false.")
        if model_cfg.get("penalty", "l2") != "l2":
            raise ValueError(f"The 'penalty' parameter of model 'logistic' must be 'l2' with DIANA (its logistic "
                             f"regression is L2-penalised). Got {model_cfg['penalty']!r} instead.")

ARMS: Dict[str, Callable[..., Any]] = {"cocoa": CocoaArm, "diana": DianaArm}
