"""What the benchmarks share: timing, the read bandwidth (the floor of any epoch),
and the synthetic problems they build."""

import statistics
import time
from pathlib import Path

import numpy as np

W8A = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "w8a"


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_bandwidth(nbytes=1 << 28):
    """GB/s of a streaming read (BLAS dot of a large array with itself), the floor of any epoch."""
    x = np.ones(nbytes // 8)
    return x.nbytes / median_time(lambda: x @ x, 5) / 1e9


def lasso_problem(n, d, n_informative, alpha_ratio, seed=0):
    rng = np.random.default_rng(seed)
    X = np.asfortranarray(rng.standard_normal((n, d)))
    coef = np.zeros(d)
    coef[rng.choice(d, n_informative, replace=False)] = 3 * rng.standard_normal(n_informative)
    y = X @ coef + rng.standard_normal(n)
    alpha = alpha_ratio * np.abs(X.T @ (y - y.mean())).max() / n
    return X, y, alpha


def svm_problem(n, d, C, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sign(X @ rng.standard_normal(d))
    return X, y, C


def print_table(rows, title):
    keys = list(rows[0])
    print(f"\n### {title}\n")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()]
        print("| " + " | ".join(cells) + " |")
