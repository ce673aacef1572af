"""Disk -> RAM -> GPU (`make bench-gpu-disk`, needs a CUDA GPU): DuHL on a dense Lasso whose X
lives in a .npy on disk (the dataset cache's synthetic_dense, made once, a block of columns at a
time), with a RAM tier of ``--host-budget`` and a GPU block of ``--memory-budget`` (both chosen
by the gaps; solvers.storage.ram_tier), against the file streamed through the same tiers in order
(sequential) and the CPU's disk tier (the RAM block is the device, as `make out-of-core` runs it).

Prints the disk's cold read bandwidth measured here, then per arm: status, time to the target
rel_gap, GB read from disk by the trace and by the OS (/proc/self/io), passes over the data, GB
host -> device, rounds, the final certified rel_gap. An arm named with ``:buffered`` (``gap:buffered``)
reads without O_DIRECT, its pages dropped after each read. Kernel compilation happens in a warm-up on
a small problem, reported apart; every arm reads its own fresh view of the file (O_DIRECT).
"""

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table
from solvers.duhl.block.devices import NoCudaDevice, check_device
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem
from tasks.data import load_dataset
from tasks.problems import build_problem_on_disk, coordinate_stats
from tasks.resources import cold_read_bandwidth, os_read_bytes

MODEL = {"name": "lasso", "alpha": 0.3, "fit_intercept": False}  # the out_of_core preset's


def dataset(gb, n_samples, cache_dir):
    n_features = max(1, int(gb * 1e9 / 8 / n_samples))
    cfg = {"name": "synthetic_dense", "n_samples": n_samples, "n_features": n_features, "n_informative": 100}
    t0 = time.perf_counter()
    data = load_dataset(cfg, Path(cache_dir))
    return data, time.perf_counter() - t0


def warm_up(device):
    """Compiles every kernel the arms use on a small problem in RAM (float64, dense)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 64))
    p = make_problem("lasso", X, X[:, :5].sum(1), alpha=0.01)
    t0 = time.perf_counter()
    DuHL(memory_budget=0.3, device=device, tol=1e-6, random_state=0).solve(p)
    return time.perf_counter() - t0


def run_arm(name, solver, folder, y, stats, nbytes):
    # "<arm>:buffered": the same arm reading through the page cache (pages dropped after each read)
    problem = build_problem_on_disk(MODEL, folder, y, stats, direct=False if name.endswith(":buffered") else None)
    os_before = os_read_bytes()
    r = solver.solve(problem)
    os_gb = (os_read_bytes() - os_before) / 1e9
    last = r.trace.iloc[-1]
    return {"arm": name, "status": r.status, "time_s": round(r.time_s, 2),
            "gb_disk": round(float(last["bytes_disk"]) / 1e9, 2), "gb_disk_os": round(os_gb, 2),
            "passes": round(float(last["bytes_disk"]) / nbytes, 2), "gb_h2d": round(r.bytes_h2d / 1e9, 2),
            "rounds": r.n_rounds, "rel_gap": f"{r.rel_gap:.2e}"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=4.0, help="size of X on disk (GB)")
    parser.add_argument("--n-samples", type=int, default=40000)
    parser.add_argument("--host-budget", type=float, default=0.25, help="RAM tier, a share of the data")
    parser.add_argument("--memory-budget", type=float, default=0.1, help="GPU block, a share of the data")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-time", type=float, default=150.0, help="seconds per arm")
    parser.add_argument("--arms", default="gap,sequential,cpu-gap",
                        help="comma-separated; an arm with ':buffered' appended reads without O_DIRECT")
    parser.add_argument("--cache-dir", default=".cache/data")
    parser.add_argument("--device", choices=("cuda", "cuda_sim"), default="cuda")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        try:
            check_device("cuda")
        except NoCudaDevice as err:
            raise SystemExit(f"bench-gpu-disk needs a CUDA GPU: {err}") from None
    data, made_s = dataset(args.gb, args.n_samples, args.cache_dir)
    folder, y = Path(data.path), np.asarray(data.y)
    nbytes = (folder / "X.npy").stat().st_size
    bandwidth = cold_read_bandwidth(folder / "X.npy")
    t0 = time.perf_counter()
    stats = coordinate_stats("lasso", folder)  # one pass the arms share (as the experiment's arms do)
    stats_s = time.perf_counter() - t0
    warm_s = warm_up(args.device)
    print(f"X on disk: {nbytes / 1e9:.2f} GB ({args.n_samples} samples); dataset ready in {made_s:.1f} s; "
          f"cold read {bandwidth:.2f} GB/s; feature statistics {stats_s:.1f} s and kernel warm-up "
          f"{warm_s:.1f} s, both excluded")
    common = dict(tol=args.tol, max_time=args.max_time, random_state=0, host_budget=args.host_budget)
    arms = {"gap": DuHL(selection="gap", device=args.device, memory_budget=args.memory_budget, **common),
            "sequential": DuHL(selection="sequential", refresh=0, device=args.device,
                               memory_budget=args.memory_budget, **common),
            "cpu-gap": DuHL(selection="gap", device="cpu", **common)}
    rows = []
    for name in args.arms.split(","):
        rows.append(run_arm(name, arms[name.split(":")[0]], folder, y, stats, nbytes))
        print(rows[-1], flush=True)
    print_table(rows, f"Lasso on disk ({nbytes / 1e9:.2f} GB): host_budget {args.host_budget}, GPU "
                      f"memory_budget {args.memory_budget}, target rel_gap {args.tol:g}, max_time "
                      f"{args.max_time:g} s; cold read {bandwidth:.2f} GB/s (one pass "
                      f"{nbytes / 1e9 / bandwidth:.1f} s)")


if __name__ == "__main__":
    main()
