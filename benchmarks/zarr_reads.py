"""zarr or .npy for the disk tier (issue 14): the rate of reading a gap-chosen (scattered) quarter
of the coordinates of a dense Lasso's X, cold, from the layouts a user could hand the project.

    nice .venv/bin/python -m benchmarks.zarr_reads [--n-samples 10000 --n-features 3750 --repeats 5]

Writes one float64 Gaussian X (300 MB by default) a block of columns at a time as: the dataset
cache's ``X.npy`` (Fortran order, data at 4096 bytes), read by solvers.storage.reader.DiskMatrix
(O_DIRECT, 8 MiB requests on 4 threads) and by ``np.memmap`` fancy indexing; and zarr v3 stores
with a chunk per block of 1, 8 or 64 columns (full height), each uncompressed and Blosc
(lz4, byte shuffle), read with zarr's orthogonal selection (its defaults: async, 10 chunks at a
time). Each repeat draws a fresh scattered quarter of the columns, drops every file's pages
from the page cache (``POSIX_FADV_DONTNEED`` per file), and reads it once with every layout,
in a shuffled order. GB/s counts the coordinates' own bytes; the last column is the bytes the
OS read from storage for the process (/proc/self/io) over those bytes (readahead, whole
chunks). Medians (min-max) of the repeats.
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table
from solvers.storage.reader import DiskMatrix, aligned_empty, write_coordinate_major


def drop(path: Path) -> None:
    """Every file under ``path`` out of the page cache (cold reads)."""
    files = [path] if path.is_file() else [Path(r) / f for r, _, fs in os.walk(path) for f in fs]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def write(folder: Path, n: int, p: int, widths, seed: int = 0):
    import zarr
    from zarr.codecs import BloscCodec

    rng = np.random.default_rng(seed)
    block = 64
    stores = {}
    for w in widths:
        for codec in ("none", "blosc"):
            compressors = None if codec == "none" else [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
            stores[(w, codec)] = zarr.create_array(str(folder / f"w{w}-{codec}.zarr"), shape=(n, p), chunks=(n, w),
                                                   dtype="float64", compressors=compressors)

    def blocks():
        for j in range(0, p, block):
            cols = rng.standard_normal((n, min(block, p - j)))
            for array in stores.values():
                array[:, j:j + cols.shape[1]] = cols
            yield cols.T

    write_coordinate_major(folder / "X.npy", p, n, blocks(), fortran=True)
    os.sync()
    return stores


def os_read_bytes() -> int:
    """Bytes this process (all its threads) has had read from storage (/proc/self/io)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-samples", type=int, default=10_000)
    parser.add_argument("--n-features", type=int, default=3_750)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--dir", default=None, help="a folder on the disk to measure (default: a temporary one)")
    parser.add_argument("--zarr-concurrency", type=int, default=None,
                        help="zarr's async.concurrency (chunks in flight; default: zarr's own, 10)")
    args = parser.parse_args(argv)
    if args.zarr_concurrency:
        import zarr
        zarr.config.set({"async.concurrency": args.zarr_concurrency})
    n, p = args.n_samples, args.n_features
    folder = Path(tempfile.mkdtemp(prefix="zarr-reads-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        stores = write(folder, n, p, args.widths)
        import zarr
        print(f"X: {n} x {p} float64, {n * p * 8 / 1e6:.0f} MB; written in {time.perf_counter() - t0:.1f}s to {folder}; "
              f"zarr {zarr.__version__}, async.concurrency {zarr.config.get('async.concurrency')}")
        for (w, codec), array in stores.items():
            size = sum(f.stat().st_size for f in (folder / f"w{w}-{codec}.zarr").rglob("*") if f.is_file())
            print(f"  zarr, {w} column(s) a chunk, {codec}: {size / 1e6:.0f} MB on disk")
        matrix = DiskMatrix(folder / "X.npy")
        rng = np.random.default_rng(1)
        k = p // 4
        out = aligned_empty((k, n))
        arms = {"npy, DiskMatrix (O_DIRECT)": None, "npy, np.memmap X[:, cols]": None,
                **{f"zarr, {w} col/chunk, {codec}": (w, codec) for (w, codec) in stores}}
        rates = {a: [] for a in arms}
        ratio = {a: [] for a in arms}
        for rep in range(args.repeats):
            coords = np.sort(rng.choice(p, k, replace=False))
            useful = k * n * 8
            reference = None
            for arm in rng.permutation(list(arms)):
                if arms[arm] is None:
                    drop(folder / "X.npy")
                    before, t = os_read_bytes(), time.perf_counter()
                    if "DiskMatrix" in arm:
                        matrix.read_into(coords, out)
                        got = out.T
                    else:  # mapped for this read only: a live mapping keeps its pages past DONTNEED
                        mapped = np.load(folder / "X.npy", mmap_mode="r")
                        got = np.asarray(mapped[:, coords])
                        del mapped
                else:
                    w, codec = arms[arm]
                    drop(folder / f"w{w}-{codec}.zarr")
                    before, t = os_read_bytes(), time.perf_counter()
                    got = stores[(w, codec)].get_orthogonal_selection((slice(None), coords))
                seconds, touched = time.perf_counter() - t, os_read_bytes() - before
                if reference is None:
                    reference = np.array(got)
                elif not np.array_equal(got, reference):
                    raise AssertionError(f"{arm} read other values than the first layout")
                rates[arm].append(useful / seconds / 1e9)
                ratio[arm].append(touched / useful)
        matrix.close()
        rows = [{"layout": arm, "GB/s, median (min-max)": f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})",
                 "bytes from disk / asked (OS count)": f"{statistics.median(ratio[arm]):.2f}"}
                for arm, r in rates.items()]
        print_table(rows, f"a scattered quarter of the columns ({k} of {p}, {k * n * 8 / 1e6:.0f} MB), cold, "
                          f"{args.repeats} repeats; load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
