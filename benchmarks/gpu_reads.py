"""Disk -> GPU reads (needs a CUDA GPU; kvikio optional): a gap-chosen set of coordinates of a
coordinate-major .npy read into GPU memory two ways, side by side on the same sets:

- ``ours``: solvers.storage.reader.DiskMatrix (O_DIRECT, its threads) into page-locked host memory,
  then one host -> device copy: what the disk tier and the RAM tier do today;
- ``kvikio``: kvikio's CuFile.pread straight into device memory (GPUDirect Storage where the
  machine has it; in kvikio's compatibility mode, its own POSIX threads and bounce buffers),
  one pread per run of adjacent coordinates;
- ``kvikio-compat``: the same with KVIKIO_COMPAT_MODE forced on (POSIX through the page cache).

Prints what kvikio found (compat mode, GDS), the disk's cold sequential rate, then per set
density the medians over trials of GB/s (the coordinates' bytes over the wall time until they
are in GPU memory) and each method's share of the same trial's cold sequential read. The page
cache is dropped before every read (``/proc/sys/vm/drop_caches`` as root, else
posix_fadvise DONTNEED on the file); the first trial checks every method's bytes against the file.

    python -m benchmarks.gpu_reads --gb 2 --trials 5
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table
from solvers.duhl.block.devices import NoCudaDevice, check_device
from solvers.storage.reader import DiskMatrix, aligned_empty, write_coordinate_major
from tasks.resources import cold_read_bandwidth


def make_store(path, gb, length):
    n = max(2, int(gb * 1e9 / 8 / length))
    if path.exists() and np.load(path, mmap_mode="r").shape == (n, length):
        return
    rng = np.random.default_rng(0)
    step = max(1, (64 << 20) // (8 * length))
    blocks = (rng.standard_normal((min(step, n - lo), length)) for lo in range(0, n, step))
    write_coordinate_major(path, n, length, blocks)


def drop_cache(path):
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def print_block_queue(path):
    """The block device's request limits (a virtual disk's O_DIRECT rate depends on them)."""
    dev = os.stat(path).st_dev
    queue = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    queue = queue / "queue" if (queue / "queue").exists() else queue / ".." / "queue"
    keys = ("max_sectors_kb", "max_hw_sectors_kb", "nr_requests", "read_ahead_kb", "rotational")
    values = {k: (queue / k).read_text().strip() for k in keys if (queue / k).exists()}
    print(f"block queue of {path}: {values}")


def pick(n, k, density, rng):
    """k coordinates spread over a window of k / density of the n (sorted)."""
    span = min(n, max(k, int(k / density)))
    lo = int(rng.integers(0, n - span + 1))
    return np.sort(lo + rng.choice(span, size=k, replace=False))


def runs(coords):
    """(first coordinate, count, first row) of each run of adjacent coordinates."""
    cut = np.flatnonzero(np.diff(coords) != 1) + 1
    starts = np.concatenate([[0], cut])
    counts = np.diff(np.concatenate([starts, [coords.size]]))
    return coords[starts], counts, starts


def read_ours(matrix, coords, host, dev, cp):
    matrix.read_into(coords, host[:coords.size])
    dev[:coords.size].set(host[:coords.size])
    cp.cuda.runtime.deviceSynchronize()


def read_kvikio(f, offset, row_bytes, coords, dev, cp):
    futures = [f.pread(dev[row:row + count], count * row_bytes, offset + int(c) * row_bytes)
               for c, count, row in zip(*runs(coords))]
    for fut in futures:
        fut.get()
    cp.cuda.runtime.deviceSynchronize()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=".cache/gpu_reads/X.npy")
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--length", type=int, default=40000, help="values per coordinate (a Lasso column)")
    parser.add_argument("--set-mb", type=float, default=512.0)
    parser.add_argument("--densities", default="0.02,0.25,1")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        check_device("cuda")
    except NoCudaDevice as err:
        raise SystemExit(f"bench-gpu-reads needs a CUDA GPU: {err}") from None
    os.environ.setdefault("KVIKIO_NTHREADS", str(args.threads))
    import cupy as cp
    try:
        import kvikio
        import kvikio.defaults
    except ImportError as err:
        kvikio = None
        print(f"kvikio not importable ({err}): ours only")
    path = Path(args.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_store(path, args.gb, args.length)
    print(f"store {path} ({path.stat().st_size / 1e9:.2f} GB) ready in {time.perf_counter() - t0:.1f} s")
    if kvikio is not None:
        print(f"kvikio {kvikio.__version__}: compat_mode {kvikio.defaults.get('compat_mode')}, "
              f"threads {kvikio.defaults.get('num_threads')}, task_size {kvikio.defaults.get('task_size')}; "
              f"/proc/driver/nvidia-fs exists: {Path('/proc/driver/nvidia-fs').exists()}")
        try:
            from kvikio import cufile_driver
            print(f"cuFile: {dict(cufile_driver.properties.__dict__) if hasattr(cufile_driver.properties, '__dict__') else cufile_driver.properties}")
        except Exception as err:  # noqa: BLE001 - a report, not a requirement
            print(f"cuFile driver properties unavailable: {type(err).__name__}: {err}")
    matrix = DiskMatrix(path, threads=args.threads, max_request=2 << 20)
    print_block_queue(path)
    n, row_bytes = matrix.shape[0], matrix.row_bytes
    k = max(1, min(n, int(args.set_mb * 1e6 / row_bytes)))
    host = aligned_empty((k, matrix.shape[1]), matrix.dtype)
    cp.cuda.runtime.hostRegister(host.ctypes.data, host.nbytes, 0)  # page-locked: async DMA
    dev = cp.empty((k, matrix.shape[1]), matrix.dtype)
    reference = np.load(path, mmap_mode="r")
    buffered = DiskMatrix(path, threads=args.threads, max_request=2 << 20, direct=False)
    big = DiskMatrix(path, threads=args.threads, max_request=8 << 20)
    methods = {"ours": lambda c: read_ours(matrix, c, host, dev, cp),
               "ours-8MB": lambda c: read_ours(big, c, host, dev, cp),
               "ours-buffered": lambda c: read_ours(buffered, c, host, dev, cp)}
    if kvikio is not None:
        handle = kvikio.CuFile(path, "r")
        methods["kvikio"] = lambda c: read_kvikio(handle, matrix.offset, row_bytes, c, dev, cp)

        def compat(c):
            kvikio.defaults.set("compat_mode", kvikio.CompatMode.ON)
            try:
                with kvikio.CuFile(path, "r") as f:
                    read_kvikio(f, matrix.offset, row_bytes, c, dev, cp)
            finally:
                kvikio.defaults.set("compat_mode", kvikio.CompatMode.AUTO)
        methods["kvikio-compat"] = compat
    rng = np.random.default_rng(1)
    rows = []
    for density in [float(d) for d in args.densities.split(",")]:
        rates = {m: [] for m in methods}
        shares = {m: [] for m in methods}
        for trial in range(args.trials):
            coords = pick(n, k, density, rng)
            drop_cache(path)
            seq = cold_read_bandwidth(path, max_bytes=256 << 20)
            order = list(methods)[trial % len(methods):] + list(methods)[:trial % len(methods)]
            for m in order:
                drop_cache(path)
                t = time.perf_counter()
                methods[m](coords)
                s = time.perf_counter() - t
                rates[m].append(coords.size * row_bytes / s / 1e9)
                shares[m].append(rates[m][-1] / seq)
                if trial == 0:
                    got = cp.asnumpy(dev[:coords.size])
                    if not np.array_equal(got, reference[coords]):
                        raise SystemExit(f"{m} read wrong bytes at density {density}")
        for m in methods:
            rows.append({"density": density, "method": m, "coords": k, "set_gb": round(k * row_bytes / 1e9, 3),
                         "gbps": round(statistics.median(rates[m]), 3),
                         "vs_sequential": round(statistics.median(shares[m]), 2)})
            print(rows[-1], flush=True)
    print_table(rows, f"disk -> GPU, {args.threads} threads, medians of {args.trials} trials "
                      f"(every method's bytes checked against the file in the first trial)")


if __name__ == "__main__":
    main()
