"""Solver benchmark: our CPU epoch against scikit-learn's, and DuHL against streaming.

    python -m benchmarks.solvers            # full sizes (a few minutes on 2 cores)
    python -m benchmarks.solvers --quick    # small sizes (under a minute)

Prints, in one run: (1) the time of one coordinate descent epoch, ours vs
scikit-learn's Lasso, on a dense float64 problem and on w8a, as a ratio, with
the memory-bandwidth floor (data bytes / measured read bandwidth); (2) time,
epochs and bytes moved host->device to reach rel_gap 1e-6 for the gap,
sequential and random policies at memory_budget 0.25 (and all data resident)
on a Lasso with a sparse solution and on a hinge LinearSVC on w8a, one
local epoch per round for every policy (30 s at most per run); (3) on the same
problems, what prefetch (staging 0.2 of the budget) serves from staging per
policy, the share a GPU would hide behind compute, and the bytes it adds. Medians of
repeated runs; Numba compilation is done first and reported on its own; BLAS
and OpenMP pools are pinned to one thread, as our kernels use one.
"""

import argparse
import os
import statistics
import time

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from threadpoolctl import threadpool_info, threadpool_limits

from benchmarks.common import W8A, lasso_problem, median_time, print_table, read_bandwidth, svm_problem
from solvers.duhl.budget import split_budget
from solvers.duhl import DuHL
from solvers.duhl import compile_kernels
from solvers.glm.problems import make_problem
from solvers.kernels import cpu

