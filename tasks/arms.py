"""The registry of arms, and an arm as a unit of work.

An *arm* is one solver configuration of an experiment: DuHL with a selection
policy and a device budget, a peer library, or a distributed method (CoCoA+,
DIANA). Its settings are the solver's constructor arguments plus ``name``
(which solver); the constructor checks them, so a bad arm fails before any
data is made.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import pickle
import tempfile
import time
from concurrent.futures import CancelledError
from typing import Any, Callable, Mapping, NamedTuple, Optional

import numpy as np
import scipy.sparse as sp
from numba.core import event as numba_event

from solvers.duhl.budget import parse_budget
from solvers.duhl.block.devices import NoCudaDevice, check_device  # noqa: F401 (re-exported for pipelines)
from solvers.duhl.solver import DuHL
from solvers.duhl.warmup import Compiles
from tasks.distributed_glm.arms import ARMS as DISTRIBUTED_ARMS
from tasks.parts import materialize, whole
from tasks.peers import PEER_SOLVERS
from tasks.problems import build_problem, build_problem_on_disk, coordinate_stats, read_only_miniature

# peer_*: other libraries (tasks/peers.py); cocoa, diana: replicas (tasks/distributed_glm/)
SOLVERS = {"duhl": DuHL, **PEER_SOLVERS, **DISTRIBUTED_ARMS}

FIRST_TOUCH_MAX = 512 << 20  # bytes the warm-up writes at most (_first_touch)
# device/ settings (and DuHL's refresh, anderson) that only the solvers running DuHL's resident
# sets take (DuHL, CoCoA+); the others (peers, DIANA) do not see them
DEVICE_KEYS = ("prefetch", "gap_kernel", "concurrency", "host_budget", "refresh", "anderson")


def solver_class(settings: Mapping[str, Any]):
    name = settings.get("name", "duhl")
    if name not in SOLVERS:
        raise ValueError(f"The 'name' parameter of solver must be one of {sorted(SOLVERS)}. Got {name!r} instead.")
    return SOLVERS[name]


def make_solver(settings: Mapping[str, Any], callback: Optional[Callable[[dict], None]] = None):
    """The solver an arm describes; raises a one-line ValueError on a bad setting."""
    cls = solver_class(settings)
    settings = {k: v for k, v in settings.items() if k != "name"}
    takes = inspect.signature(cls).parameters
    for key in DEVICE_KEYS:
        if key not in takes:
            settings.pop(key, None)
    try:
        return cls(callback=callback, **settings)
    except TypeError as error:  # an unknown keyword: name it with the solver
        raise ValueError(f"Solver '{cls.__name__}': {error}") from None


def is_distributed(settings: Mapping[str, Any]) -> bool:
    """Whether the arm's solver runs replicas (may run on a Dask cluster)."""
    return bool(getattr(solver_class(settings), "distributed", False))


def runs_on_workers(settings: Mapping[str, Any], placement: Any) -> bool:
    """Whether the arm runs on the cluster's workers (see :func:`run_arm`), rather than in this process:
    a replicated solver on a cluster; an arm that runs whole, on a cluster, unless it reads the data from
    disk here (``host_budget``) or the workers hold shards (``data_access=disk``)."""
    if placement is None or getattr(placement, "client", None) is None:
        return False
    if is_distributed(settings):
        return True
    return settings.get("host_budget") is None and getattr(placement.parts, "access", "") != "disk"


def progress_metric(settings: Mapping[str, Any]) -> str:
    """The trace column the arm's target applies to: rel_gap, or suboptimality (DIANA)."""
    return getattr(solver_class(settings), "progress_metric", "rel_gap")


# the miniature's epochs in DuHL's Python round loop (the data on disk): enough for a round that does not
# certify, whose refresh plan is a kernel of its own
PYTHON_LOOP_EPOCHS = 6


def _miniature_runs(arms: Mapping[str, Mapping[str, Any]]):
    """The DuHL runs that compile what the arms use: two epochs each on the miniature, grouped by
    the round loop they compile (all data resident, or part of it)."""
    groups: dict = {}
    for settings in arms.values():
        if solver_class(settings) is not DuHL:
            continue
        small = {**settings, "max_epochs": 2, "tol": 0.0, "max_time": None, "host_budget": None,
                 "memory_budget": None if settings.get("memory_budget") is None else 0.5}
        runs = [small] + ([{**small, "memory_budget": 0.5, "loop": "python", "max_epochs": PYTHON_LOOP_EPOCHS}]
                          if settings.get("host_budget") else [])
        for run in runs:
            groups.setdefault("resident" if run["memory_budget"] is None else "budget", []).append(run)
    return list(groups.values())


