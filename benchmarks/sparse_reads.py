"""The sparse store's reader on scattered coordinates from a cold page cache, against the store's cold
sequential rate.

Store: ``synthetic_criteo`` (click-like binary rows, ~38 int32 indices each, power-law columns) made
once in ``--cache`` (``X_csr``; ``X_csc`` by the external transpose). Each run: every file's pages
dropped (POSIX_FADV_DONTNEED, as tests/solvers/storage/test_reader.py does), then one pass of
SparseReader.chunks over a sorted random set of coordinates (a share of the rows, or of the
columns) through a 64 MB buffer, nothing computed; ``useful GB/s`` counts the coordinates' own
entries, ``disk GB/s`` every byte asked of the disk (whole 4 KB blocks; /proc/self/io's
read_bytes beside it). Also SparseOnDisk.read_block (the copy into a compact block) and the
sequential rate of the same files (tasks.resources.cold_read_bandwidth). Medians of ``--repeats``.

    python benchmarks/sparse_reads.py --rows 10000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages, run as a script
from solvers.storage.sparse_on_disk import SparseOnDisk  # noqa: E402
from solvers.storage.sparse_reader import ChunkBuffer, SparseReader  # noqa: E402
from tasks.data import SyntheticCriteoData, load_dataset  # noqa: E402
from tasks.data.sparse import sparse_layout  # noqa: E402
from tasks.resources import cold_read_bandwidth, os_read_bytes  # noqa: E402


def drop(store):
    for path in store.files[:-1]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def scattered(store, coords, buffer, threads):
    drop(store)
    with SparseReader(store, threads=threads) as reader:
        before = os_read_bytes()
        start = time.perf_counter()
        for _ in reader.chunks(coords, buffer):
            pass
        seconds = time.perf_counter() - start
        return {"s": seconds, "useful": reader.useful_bytes, "disk": reader.bytes_read,
                "os": os_read_bytes() - before, "requests": reader.requests}


def block_read(store, coords):
    drop(store)
    data = SparseOnDisk(store)
    start = time.perf_counter()
    data.read_block(coords)
    seconds = time.perf_counter() - start
    out = {"s": seconds, "useful": data.reader.useful_bytes, "disk": data.bytes_read, "os": 0,
           "requests": data.reader.requests}
    data.close()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--hash-bits", type=int, default=20)
    parser.add_argument("--cache", default=".cache/bench-sparse")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    ds = load_dataset(SyntheticCriteoData(n_samples=args.rows, hash_bits=args.hash_bits), Path(args.cache))
    made = time.perf_counter() - t0
    csr = ds.store
    t0 = time.perf_counter()
    csc = sparse_layout(ds.path, "csc")
    transposed = time.perf_counter() - t0
    print(f"store: {csr} ({csr.nbytes / 1e9:.2f} GB; made or found in {made:.1f}s); {csc} ({transposed:.1f}s)")
    rng = np.random.default_rng(0)
    rows = []
    for name, store in (("csr rows", csr), ("csc columns", csc)):
        # the sequential rate of the store's files (the csr store's: cold_read_bandwidth reads X_csr)
        seq = statistics.median(cold_read_bandwidth(store.folder) for _ in range(args.repeats)) \
            if store is csr else None
        buffer = ChunkBuffer.of_bytes(store, 64 << 20)
        for share in (0.01, 0.1, 0.25, 1.0):
            k = max(1, int(share * store.n_coords))
            coords = np.sort(rng.choice(store.n_coords, k, replace=False)) if share < 1 else np.arange(store.n_coords)
            runs = [scattered(store, coords, buffer, args.threads) for _ in range(args.repeats)]
            row = _row(name, share, "chunks", runs)
            row["sequential_GB/s"] = None if seq is None else round(seq, 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
        if store is csr:
            k = int(0.1 * store.n_coords)
            coords = np.sort(rng.choice(store.n_coords, k, replace=False))
            runs = [block_read(store, coords) for _ in range(args.repeats)]
            row = _row(name, 0.1, "read_block", runs)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{'coordinates':12} {'share':>6} {'how':>10} {'useful GB/s':>12} {'disk GB/s':>10} {'disk/useful':>11} "
          f"{'os = disk':>9} {'requests':>9}")
    for r in rows:
        print(f"{r['coordinates']:12} {r['share']:6.2f} {r['how']:>10} {r['useful_GB/s']:12.3f} {r['disk_GB/s']:10.3f} "
              f"{r['disk/useful']:11.2f} {str(r['os_equals_disk']):>9} {r['requests']:9d}")
    seq = [r["sequential_GB/s"] for r in rows if r.get("sequential_GB/s")]
    if seq:
        print(f"cold sequential read of the csr store: {seq[0]:.3f} GB/s")


def _row(name, share, how, runs):
    s = statistics.median(r["s"] for r in runs)
    useful, disk = runs[0]["useful"], runs[0]["disk"]
    return {"coordinates": name, "share": share, "how": how, "s": [round(r["s"], 3) for r in runs],
            "useful_GB/s": useful / s / 1e9, "disk_GB/s": disk / s / 1e9, "disk/useful": disk / max(1, useful),
            "os_equals_disk": all(r["os"] == r["disk"] for r in runs) if how == "chunks" else None,
            "requests": runs[0]["requests"]}


if __name__ == "__main__":
    main()
