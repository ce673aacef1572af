"""Held-out log-loss against Vowpal Wabbit: how long each takes to weights that predict unseen rows
as well as the regularised optimum does, on click-like sparse data (issue 40's comparison).

    python -m benchmarks.vw_holdout                                # 400,000 rows train, 100,000 held out
    python -m benchmarks.vw_holdout --train 2000000 --C 0.01 --repeats 5

The data: ``synthetic_criteo`` (binary rows of about 38 features of 2^hash_bits, power-law feature
frequencies, labels from a sparse logistic model), made once into the dataset cache; its first
``--train`` rows train, the next ``--test`` rows are held out. The objective, for every arm:
1/2 ||w||^2 + C sum_i log(1 + exp(-y_i <w, x_i>)), no intercept.

- The reference: our LogisticRegression to tol 1e-10; L* its held-out log-loss, P* its objective.
- ours: LogisticRegression (``dual="auto"``: the dual here, more features than rows) at tol 1e-1 .. 1e-8,
  each a fit from zero, timed around ``fit`` (one fit before, not counted, compiles).
- vw online: Vowpal Wabbit's online passes 1 .. 10 (its own learning rate; ``--l2 = 1/(n C)``), each fit
  from its binary cache (the cache's build, from VW's text, is timed apart and reported); and the same
  with ``--l2`` near 0, as VW is used for held-out loss (few passes, no penalty).
- vw --bfgs: 2 .. 256 passes of VW's L-BFGS (``--l2 = 1/C``).
VW's settings are tasks.peers' ``peer_vw`` and ``peer_vw_bfgs`` arms', scored by our objective.

Each point's time is the median of ``--repeats`` fits, BLAS pinned to one thread (VW's fits use one).
Reported per arm: the time to the first point of its schedule whose held-out log-loss is within
``--within`` (0.1%) of L* (or "never" and its best), and the time to suboptimality (P - P*) / P* at
most 1e-6. Ours is certified along the way (its rel_gap bounds the suboptimality).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from solvers.duhl import LogisticRegression
from solvers.glm.problems import make_problem
from tasks.data import SyntheticCriteoData, load_dataset
from tasks.peers import make_peer

OURS_TOLS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
REFERENCE_TOL = 1e-10
SUBOPTIMALITY = 1e-6


def click_data(train: int, test: int, hash_bits: int, cache: Path):
    """(X_train, y_train, X_test, y_test): CSR float64 rows, labels -1 / 1."""
    ds = load_dataset(SyntheticCriteoData(n_samples=train + test, hash_bits=hash_bits), cache)
    X = ds.X.astype(np.float64)  # (the store read into RAM)
    y = np.where(np.asarray(ds.y) > 0, 1.0, -1.0)
    return X[:train], y[:train], X[train:train + test], y[train:train + test]


def log_loss(X, y, w) -> float:
    """The mean logistic loss of margins y <w, x> (labels -1 / 1)."""
    return float(np.logaddexp(0.0, -y * (X @ w)).mean())


def objective(X, y, w, C) -> float:
    return float(0.5 * w @ w + C * np.logaddexp(0.0, -y * (X @ w)).sum())


def ours(X, y, C, repeats):
    """(tol, median seconds, w, certified rel_gap) for each of OURS_TOLS."""
    def fit(tol):
        return LogisticRegression(C=C, fit_intercept=False, tol=tol, max_iter=1_000_000, random_state=0).fit(X, y)

    fit(1e-1)  # compiles (not counted)
    points = []
    for tol in OURS_TOLS:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            est = fit(tol)
            times.append(time.perf_counter() - start)
        points.append((tol, statistics.median(times), est.coef_.ravel(), float(est.history_["rel_gap"].iloc[-1])))
    return points


def vw(X, y, C, name, repeats):
    """(passes, seconds, w) for each point of VW's schedule, and the cache's build seconds."""
    problem = make_problem("logistic", X, y, C=C, fit_intercept=False)
    with tempfile.TemporaryDirectory(prefix="vw-holdout-") as folder:
        peer = make_peer(name, folder=folder)
        fits = peer.fits(problem)  # builds VW's text and binary cache (timed apart: peer.cache_s)
        points = []
        for passes, make_fit in fits:
            times, w = [], None
            for _ in range(repeats):
                w, seconds = make_fit()()  # the seconds of VW's passes, not of reading its weights back
                times.append(seconds)
            points.append((passes, statistics.median(times), w))
    return points, peer.cache_s


def first_within(points, key, bound):
    """The first point (in schedule order) whose key is at most bound, or None."""
    return next((p for p in points if key(p) <= bound), None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=400_000)
    parser.add_argument("--test", type=int, default=100_000)
    parser.add_argument("--hash-bits", type=int, default=20)
    parser.add_argument("--C", type=float, default=0.03, help="the best held-out log-loss of the optimum on the default data, of 0.01, 0.03, 0.1, 0.3")
    parser.add_argument("--within", type=float, default=1e-3, help="relative distance to L* that counts as reached")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=".cache/bench-vw-holdout")
    parser.add_argument("--no-bfgs", action="store_true", help="skip VW --bfgs")
    args = parser.parse_args(argv)
    threadpool_limits(1)
    X, y, X_test, y_test = click_data(args.train, args.test, args.hash_bits, Path(args.cache))
    start = time.perf_counter()
    ref = LogisticRegression(C=args.C, fit_intercept=False, tol=REFERENCE_TOL, max_iter=10_000_000, random_state=0)
    w_star = ref.fit(X, y).coef_.ravel()
    reference_s = time.perf_counter() - start
    L_star, P_star = log_loss(X_test, y_test, w_star), objective(X, y, w_star, args.C)
    bound = L_star * (1.0 + args.within)
    print(f"### {args.train:,} training rows, {args.test:,} held out, {X.shape[1]:,} features "
          f"({X.nnz / X.shape[0]:.1f} a row), C = {args.C:g}, medians of {args.repeats}\n")
    print(f"The reference (ours at tol {REFERENCE_TOL:g}, {reference_s:.1f} s): held-out log-loss L* = {L_star:.6f}, "
          f"objective P* = {P_star:.8g}.\n")
    print("| arm | point | seconds | held-out log-loss / L* - 1 | suboptimality (P - P*) / P* | certified rel_gap |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    summary, notes = [], []

    def report(arm, points):
        scored = []
        for label, seconds, w, gap in points:
            loss = log_loss(X_test, y_test, w)
            sub = (objective(X, y, w, args.C) - P_star) / P_star
            scored.append((label, seconds, loss, sub))
            print(f"| {arm} | {label} | {seconds:.3f} | {loss / L_star - 1:+.2e} | {sub:.2e} | "
                  f"{'' if gap is None else f'{gap:.1e}'} |", flush=True)
        held = first_within(scored, lambda p: p[2], bound)
        opt = first_within(scored, lambda p: p[3], SUBOPTIMALITY)
        summary.append((arm, held, opt, min(scored, key=lambda p: p[2])))

    report("ours (DuHL, LogisticRegression)", [(f"tol {t:g}", s, w, gap) for t, s, w, gap in ours(X, y, args.C, args.repeats)])
    # VW online with --l2 ~ 0 (C = 1e30): how VW users train for held-out loss, a few passes unpenalised
    for name, label, vw_C in (("peer_vw", "vw online", args.C), ("peer_vw", "vw online, --l2 ~ 0", 1e30),
                              ("peer_vw_bfgs", "vw --bfgs", args.C)):
        if name == "peer_vw_bfgs" and args.no_bfgs:
            continue
        points, cache_s = vw(X, y, vw_C, name, args.repeats)
        report(label, [(f"{k} passes", s, w, None) for k, s, w in points])
        notes.append(f"{label}: its cache built in {cache_s:.2f} s (not in its times)")
    print(f"\n| arm | time to held-out log-loss within {args.within:.1%} of L* | time to suboptimality "
          f"{SUBOPTIMALITY:g} | best held-out log-loss / L* - 1 |")
    print("| --- | --- | --- | --- |")
    for arm, held, opt, best in summary:
        reach = f"{held[1]:.3f} s ({held[0]})" if held else "never"
        reach_opt = f"{opt[1]:.3f} s ({opt[0]})" if opt else "never"
        print(f"| {arm} | {reach} | {reach_opt} | {best[2] / L_star - 1:+.2e} ({best[0]}) |")
    print(f"\n{'; '.join(notes)}." if notes else "")


if __name__ == "__main__":
    main()
