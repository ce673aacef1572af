"""Which side a classifier is faster on: the dual (samples as coordinates) against the primal
(features as coordinates), all data resident and with memory_budget=0.25, the CPU seconds each
takes to a certified relative duality gap of 1e-6.

    python -m benchmarks.classifier_sides                       # w8a (full) and a dense tall set
    python -m benchmarks.classifier_sides --w8a-rows 20000 --repeats 5
    python -m benchmarks.classifier_sides --dense "" --noisy 40000x200 --clicks 200000 \
        --losses logistic --budgets 0.25 --C 0.03,0.3,3 --repeats 1  # the coupling sweep

The measurement behind dual="auto"'s exception (solvers.glm.models.sides): the L2 logistic
regression under a budget that holds part of the data takes the dual where its features are
coupled (each set's coupling is printed with it). CPU seconds (process CPU
time, scaled by the trace's share of the run that reached the target) rather than wall time, so
that a loaded machine moves the numbers less; BLAS pinned to one thread; medians of
``--repeats`` seeds after one warm-up run per arm (compilation), which is not counted.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import W8A
from benchmarks.peers import _w8a, certified, noisy_linear_labels, time_to
from solvers.duhl import DuHL
from solvers.glm.models.sides import feature_coupling
from solvers.glm.problems import make_problem
from solvers.storage.sparse_store import open_store, store_name
from tasks.data.configs import SyntheticCriteoData
from tasks.data.criteo import make_synthetic_criteo

SIDES = {"logistic": ("logistic", "logistic_l2"), "squared hinge": ("svm", "svm_l2")}  # (dual, primal)
TARGET = 1e-6


def dense_tall(n, d, seed=0):
    """Gaussian features, a fifth informative, labels from a noisy linear score."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d) * (rng.random(d) < 0.2)
    return X, np.where(X @ w + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)


def noisy_tall(n, d, seed=2):
    """Gaussian features, a tenth informative, labels from a linear score with noise half its
    spread: many samples inside the margin (benchmarks.peers' tall_logistic)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, noisy_linear_labels(rng, X)


def uniform_tall(n, d, seed=4):
    """Uniform [0, 1) features (uncentred: coupled through their means), labels as noisy_tall's."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    return X, noisy_linear_labels(rng, X - 0.5)


def clicks(n, hash_bits=14):
    """Click-like rows (data=synthetic_criteo's maker: 40 binary fields a row, power-law values),
    made in a temporary folder and loaded as CSR; labels +-1."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_synthetic_criteo(SyntheticCriteoData(n_samples=n, hash_bits=hash_bits), folder, folder, lambda *a: None)
        X = open_store(folder, store_name("csr")).matrix().tocsr()
        y = np.load(folder / "y.npy")
    return X, np.where(y > 0, 1.0, -1.0)


def _shape(text):
    n, d = (int(v) for v in text.lower().split("x"))
    return n, d


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
    parser.add_argument("--noisy", default="", help="a noisy tall Gaussian set's shape, NxD (default: none)")
    parser.add_argument("--uniform", default="", help="an uncentred uniform set's shape, NxD (default: none)")
    parser.add_argument("--clicks", type=int, default=0, help="click-like rows, 2^14 features (default: none)")
    parser.add_argument("--losses", default=",".join(SIDES), help="comma-separated, of: " + ", ".join(SIDES))
    parser.add_argument("--budgets", default="all,0.25", help="comma-separated memory budgets ('all': none)")
    parser.add_argument("--C", default="1", help="comma-separated values of C")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    losses = args.losses.split(",")
    unknown = sorted(set(losses) - set(SIDES))
    if unknown:
        parser.error(f"--losses: {unknown[0]!r} is not one of {', '.join(SIDES)}")
    budgets = [None if b == "all" else float(b) for b in args.budgets.split(",")]
    Cs = [float(c) for c in args.C.split(",")]
    threadpool_limits(1)
    sets = []
    if args.w8a_rows == 0:
        pass
    elif W8A.exists():
        sets.append((f"w8a[{args.w8a_rows or 'all'}]", lambda: _w8a(args.w8a_rows)))
    else:
        print(f"skip w8a: {W8A} not found")
    for flag, maker, name in ((args.dense, dense_tall, "dense"), (args.noisy, noisy_tall, "noisy"),
                              (args.uniform, uniform_tall, "uniform")):
        if flag:
            n, d = _shape(flag)
            sets.append((f"{name} {n}x{d}", lambda maker=maker, n=n, d=d: maker(n, d)))
    if args.clicks:
        sets.append((f"clicks {args.clicks}", lambda: clicks(args.clicks)))
    print(f"{'data':16s} {'coupling':>8s} {'loss':14s} {'C':>6s} {'side':7s} {'budget':>6s} {'CPU s to 1e-6':>14s} "
          f"{'epochs':>7s}")
    for label, load in sets:
        X, y = load()
        coupling = feature_coupling(X)
        for loss in losses:
            for C in Cs:
                for side, entry in zip(("dual", "primal"), SIDES[loss]):
                    extra = {"loss": "squared_hinge"} if entry == "svm" else {}
                    problem = make_problem(entry, X, y, C=C, fit_intercept=False, **extra)
                    for budget in budgets:
                        cpu, epochs = cpu_to_target(problem, budget, args.repeats)
                        print(f"{label:16s} {coupling:8.3g} {loss:14s} {C:6g} {side:7s} {str(budget or 'all'):>6s} "
                              f"{cpu:14.3f} {epochs:7.1f}", flush=True)


if __name__ == "__main__":
    main()
