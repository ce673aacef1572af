"""Where DuHL's memory goes beside the data: its allocations by source line, per coordinate.

    python -m benchmarks.solver_memory                          # logistic in the dual, 1M rows
    python -m benchmarks.solver_memory --model lasso --rows 200000 --features 20000

A synthetic CSR problem (``--rows`` x ``--features``, ``--nnz`` binary entries a row, labels
+-1 with 30% positive), one epoch of DuHL at ``--budget`` (a share of the data in the block).
NumPy registers its buffers with tracemalloc, so the Python side's arrays are counted; what
Numba allocates inside compiled code is not. Printed: the data's bytes, the peak of the
solve's allocations, and, when the swap loop is first entered, the allocations that are alive
by the solver line that made them, each per coordinate (a sample of a dual model, a feature of
the Lasso family). To take that snapshot the module's ``run_swap_slice`` is wrapped, in this
process only. The first solve, on a slice of the rows, compiles (or loads) the kernels and is
not counted.
"""

import argparse
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import solvers
import solvers.duhl.loops.swap as swap
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

ROOT = Path(solvers.__file__).resolve().parents[1]


def synthetic(rows: int, features: int, nnz: int, seed: int = 0):
    """CSR rows of ``nnz`` binary entries at uniform features, and labels +-1 (30% positive)."""
    rng = np.random.default_rng(seed)
    indptr = np.arange(0, rows * nnz + 1, nnz, dtype=np.int64)
    indices = rng.integers(0, features, rows * nnz).astype(np.int32)
    X = sp.csr_matrix((np.ones(rows * nnz), indices, indptr), shape=(rows, features))
    return X, np.where(rng.random(rows) < 0.3, 1.0, -1.0)


def measure(model: str, X, y, budget: float, top: int = 12) -> dict:
    """One epoch of DuHL on (X, y) under tracemalloc: the peak, and the solver's live allocations by
    line when the swap loop starts (the largest ``top``)."""
    solver = DuHL(memory_budget=budget, max_epochs=1, tol=0.0)
    small = min(X.shape[0], 2000)
    DuHL(memory_budget=budget, max_epochs=1, tol=0.0).solve(make_problem(model, X[:small], y[:small]))
    problem = make_problem(model, X, y)
    snapshots = []
    loop = swap.run_swap_slice

    def first_entry(*args):
        if not snapshots:
            snapshots.append(tracemalloc.take_snapshot())
        return loop(*args)

    swap.run_swap_slice = first_entry
    tracemalloc.start(1)
    try:
        solver.solve(problem)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        swap.run_swap_slice = loop
    lines = []
    if snapshots:
        only = [tracemalloc.Filter(True, str(ROOT / "solvers" / "*"))]
        for stat in snapshots[0].filter_traces(only).statistics("lineno")[:top]:
            frame = stat.traceback[0]
            lines.append((str(Path(frame.filename).relative_to(ROOT)), frame.lineno, stat.size))
    return {"peak": peak, "lines": lines, "coords": problem.n_coords}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="logistic", help="a model entry (default: logistic, in the dual)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=1 << 16)
    parser.add_argument("--nnz", type=int, default=5, help="entries a row")
    parser.add_argument("--budget", type=float, default=0.25, help="memory_budget: the block's share of the data")
    parser.add_argument("--top", type=int, default=12, help="lines listed")
    args = parser.parse_args(argv)
    X, y = synthetic(args.rows, args.features, args.nnz)
    data = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    result = measure(args.model, X, y, args.budget, args.top)
    n = result["coords"]
    print(f"{args.model}: {args.rows:,} x {args.features:,}, {args.nnz} entries a row; {n:,} coordinates; "
          f"memory_budget {args.budget}")
    print(f"data (CSR) {data / 1e6:.1f} MB; the solve's allocations at their peak {result['peak'] / 1e6:.1f} MB, "
          f"{result['peak'] / n:.0f} B a coordinate")
    print("alive when the swap loop starts, by line:")
    for path, line, size in result["lines"]:
        print(f"  {size / 1e6:8.1f} MB  {size / n:6.1f} B/coord  {path}:{line}")
    return result


if __name__ == "__main__":
    main()
