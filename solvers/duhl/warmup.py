"""Compile DuHL's CPU kernels before anything is timed.

Numba compiles a kernel per model (the type of its ``theta``) and per argument
types (dtype, dense or sparse, read-only or not) on first use, or loads it
from its on-disk cache. Callers time :func:`compile_kernels` and report it
apart from any solve.
"""

import time

import numpy as np
import scipy.sparse as sp

from solvers.duhl.solver import DuHL
from solvers.glm.models import MODELS
from solvers.glm.problems import make_problem


def compile_kernels(models=None, dtypes=(np.float64, np.float32)):
    """Two epochs of DuHL (all the data resident, and half of it with either round loop) on a
    tiny dense and a tiny sparse problem of each model and dtype; returns the seconds it took."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        X = rng.standard_normal((12, 6)).astype(dtype)
        y = np.where(rng.standard_normal(12) > 0, 1.0, -1.0)
        for Xv in (X, sp.csr_matrix(X)):
            for name in models or MODELS:
                DuHL(memory_budget=None, max_epochs=2, tol=0.0).solve(make_problem(name, Xv, y))  # all resident
                for refresh in ("auto", 1.0):  # the compiled round loop, and the Python one
                    DuHL(memory_budget=0.5, max_epochs=2, tol=0.0, refresh=refresh).solve(make_problem(name, Xv, y))
    return time.perf_counter() - t0
