"""A path over C chosen by cross-validation: LogisticRegressionCV's warm-started path against the
same solves from zero and against scikit-learn's LogisticRegressionCV (liblinear), L1 or L2
logistic regression, the same (shuffled, stratified) folds for every arm.

    python -m benchmarks.logistic_path                          # w8a (all rows), L1, 10 Cs, 5 folds
    python -m benchmarks.logistic_path --w8a-rows 20000 --penalty l2 --repeats 5

Per arm: the wall seconds of the whole fit (the path on every fold, then the refit at the chosen C;
median of ``--repeats`` after one warm-up fit, not counted, that compiles), the C it chose, and how
far its held-out scores are from those of liblinear run to tol 1e-6 at every fold and C (the
reference: the same accuracies mean the same choice for the same reason). BLAS pinned to one thread.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.linear_model import LogisticRegressionCV as SkLogisticCV
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from benchmarks.common import W8A
from benchmarks.peers import _w8a
from solvers.duhl import LogisticRegression, LogisticRegressionCV


REFERENCE_TOL = 1e-6


def reference_scores(X, y, folds, Cs, l1_ratio):
    """Held-out accuracy of liblinear at REFERENCE_TOL, per fold and C."""
    scores = np.empty((len(folds), len(Cs)))
    for k, (train, test) in enumerate(folds):
        for j, C in enumerate(Cs):
            sk = SkLogistic(l1_ratio=l1_ratio, C=C, solver="liblinear", tol=REFERENCE_TOL, max_iter=100000)
            scores[k, j] = sk.fit(X[train], y[train]).score(X[test], y[test])
    return scores


def cold_path(X, y, folds, Cs, penalty, tol):
    """The same solves as LogisticRegressionCV, each from zero: (scores, the chosen C)."""
    scores = np.empty((len(folds), len(Cs)))
    for k, (train, test) in enumerate(folds):
        for j, C in enumerate(Cs):
            est = LogisticRegression(penalty=penalty, C=C, tol=tol, max_iter=100000, random_state=0)
            scores[k, j] = est.fit(X[train], y[train]).score(X[test], y[test])
    C = Cs[int(np.argmax(scores.mean(axis=0)))]
    LogisticRegression(penalty=penalty, C=C, tol=tol, max_iter=100000, random_state=0).fit(X, y)
    return scores, C


def arms(X, y, folds, Cs, penalty, tol):
    l1_ratio = 1.0 if penalty == "l1" else 0.0

    def warm():
        cv = LogisticRegressionCV(Cs=Cs, cv=folds, penalty=penalty, tol=tol, max_iter=100000, random_state=0)
        cv.fit(X, y)
        return cv.scores_[1], cv.C_[0]

    def liblinear():
        cv = SkLogisticCV(Cs=Cs, cv=folds, l1_ratios=(l1_ratio,), solver="liblinear", tol=tol, max_iter=100000)
        cv.fit(X, y)
        return np.asarray(cv.scores_[1]).reshape(len(folds), len(Cs)), float(np.ravel(cv.C_)[0])

    return {"duhl-path (warm starts)": warm, "duhl, each C from zero": lambda: cold_path(X, y, folds, Cs, penalty, tol),
            "liblinear (scikit-learn's CV)": liblinear}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--w8a-rows", type=int, default=None, help="the first rows of w8a (default: all)")
    parser.add_argument("--dense", default=None, help="a dense NxD set instead of w8a (make_classification)")
    parser.add_argument("--penalty", choices=("l1", "l2"), default="l1")
    parser.add_argument("--Cs", default="1e-3:1e1:10", help="lo:hi:count on a log scale")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--tol", type=float, default=1e-4, help="every arm's tol (each solver's own criterion)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    threadpool_limits(1)
    if args.dense:
        n, d = (int(v) for v in args.dense.lower().split("x"))
        X, y = make_classification(n_samples=n, n_features=d, n_informative=max(2, d // 5), random_state=0)
        label = f"dense {n}x{d}"
    else:
        X, y = _w8a(args.w8a_rows)
        label = f"w8a[{args.w8a_rows or 'all'}] ({W8A.name})"
    lo, hi, count = args.Cs.split(":")
    Cs = np.logspace(np.log10(float(lo)), np.log10(float(hi)), int(count))
    # shuffled: w8a's rows are not in random order (its first 20,000 hold fewer positives than the rest)
    folds = list(StratifiedKFold(args.folds, shuffle=True, random_state=0).split(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (liblinear's ConvergenceWarning at the largest Cs)
        t0 = time.perf_counter()
        reference = reference_scores(X, y, folds, Cs, 1.0 if args.penalty == "l1" else 0.0)
        reference_s = time.perf_counter() - t0
        best = Cs[int(np.argmax(reference.mean(axis=0)))]
        LogisticRegression(penalty=args.penalty, C=1.0, max_iter=2).fit(X, y)  # warm-up: compiles
        print(f"### {label}, {args.penalty} logistic regression, {len(Cs)} Cs from {Cs[0]:g} to {Cs[-1]:g}, "
              f"{args.folds} folds, tol {args.tol:g} ({args.repeats} repeats; the reference chooses C = {best:.4g}, "
              f"liblinear at tol {REFERENCE_TOL:g}: {reference_s:.1f} s)\n")
        print("| arm | seconds (median) | each | C chosen | max score difference from the reference |")
        print("| --- | --- | --- | --- | --- |")
        for name, run in arms(X, y, folds, Cs, args.penalty, args.tol).items():
            seconds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                scores, C = run()
                seconds.append(time.perf_counter() - t0)
            diff = float(np.abs(scores - reference).max())
            print(f"| {name} | {statistics.median(seconds):.2f} | {', '.join(f'{s:.2f}' for s in seconds)} | "
                  f"{C:.4g} | {diff:.2g} |", flush=True)


if __name__ == "__main__":
    main()
