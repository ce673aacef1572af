"""Ours alone, all data resident, on tall sparse L1 classifiers: seconds to a certified rel_gap.

    python -m benchmarks.sparse_classifiers                # 3 seeds each, target 1e-6
    python -m benchmarks.sparse_classifiers --repeats 5 --only "C=0.1"

The full bench's sparse L1 logistic regression (100,000 x 20,000 at 0.1%, C = 1) and four more of
its kind, each on the side ``dual="auto"`` picks (the primal): a sparser solution (C = 0.1), the
L1 squared hinge, a square set and a taller one; labels from a noisy linear score of a tenth of
the features (:func:`benchmarks.peers.noisy_linear_labels`). A warm-up solve first (excluded),
then the median of ``--repeats`` seeds, with the epochs and the solution's non-zeros. For
before/after comparisons of the solver's rounds: run it from each tree in turn.
"""

import argparse
import time

import numpy as np
import scipy.sparse as sp

from benchmarks.peers import classifier, noisy_linear_labels
from solvers.duhl import DuHL

SETS = [  # (n_samples, n_features, density, family, C)
    (100000, 20000, 0.001, "logistic", 1.0),
    (100000, 20000, 0.001, "logistic", 0.1),
    (100000, 20000, 0.001, "svm", 1.0),
    (50000, 50000, 0.0005, "logistic", 1.0),
    (200000, 5000, 0.002, "logistic", 0.3),
]


def build(n, d, density, family, C):
    rng = np.random.default_rng(2)  # the full bench's draw for its sparse L1 logistic regression
    X = sp.random(n, d, density=density, format="csc", random_state=rng, data_rvs=lambda k: rng.standard_normal(k))
    y = noisy_linear_labels(rng, X)
    params = dict(C=C, fit_intercept=False, penalty="l1")
    if family == "svm":
        params["loss"] = "squared_hinge"
    return classifier(family, X, y, **params)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--only", default=None, help="run only the sets whose label contains this text")
    args = parser.parse_args(argv)
    print(f"| set | median s to {args.tol:g} | epochs | non-zeros |\n|---|---|---|---|")
    for n, d, density, family, C in SETS:
        label = f"{family} l1 {n}x{d} {density:.2%} C={C:g}"
        if args.only is not None and args.only not in label:
            continue
        problem = build(n, d, density, family, C)
        DuHL(tol=args.tol, max_epochs=2).solve(problem)  # warm-up: compiled code loaded, pages touched
        runs = [DuHL(tol=args.tol, random_state=seed, max_time=60).solve(problem) for seed in range(args.repeats)]
        t = float(np.median([r.time_s if r.status == "converged" else np.inf for r in runs]))
        print(f"| {label} | {t:.3f} | {np.median([r.epochs for r in runs]):.1f} | {int((runs[-1].a != 0).sum())} |",
              flush=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")