def epoch_ratio(label, X, y, alpha, repeats, bandwidth):
    """Our SCD epoch vs scikit-learn's CD epoch on the same Lasso, from the same start."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import lasso_path

    problem = make_problem("lasso", X, y, alpha=alpha, fit_intercept=False)  # as lasso_path
    n_coords = problem.n_coords
    coords = np.arange(n_coords)
    rng = np.random.default_rng(0)

    def ours():
        a = np.zeros(n_coords)
        z, off = -problem.c * problem.b, np.zeros(1)
        for _ in range(5):
            cpu.scd_epoch_dense(problem.A, coords, rng.permutation(n_coords), a, z, off, problem.mu,
                                problem.sqnorm, problem.c, problem.theta) \
                if not problem.sparse else \
                cpu.scd_epoch_sparse(problem.A.indptr, problem.A.indices, problem.A.data, coords,
                                     rng.permutation(n_coords), a, z, off, problem.mu,
                                     problem.sqnorm, problem.c, problem.theta)

    def sklearn(k, screening):
        # the plain coordinate descent of sklearn.linear_model.Lasso (precompute=False);
        # scikit-learn >= 1.8 also screens features out (gap safe rules) unless told not to
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            lasso_path(X, y, alphas=[alpha], max_iter=k, tol=0.0, precompute=False,
                       do_screening=screening)

    ours_epoch = median_time(ours, repeats) / 5
    # fixed costs (validation, one gap) cancel in the difference
    sk_epoch, sk_screened = (
        (median_time(lambda: sklearn(6, scr), repeats) - median_time(lambda: sklearn(1, scr), repeats)) / 5
        for scr in (False, True))
    floor = int(problem.coord_bytes.sum()) / (bandwidth * 1e9)
    return dict(problem=label, ours_ms=1e3 * ours_epoch, sklearn_ms=1e3 * sk_epoch,
                ratio=ours_epoch / sk_epoch, sklearn_screened_ms=1e3 * sk_screened,
                floor_ms=1e3 * floor, vs_floor=ours_epoch / floor)


def duhl_arms(label, problem, repeats, budget=0.25, tol=1e-6, max_time=30, local_epochs=(1,)):
    """Each arm at its best of ``local_epochs`` (tuned on one run), then timed ``repeats`` times."""
    rows = []
    for arm, selection, mb in (("full", "gap", None), ("gap", "gap", budget),
                               ("sequential", "sequential", budget), ("random", "random", budget)):
        def run(H, seed):
            return DuHL(memory_budget=mb, selection=selection, local_epochs=H, tol=tol,
                        max_epochs=5000, max_time=max_time, random_state=seed).solve(problem)

        tried = {H: run(H, 0) for H in local_epochs}
        H = min(tried, key=lambda h: (not tried[h].converged, tried[h].time_s))
        results = [tried[H]] + [run(H, seed) for seed in range(1, repeats)]
        times = [r.time_s for r in results]
        mid = results[int(np.argsort(times)[len(times) // 2])]
        rows.append(dict(problem=label, arm=arm, local_epochs=H, status=mid.status,
                         time_s=statistics.median(times), epochs=mid.epochs,
                         gb_h2d=mid.bytes_h2d / 1e9, rel_gap=mid.rel_gap))
    by_arm = {r["arm"]: r for r in rows}
    for r in rows:
        r["time_vs_gap"] = r["time_s"] / by_arm["gap"]["time_s"]
    return rows


def prefetch_rows(label, problem, budget=0.25, share=0.2, tol=1e-6, max_time=60):
    """What DuHL's prefetch would hide on a GPU, counted on the CPU (the iterates, and so
    the swaps, hits and bytes, are the same on every device): each policy with ``share``
    of the budget as staging, against the same block without staging."""
    staged_budget = int(budget * int(problem.coord_bytes.sum()))
    block = split_budget(problem, staged_budget, share)[0]  # the same block, without staging
    rows = []
    for selection in ("gap", "sequential", "random"):
        kw = dict(selection=selection, tol=tol, max_epochs=5000, max_time=max_time, random_state=0)
        on = DuHL(memory_budget=f"{staged_budget}B", prefetch=share, **kw).solve(problem)
        # the same (Python) round loop as the staged run, which the compiled loop never takes: without
        # staging DuHL may route to the compiled one, whose refresh differs (other iterates, other times)
        off = DuHL(memory_budget=f"{block}B", prefetch=0.0, loop="python", **kw).solve(problem)
        swapped = int(on.trace.swaps.max())
        later = swapped - int(on.trace.n_resident.iloc[1])  # the first block cannot be staged
        rows.append(dict(problem=label, policy=selection, status=on.status,
                         same_iterates=bool(np.array_equal(on.a, off.a)), swapped_in=swapped,
                         hits=on.prefetch_hits, hit_share=on.prefetch_hits / max(swapped, 1),
                         hit_share_after_first=on.prefetch_hits / max(later, 1),
                         gb_no_prefetch=off.bytes_h2d / 1e9,
                         gb_on_demand=(on.bytes_h2d - on.bytes_prefetched) / 1e9,
                         gb_prefetched=on.bytes_prefetched / 1e9,
                         cpu_time_ratio=on.time_s / off.time_s))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    with threadpool_limits(1):
        t0 = time.perf_counter()
        compile_s = compile_kernels(["lasso", "svm"], jobs=os.cpu_count() or 1)
        print(f"Numba warm-up (compile or load from cache): {compile_s:.2f} s, excluded below")
        print("thread pools:", [(p["internal_api"], p["num_threads"]) for p in threadpool_info()],
              f"cores={os.cpu_count()}")
        bandwidth = read_bandwidth()
        print(f"measured read bandwidth: {bandwidth:.1f} GB/s (one thread)")

        n, d = (4000, 1000) if args.quick else (20000, 2000)
        X, y, alpha = lasso_problem(n, d, 20, 0.1)
        epoch_rows = [epoch_ratio(f"dense {n}x{d} float64", X, y, alpha, args.repeats, bandwidth)]
        if W8A.exists():
            Xw, yw = load_svmlight_file(str(W8A), n_features=300)
            Xw = sp.csc_matrix(Xw)  # scikit-learn's sparse CD wants CSC with 32-bit indices
            Xw.indices, Xw.indptr = Xw.indices.astype(np.int32), Xw.indptr.astype(np.int32)
            alpha_w = 0.01 * np.abs(Xw.T @ (yw - yw.mean())).max() / Xw.shape[0]
            epoch_rows.append(epoch_ratio("w8a (sparse)", Xw, yw, alpha_w, args.repeats, bandwidth))
        else:
            print(f"skipping w8a: {W8A} not found")
        print_table(epoch_rows, "One epoch: ours vs scikit-learn's coordinate descent")

        n, d, k = (2000, 4000, 40) if args.quick else (5000, 20000, 100)
        X, y, alpha = lasso_problem(n, d, k, 0.05)
        rows = duhl_arms(f"lasso {n}x{d}, {k} informative", make_problem("lasso", X, y, alpha=alpha),
                         args.repeats)
        if W8A.exists():
            Xw, yw = load_svmlight_file(str(W8A), n_features=300)
            if args.quick:
                Xw, yw = Xw[:10000], yw[:10000]
            rows += duhl_arms(f"hinge svm w8a[{Xw.shape[0]}], C=0.1",
                              make_problem("svm", Xw, yw, C=0.1), args.repeats)
        else:
            X, y, C = svm_problem(10000, 200, 0.01)
            rows += duhl_arms("hinge svm 10000x200", make_problem("svm", X, y, C=C), args.repeats)
        print_table(rows, "Time to rel_gap 1e-6 at memory_budget 0.25 (full = all data resident)")

        n, d, k = (2000, 4000, 40) if args.quick else (5000, 20000, 100)
        X, y, alpha = lasso_problem(n, d, k, 0.05)
        rows = prefetch_rows(f"lasso {n}x{d}", make_problem("lasso", X, y, alpha=alpha))
        if W8A.exists():
            Xw, yw = load_svmlight_file(str(W8A), n_features=300)
            rows += prefetch_rows(f"hinge svm w8a[{Xw.shape[0]}]", make_problem("svm", Xw, yw, C=0.1))
        print_table(rows, "Prefetch (0.2 of a 0.25 budget staged), to rel_gap 1e-6: swaps served "
                          "from staging (hidden behind compute on a GPU) and bytes moved")
        print(f"\ntotal benchmark time: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
