"""Compile DuHL's CPU kernels before anything is timed.

Numba compiles a kernel per model (the type of its ``theta``) and per argument
types (dtype, dense or sparse, read-only or not) on first use, or loads it
from its on-disk cache. Callers time :func:`compile_kernels` and report it
apart from any solve.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba.core import event

from solvers.duhl.solver import DuHL
from solvers.glm.models import MODELS
from solvers.glm.problems import make_problem


def _tiny(dtype, sparse):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 6)).astype(dtype)
    y = np.where(rng.standard_normal(12) > 0, 1.0, -1.0)
    return (sp.csr_matrix(X) if sparse else X), y


def _compile(units):
    """Two epochs of DuHL (all the data resident, and half of it with either round loop) for each
    (model, dtype, sparse) of ``units``."""
    for name, dtype, sparse in units:
        X, y = _tiny(dtype, sparse)
        DuHL(memory_budget=None, max_epochs=2, tol=0.0).solve(make_problem(name, X, y))  # all resident
        for refresh in ("auto", 1.0):  # the compiled round loop, and the Python one
            DuHL(memory_budget=0.5, max_epochs=2, tol=0.0, refresh=refresh).solve(make_problem(name, X, y))


def _shares(units, jobs):
    """``units`` in ``jobs`` shares. The units whose problems have the same kernel signatures (models
    of one theta type: L1 and L2 logistic in the primal) stay in one share, or both would compile
    them; the groups go largest first to the share with the fewest units."""
    groups = {}
    for name, dtype, sparse in units:
        groups.setdefault((MODELS[name].math.Theta, np.dtype(dtype).name, sparse), []).append((name, dtype, sparse))
    shares = [[] for _ in range(jobs)]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(shares, key=len).extend(group)
    return [share for share in shares if share]


class Compiles(event.Listener):
    """Counts Numba's compilations (a function loaded from its on-disk cache is not one)."""

    def __init__(self):
        self.count = 0

    def on_start(self, ev):
        self.count += 1

    def on_end(self, ev):
        pass


def _child(units):
    """A Python process that compiles ``units`` (not a multiprocessing child: spawning one
    re-imports the caller's ``__main__``, which a script without a main guard would run again)."""
    spec = json.dumps([[name, np.dtype(dtype).name, sparse] for name, dtype, sparse in units])
    code = ("import json, sys; from solvers.duhl.warmup import _compile; "
            "_compile([(n, d, s) for n, d, s in json.loads(sys.argv[1])])")
    root = str(Path(__file__).resolve().parents[2])  # where this ``solvers`` is imported from
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-c", code, spec], env=env, stdout=subprocess.DEVNULL)


def compile_kernels(models=None, dtypes=(np.float64, np.float32), jobs=1):
    """Two epochs of DuHL (all the data resident, and half of it with either round loop) on a
    tiny dense and a tiny sparse problem of each model and dtype; returns the seconds it took.

    ``jobs`` > 1: the compiling is shared among this process and ``jobs - 1`` child processes
    (Numba compiles one function at a time in a process), each writing into Numba's on-disk
    cache; this process then loads the children's part. A child that fails leaves its part to be
    compiled here. When this process's part compiles nothing (a warm cache, most likely the
    children's part too), the children are stopped and this process loads the rest."""
    t0 = time.perf_counter()
    units = [(name, dtype, sparse) for dtype in dtypes for sparse in (False, True) for name in models or MODELS]
    shares = _shares(units, jobs) if jobs > 1 else [units]
    children = []
    compiles = Compiles()
    try:
        children = [_child(share) for share in shares[1:]]
        with event.install_listener("numba:compile", compiles):
            _compile(shares[0])
        for child in children:
            if not compiles.count:
                child.terminate()
            child.wait()
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()  # (Numba writes a cache file under a temporary name, then renames it)
                child.wait()
    if children:
        _compile(units)  # the children's kernels, from the cache
    return time.perf_counter() - t0