def miniature_model(model_cfg: Mapping[str, Any], n_samples: int, n_small: int) -> dict:
    """The model's settings for a miniature of ``n_small`` of the data's ``n_samples`` rows: a
    classifier's C times n_samples / n_small, so that its loss weighs against the penalty as on the
    whole data. At the data's C, 64 rows under an L1 penalty are often solved by w = 0 before a round
    runs, and the round loop's kernels would then compile inside the first arm. (Compiled code depends
    on the parameters' types, not their values.)"""
    cfg = dict(model_cfg)
    if "C" in cfg and 0 < n_small < n_samples:
        cfg["C"] = float(cfg["C"]) * n_samples / n_small
    return cfg


def compile_miniature(path: str) -> None:
    """In a child process of the warm-up: the pickled (model settings, X, y, runs) at ``path``,
    ``runs`` (DuHL settings) on the miniature (X, y), so that what they compile lands in Numba's
    on-disk cache."""
    with open(path, "rb") as f:
        model_cfg, X, y, runs = pickle.load(f)
    for array in ((X.data, X.indices, X.indptr) if sp.issparse(X) else (X,)) + (y,):
        array.setflags(write=False)  # (a pickled array arrives writable: Numba compiles read-only ones apart)
    problem = build_problem(model_cfg, X, y)
    for run in runs:
        make_solver(run).solve(problem)


class WarmUp(NamedTuple):
    """What :func:`warmup` did: its seconds, and how many functions Numba compiled in this process
    (0: every kernel came from Numba's on-disk cache)."""
    seconds: float
    compiled: int


def warmup(model_cfg: Mapping[str, Any], X, y, arms: Mapping[str, Mapping[str, Any]]) -> WarmUp:
    """Compile before any arm is timed, so no arm pays for compilation: every arm for two epochs
    on a read-only miniature of the data, which compiles just what the real data needs (the
    model, dtype, layout, sparsity, read-only, round loop) or loads it from Numba's cache. The
    round loops the arms use compile side by side, one in a child process for each but the first
    (on a first run most of the warm-up is compiling; Numba compiles one function at a time in a
    process), each into Numba's cache, which the arms' own runs then load. When this process's
    loop compiles nothing, its code came from the cache, and so, most likely, does the others':
    the children are stopped and this process loads it, rather than wait seconds for a child to
    import its modules."""
    start = time.perf_counter()
    small_X, small_y = read_only_miniature(model_cfg["name"], X, y)
    model_cfg = miniature_model(model_cfg, X.shape[0], small_X.shape[0])
    problem = build_problem(model_cfg, small_X, small_y)
    groups = _miniature_runs(arms)
    compiles = Compiles()
    with numba_event.install_listener("numba:compile", compiles):
        _compile_loops(model_cfg, small_X, small_y, problem, groups, compiles)
        for settings in arms.values():
            if not getattr(solver_class(settings), "warmup", True):
                continue  # nothing to compile
            small = {**settings, "max_epochs": 2, "tol": 0.0, "max_time": None, "host_budget": None,
                     "memory_budget": None if settings.get("memory_budget") is None else 0.5}
            if getattr(solver_class(settings), "library", None) is not None:
                make_solver(small).warm_up(problem)  # a peer: its first fit, in this process (its fits fork from it)
            else:
                make_solver(small).solve(problem)
                if settings.get("host_budget") is not None and solver_class(settings) in (DuHL, DISTRIBUTED_ARMS["cocoa"]):
                    # the data on disk runs DuHL's Python round loop (CoCoA+'s parts too), the miniature in RAM the
                    # compiled one
                    DuHL(memory_budget=0.5, loop="python", max_epochs=PYTHON_LOOP_EPOCHS, tol=0.0).solve(problem)
    _first_touch(X, arms)  # last: a first run's compilation, tens of seconds, would leave its pages cold again
    return WarmUp(time.perf_counter() - start, compiles.count)


def _compile_loops(model_cfg, small_X, small_y, problem, groups, compiles: Compiles) -> None:
    """The first group of miniature runs in this process, each other one in a child process (as
    many as there are other cores)."""
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    with tempfile.TemporaryDirectory(prefix="duhl-warmup-") as folder:
        children = []
        # a child gets its miniature from a file: passed to start() it would make start() wait,
        # a pipe's buffer full, until the child has imported its modules
        for k, runs in enumerate(groups[1:(os.cpu_count() or 1)]):
            path = os.path.join(folder, f"group{k}.pickle")
            with open(path, "wb") as f:
                pickle.dump((dict(model_cfg), small_X, small_y, runs), f, protocol=pickle.HIGHEST_PROTOCOL)
            children.append(context.Process(target=compile_miniature, args=(path,), daemon=True))
        try:
            for child in children:
                child.start()
            for run in groups[0] if groups else []:
                make_solver(run).solve(problem)
            for child in children:
                if not compiles.count:
                    child.terminate()  # (Numba writes a cache file under a temporary name, then renames it)
                child.join()  # a child that failed or was stopped leaves its compiling to the arms' runs after
        finally:
            for child in children:
                if child.is_alive():
                    child.terminate()
                    child.join()


