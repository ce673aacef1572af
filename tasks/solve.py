"""Solving as a unit of work: build a problem from a dataset, run one arm.

An *arm* is one solver configuration of an experiment (DuHL with a selection
policy and a device budget). Its settings are the solver's constructor
arguments plus ``name`` (which solver) and are checked before any data is made.
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np
import scipy.sparse as sp

from solvers.backend import NoCudaDevice, check_device  # noqa: F401 (for pipelines: they import tasks, not solvers)
from solvers.duhl import DuHL, parse_budget
from solvers.problems import MODELS, make_problem
from solvers.selection import POLICIES
from tasks.distributed_arms import ARMS as DISTRIBUTED_ARMS
from tasks.peers import PEER_SOLVERS

# peer_*: other libraries (tasks/peers.py); cocoa, diana: replicas (tasks/distributed_arms.py)
SOLVERS = {"duhl": DuHL, **PEER_SOLVERS, **DISTRIBUTED_ARMS}
CLASSIFIERS = ("svm", "logistic")


# device/ settings that only the solvers running DuHL's device blocks take (DuHL,
# CoCoA+); the others (peers, DIANA) do not see them
DEVICE_KEYS = ("prefetch", "gap_kernel", "concurrency")


def make_solver(settings: Mapping[str, Any], callback: Optional[Callable[[dict], None]] = None):
    """The solver an arm describes; raises a one-line ValueError on a bad setting."""
    settings = dict(settings)
    name = settings.pop("name", "duhl")
    if name not in SOLVERS:
        raise ValueError(f"The 'name' parameter of solver must be one of {sorted(SOLVERS)}. Got {name!r} instead.")
    takes = inspect.signature(SOLVERS[name]).parameters
    for key in DEVICE_KEYS:
        if key not in takes:
            settings.pop(key, None)
    try:
        solver = SOLVERS[name](callback=callback, **settings)
    except TypeError as error:  # an unknown keyword: name it with the solver
        raise ValueError(f"Solver '{name}': {error}") from None
    # Checks that need no data, so a bad arm fails before the data is made.
    parse_budget(solver.memory_budget, 1)
    if solver.selection not in POLICIES:
        raise ValueError(f"The 'selection' parameter of DuHL must be one of {POLICIES}. "
                         f"Got {solver.selection!r} instead.")
    return solver


def check_model(model_cfg: Mapping[str, Any]) -> None:
    if model_cfg.get("name") not in MODELS:
        raise ValueError(f"The 'model' parameter must be one of {MODELS}. Got {model_cfg.get('name')!r} instead.")


def labels_for(model: str, y: np.ndarray) -> np.ndarray:
    """Targets as the model needs them: continuous targets become two classes
    for classifiers (above / below the median; synthetic targets are centred,
    so this is their sign)."""
    y = np.asarray(y)
    if model in CLASSIFIERS and np.unique(y).size > 2:
        return np.where(y > np.median(y), 1.0, -1.0)
    return y


def build_problem(model_cfg: Mapping[str, Any], X, y):
    kwargs = dict(model_cfg)
    model = kwargs.pop("name")
    return make_problem(model, X, labels_for(model, y), **kwargs)


def _read_only_miniature(model: str, X, y, rows: int = 64):
    """A few rows of the data with its dtype, layout and read-only flags (the
    data is memory-mapped read-only, and Numba compiles read-only arrays apart);
    classifiers get rows of both classes."""
    y = labels_for(model, y)
    if model in CLASSIFIERS:
        index = np.concatenate([np.flatnonzero(y == c)[: rows // 2] for c in np.unique(y)])
    else:
        index = np.arange(min(rows, y.shape[0]))
    if sp.issparse(X):
        small = X[index]
        parts = (small.data, small.indices, small.indptr)
    else:
        small = np.asarray(X)[index]
        small = np.asfortranarray(small) if np.isfortran(X) else np.ascontiguousarray(small)
        parts = (small,)
    small_y = np.array(y[index])
    for array in (*parts, small_y):
        array.setflags(write=False)
    return small, small_y


def warmup(model_cfg: Mapping[str, Any], X, y, arms: Mapping[str, Mapping[str, Any]]) -> float:
    """Compile before any arm is timed, so no arm pays for compilation: the
    solvers' own warm-up, then every arm for two epochs on a read-only miniature
    of the data (it compiles what the real data needs: dtype, layout, sparsity,
    read-only). Returns seconds."""
    from solvers.kernels.cpu import warmup as compile_kernels

    start = time.perf_counter()
    compile_kernels()
    problem = build_problem(model_cfg, *_read_only_miniature(model_cfg["name"], X, y))
    for settings in arms.values():
        if not getattr(SOLVERS[settings.get("name", "duhl")], "warmup", True):
            continue  # nothing to compile
        small = {**settings, "max_epochs": 2, "tol": 0.0, "max_time": None,
                 "memory_budget": None if settings.get("memory_budget") is None else 0.5}
        make_solver(small).solve(problem)
    return time.perf_counter() - start


def is_distributed(settings: Mapping[str, Any]) -> bool:
    """Whether the arm's solver runs replicas (may run on a Dask cluster)."""
    return bool(getattr(SOLVERS.get(settings.get("name", "duhl")), "distributed", False))


def progress_metric(settings: Mapping[str, Any]) -> str:
    """The trace column the arm's target applies to: rel_gap, or suboptimality (DIANA)."""
    return getattr(SOLVERS.get(settings.get("name", "duhl")), "progress_metric", "rel_gap")


def run_arm(problem, settings: Mapping[str, Any], callback: Optional[Callable[[dict], None]] = None,
            placement: Any = None):
    """Solve ``problem`` with the arm's solver; returns the solver's result. ``placement``
    (tasks.distributed_arms.Placement): where the arm runs and the data it reads. With a
    cluster, replicated solvers spread over its workers, and any other arm runs whole
    on one worker, next to the data (a Dask-CUDA worker: its GPU); its trace rows reach
    ``callback`` when it ends."""
    solver = make_solver(settings, callback=callback)
    if getattr(solver, "distributed", False):
        return solver.solve(problem, placement=placement)
    if placement is not None and placement.client is not None:
        future = placement.client.submit(solve_on_worker, str(placement.path), dict(placement.model),
                                         dict(settings), pure=False)
        result = future.result()
        if callback is not None:
            for row in result.trace.to_dict("records"):
                callback(row)
        return result
    return solver.solve(problem)


def solve_on_worker(path: str, model_cfg: Mapping[str, Any], settings: Mapping[str, Any]):
    """On a worker: one arm on the dataset memory-mapped from the cache at ``path``,
    compiled there first (untimed), as the driver does."""
    from pathlib import Path

    from tasks.data import read_cached

    ds = read_cached(Path(path))
    warmup(model_cfg, ds.X, ds.y, {"arm": settings})
    return make_solver(settings).solve(build_problem(model_cfg, ds.X, ds.y))
