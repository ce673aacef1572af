"""Which side a classifier is faster on: the dual (samples as coordinates) against the primal
(features as coordinates), all data resident and with memory_budget=0.25, the CPU seconds each
takes to a certified relative duality gap of 1e-6.

    python -m benchmarks.classifier_sides                       # w8a (full) and a dense tall set
    python -m benchmarks.classifier_sides --w8a-rows 20000 --repeats 5

The measurement behind dual="auto"'s exception (solvers.glm.models.sides): the L2 logistic
regression under a budget that holds part of the data takes the dual. CPU seconds (process CPU
time, scaled by the trace's share of the run that reached the target) rather than wall time, so
that a loaded machine moves the numbers less; BLAS pinned to one thread; medians of
``--repeats`` seeds after one warm-up run per arm (compilation), which is not counted.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import W8A
from benchmarks.peers import _w8a, certified, time_to
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem

SIDES = {"logistic": ("logistic", "logistic_l2"), "squared hinge": ("svm", "svm_l2")}  # (dual, primal)
TARGET = 1e-6


def dense_tall(n, d, seed=0):
    """Gaussian features, a fifth informative, labels from a noisy linear score."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d) * (rng.random(d) < 0.2)
    return X, np.where(X @ w + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)


def cpu_to_target(problem, budget, repeats):
    """(median CPU seconds to TARGET, median epochs to it): inf and None where it is not reached."""
    def solve(seed, max_epochs=100000):
        return DuHL(memory_budget=budget, tol=TARGET, max_epochs=max_epochs, max_time=60.0,
                    random_state=seed).solve(problem)

    solve(0, 2)  # warm-up: compilation
    cpu, epochs = [], []
    for seed in range(repeats):
        c0 = time.process_time()
        result = solve(seed)
        c = time.process_time() - c0
        t = time_to(result.trace, TARGET)
        cpu.append(math.inf if math.isnan(t) else c * t / float(result.trace["time_s"].max()))
        hit = certified(result.trace)
        hit = hit[hit["rel_gap"] <= TARGET]
        epochs.append(float(hit["epoch"].iloc[0]) if len(hit) else math.inf)
    return statistics.median(cpu), statistics.median(epochs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--w8a-rows", type=int, default=None, help="the first rows of w8a (default: all; 0 skips it)")
    parser.add_argument("--dense", default="40000x200", help="the dense tall set's shape, NxD ('' to skip)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    threadpool_limits(1)
    sets = []
    if args.w8a_rows == 0:
        pass
    elif W8A.exists():
        sets.append((f"w8a[{args.w8a_rows or 'all'}]", lambda: _w8a(args.w8a_rows)))
    else:
        print(f"skip w8a: {W8A} not found")
    if args.dense:
        n, d = (int(v) for v in args.dense.lower().split("x"))
        sets.append((f"dense {n}x{d}", lambda: dense_tall(n, d)))
    print(f"{'data':16s} {'loss':14s} {'side':7s} {'budget':>6s} {'CPU s to 1e-6':>14s} {'epochs':>7s}")
    for label, load in sets:
        X, y = load()
        for loss, entries in SIDES.items():
            for side, entry in zip(("dual", "primal"), entries):
                extra = {"loss": "squared_hinge"} if entry == "svm" else {}
                problem = make_problem(entry, X, y, C=1.0, fit_intercept=False, **extra)
                for budget in (None, 0.25):
                    cpu, epochs = cpu_to_target(problem, budget, args.repeats)
                    print(f"{label:16s} {loss:14s} {side:7s} {str(budget or 'all'):>6s} {cpu:14.3f} {epochs:7.1f}",
                          flush=True)


if __name__ == "__main__":
    main()