def warm_workers(client, model_cfg: Mapping[str, Any], X, y, arms: Mapping[str, Mapping[str, Any]]) -> float:
    """:func:`warmup` on every worker of ``client`` for the replicated arms (CoCoA+, DIANA), on the same
    read-only miniature (shipped: kilobytes), so no round pays for loading compiled code, nor does a
    worker's memory count it in an arm's peak. Returns seconds (0 without such arms)."""
    arms = {name: s for name, s in arms.items() if is_distributed(s)}
    if client is None or not arms:
        return 0.0
    start = time.perf_counter()
    small_X, small_y = read_only_miniature(model_cfg["name"], X, y)
    client.run(warmup, miniature_model(model_cfg, X.shape[0], small_X.shape[0]), small_X, small_y, arms)
    return time.perf_counter() - start


def _first_touch(X, arms: Mapping[str, Mapping[str, Any]]) -> None:
    """Write, then free, twice the largest arm's memory_budget (its block, and the copy a swap
    gathers through): on a virtual machine the first use of the machine's memory pages costs
    about ten times a later one, and only the first arm would pay it (measured on the design page
    of the default experiment). Called last in the warm-up: a fresh machine's compilation would
    leave the pages cold again."""
    total = X.data.nbytes if sp.issparse(X) else X.nbytes
    budgets = [parse_budget(s["memory_budget"], total) for s in arms.values() if s.get("memory_budget") is not None]
    need = min(2 * min(max(budgets, default=0), total), FIRST_TOUCH_MAX)
    if need:
        np.ones(need // 8)  # freed at once: the next allocations reuse its pages


def run_arm(problem, settings: Mapping[str, Any], callback: Optional[Callable[[dict], None]] = None,
            placement: Any = None):
    """Solve ``problem`` with the arm's solver; returns the solver's result. ``placement``
    (tasks.distributed_glm.arms.Placement): where the arm runs and the data it reads.
    With a cluster, replicated solvers spread over its workers, and any other arm runs
    whole on one worker (a Dask-CUDA worker: its GPU), which memory-maps the dataset or
    gets it shipped (``placement.parts``); its trace rows reach ``callback`` when it ends.
    With ``data_access=disk`` the workers hold the replicas' shards, and an arm that runs whole
    runs in this process."""
    solver = make_solver(settings, callback=callback)
    if getattr(solver, "distributed", False):  # (CoCoA+ with a host_budget: its parts read their shards)
        return solver.solve(problem, placement=placement)
    if getattr(solver, "host_budget", None) is not None:  # the data stays on disk, this process reads it
        if placement is None:
            raise ValueError("An arm with a host_budget reads the dataset's cache folder: run it with a placement.")
        return solver.solve(problem_on_disk(placement))
    # an arm that runs whole runs on a worker, except with data_access=disk (the workers hold shards:
    # it runs here, on the driver's data)
    if runs_on_workers(settings, placement):
        for attempt in range(3):  # shipped data lost with its worker (cancelled): ship it again
            data = placement.parts.ref(whole, placement.parts.path)  # shipped: to a worker the task then runs on
            future = placement.client.submit(solve_on_worker, data, dict(placement.model), dict(settings),
                                             pure=False)
            try:
                result = future.result()
                break
            except CancelledError:
                if attempt == 2 or placement.client.status != "running":
                    raise
        if callback is not None:
            for row in result.trace.to_dict("records"):
                callback(row)
        return result
    return solver.solve(problem)


def prepare_on_disk(placement) -> float:
    """Before the arms that read X from disk: each coordinate's sum and sum of squares (features
    of X.npy; a classifier's samples, from the sample-major copy, written first if the cache
    has none), one pass shared by them all (so no arm pays for it); returns seconds."""
    start = time.perf_counter()
    if "row_stats" not in placement.cache:
        placement.cache["row_stats"] = coordinate_stats(placement.model["name"], placement.path)
    return time.perf_counter() - start


def problem_on_disk(placement):
    """The experiment's problem with X left on disk in the cache (X.npy, or its sample-major
    copy for a classifier; a fresh reader per arm, so each arm's bytes are its own)."""
    prepare_on_disk(placement)
    return build_problem_on_disk(placement.model, placement.path, placement.y, placement.cache["row_stats"])


def solve_on_worker(data, model_cfg: Mapping[str, Any], settings: Mapping[str, Any]):
    """On a worker: one arm on the whole dataset (a tasks.parts ref: memory-mapped or
    shipped), compiled there first (untimed), as the driver does."""
    X, y = materialize(data)
    warmup(model_cfg, X, y, {"arm": settings})
    return make_solver(settings).solve(build_problem(model_cfg, X, y))
