"""GPU benchmark (`make bench-gpu`): needs a CUDA GPU and `pip install -e .[gpu]`.

Prints, in one run:
1. per model, the TPA-SCD epoch time on a fully resident block against the
   HBM floor: block bytes / device-to-device copy bandwidth measured here (at
   the default concurrency, sqrt(coordinates) in flight, and with all of them),
   and the block's gap pass by each gap_kernel (tpa, blas);
2. host->device GB/s achieved by DuHL's swaps against a plain pinned copy
   measured here;
3. DuHL (gap) vs sequential vs random: time to rel_gap 1e-6 on a Lasso whose
   data is 4x the device budget (memory_budget=0.25), and gap without prefetch
   (swaps copied on demand, not staged while the device computes).
Medians of repeated runs; compilation happens in a warm-up, reported apart.
"""

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks.common import lasso_problem, print_table
from solvers.duhl.block.devices import NoCudaDevice, check_device
from solvers.duhl.block.resident import make_resident_set
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem


REPEATS = 5  # timed calls per measurement (after one untimed)


def _timed(fn, sync, repeats=None):
    repeats = repeats or REPEATS
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidths(xp, simulate, nbytes=1 << 28):
    """(device-to-device, pinned host-to-device) GB/s, each counting the bytes moved once."""
    src = xp.ones(nbytes // 8)
    dst = xp.empty_like(src)
    if simulate:  # NumPy copies: only the code path is real
        sync = lambda: None  # noqa: E731
        host = np.ones(nbytes // 8)
        h2d_copy = lambda: dst.__setitem__(Ellipsis, host)  # noqa: E731
    else:
        sync = xp.cuda.Device().synchronize
        pinned = xp.cuda.alloc_pinned_memory(nbytes)
        host = np.frombuffer(pinned, np.float64, nbytes // 8)
        h2d_copy = lambda: dst.set(host)  # noqa: E731
    d2d = nbytes / _timed(lambda: dst.__setitem__(Ellipsis, src), sync) / 1e9
    h2d = nbytes / _timed(h2d_copy, sync) / 1e9
    return d2d, h2d


def epoch_rows(device, d2d, n, d):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    k = min(20, d)
    y_reg = X[:, :k] @ rng.standard_normal(k) + rng.standard_normal(n)
    y_cls = np.sign(y_reg - np.median(y_reg))
    problems = {"lasso": make_problem("lasso", X, y_reg, alpha=0.01),
                "elastic_net": make_problem("elastic_net", X, y_reg, alpha=0.01),
                "ridge": make_problem("ridge", X, y_reg, alpha=1.0),
                "svm": make_problem("svm", X, y_cls, C=0.01),
                "logistic": make_problem("logistic", X, y_cls, C=0.01)}
    out = []
    for name, p in problems.items():
        block = make_resident_set(p, None, device=device)
        block.assign(np.arange(p.n_coords))
        dev = block.device
        order = np.random.default_rng(0).permutation(p.n_coords)
        with dev.context():  # the block's work runs on its compute stream
            st = dev.begin_round((np.zeros(p.n_coords), -p.c * p.b, np.zeros(1)))
            coords = dev.xp.asarray(block.row_coord)
            epoch = _timed(lambda: dev.epoch_dense(block.data, coords, order, st, p), dev.synchronize)
            dev.concurrency = p.n_coords  # every coordinate in flight (a Jacobi-like epoch)
            epoch_all = _timed(lambda: dev.epoch_dense(block.data, coords, order, st, p),
                               dev.synchronize)
            dev.concurrency = "auto"
            rows = np.arange(p.n_coords)
            gap_ms = {}
            for kind in ("tpa", "blas"):  # the block's gaps: a thread block each, or cuBLAS
                dev.gap_kernel = kind
                gap_ms[kind] = 1e3 * _timed(lambda: dev.gaps_dense(block.data, rows, coords, st, p),
                                            dev.synchronize)
        floor = block.data.nbytes / (d2d * 1e9)
        out.append(dict(model=name, coords=p.n_coords, block_gb=block.data.nbytes / 1e9,
                        epoch_ms=1e3 * epoch, hbm_floor_ms=1e3 * floor, vs_floor=epoch / floor,
                        all_in_flight_ms=1e3 * epoch_all,
                        gaps_tpa_ms=gap_ms["tpa"], gaps_blas_ms=gap_ms["blas"]))
    return out


def swap_rate(device, n, d):
    """GB/s of DuHL's swaps: a full block of new coordinates, host->device."""
    X, y, alpha = lasso_problem(n, d, min(20, d), 0.1)
    p = make_problem("lasso", X, y, alpha=alpha)
    block = make_resident_set(p, int(0.25 * p.coord_bytes.sum()), device=device)
    k = block.data.shape[0]
    halves = [np.arange(k), np.arange(k, 2 * k)]
    times = []
    for i in range(6):
        before = block.bytes_h2d
        t0 = time.perf_counter()
        block.assign(halves[i % 2])
        block.device.synchronize()
        times.append((block.bytes_h2d - before) / (time.perf_counter() - t0) / 1e9)
    return statistics.median(times[1:])


def duhl_rows(device, n, d, k, repeats, max_time=300):
    X, y, alpha = lasso_problem(n, d, k, 0.05)
    p = make_problem("lasso", X, y, alpha=alpha)
    rows = []
    arms = (("gap", "gap", "auto"), ("gap, no prefetch", "gap", 0.0),
            ("sequential", "sequential", "auto"), ("random", "random", "auto"))
    for arm, selection, prefetch in arms:
        results = [DuHL(memory_budget=0.25, selection=selection, tol=1e-6, max_time=max_time,
                        random_state=s, device=device, prefetch=prefetch).solve(p)
                   for s in range(repeats)]
        rows.append(dict(arm=arm, status=results[0].status,
                         time_s=statistics.median(r.time_s for r in results),
                         epochs=statistics.median(r.epochs for r in results),
                         gb_h2d=statistics.median(r.bytes_h2d for r in results) / 1e9,
                         prefetch_hits=statistics.median(r.prefetch_hits for r in results)))
    for r in rows:
        r["time_vs_gap"] = r["time_s"] / rows[0]["time_s"]
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description="GPU benchmark")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cuda_sim"), default="cuda",
                        help="cuda_sim: a smoke test of this script on tiny sizes under Numba's "
                             "CUDA simulator (its numbers mean nothing)")
    args = parser.parse_args(argv)
    simulate = args.device == "cuda_sim"
    try:
        check_device(args.device)
    except NoCudaDevice as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    if simulate:
        global REPEATS
        REPEATS = 1
        xp, name = np, "none (Numba's CUDA simulator)"
        sizes = dict(warm=None, epoch=(6, 4), duhl=(16, 24, 3))
        print("cuda_sim: a smoke test of the benchmark's code path; the numbers mean nothing")
    else:
        import cupy as xp

        name = xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        sizes = dict(warm=(64, 32), epoch=(20000, 1000) if args.quick else (100000, 2000),
                     duhl=(5000, 20000, 100) if args.quick else (20000, 50000, 200))
    t0 = time.perf_counter()
    if sizes["warm"]:  # the simulator compiles nothing
        epoch_rows(args.device, 1.0, *sizes["warm"])  # compiles every kernel signature used below
    print(f"warm-up (kernel compilation): {time.perf_counter() - t0:.1f} s, excluded; GPU: {name}")
    d2d, h2d = copy_bandwidths(xp, simulate, nbytes=1 << (16 if simulate else 28))
    print(f"device-to-device copy: {d2d:.0f} GB/s; pinned host-to-device copy: {h2d:.1f} GB/s")
    n, d = sizes["epoch"]
    print_table(epoch_rows(args.device, d2d, n, d), f"TPA-SCD epoch, {n} x {d} float64, all resident")
    rate = swap_rate(args.device, n, d)
    print(f"\nDuHL swaps host->device: {rate:.1f} GB/s = {rate / h2d:.0%} of the pinned copy")
    n, d, k = sizes["duhl"]
    print_table(duhl_rows(args.device, n, d, k, 1 if simulate else args.repeats,
                          max_time=0.5 if simulate else 300),
                f"Lasso {n} x {d} (data 4x the budget): time to rel_gap 1e-6")


if __name__ == "__main__":
    main()
