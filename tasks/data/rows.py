"""The sample-major copy of a cached dataset: what the dual models (SVM, logistic) read from disk.

A dual model's coordinate is a sample: it needs each row of X contiguous, an (n_samples,
n_features) C-order file, where the cache keeps X in Fortran order (a feature per
contiguous run, for the Lasso family). :func:`sample_major` returns the entry's
``X_rows.npy``, writing it once, in blocks of rows, never holding X in RAM:

- a block of rows is read from the Fortran file as one short run per feature (buffered
  ``pread`` with readahead off, on a few threads: the runs are not aligned for O_DIRECT),
  the pages dropped after each block, then transposed and appended to an aligned
  C-order file (``write_coordinate_major``: O_DIRECT writes, its data at 4096 bytes);
- each row is padded with zeros to an aligned size (``aligned_width``: 5,000 float64, 40,000
  bytes, stored in 40,960), so every sample starts on an O_DIRECT boundary and the reader
  reads it straight into place, no bounce copy; the zeros change no dual model (w = A^T a
  has zeros there, dropped from ``coef_``): :func:`features` gives X's own width;
- the copy's checksum is added to the entry's ``meta.json``, so the cache checks it as
  it checks the entry's other files (a damaged copy rebuilds the entry; an unpadded copy
  from before is written again, once).

The file holds X as it is, not y_i x_i: the labels' signs are applied as rows are read
(solvers.storage.reader.DiskMatrix's ``scale``), so one copy serves every classifier and any
labelling of the same X. A dataset already in C order (a user's own file) is used as it is.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import xxhash

from solvers.storage.files import aligned_width, npy_header, read_npy_header, write_coordinate_major
from tasks.data.cache import describe_file
from tasks.data.errors import DataError

log = logging.getLogger(__name__)

ROWS_FILE = "X_rows.npy"
TILE_BYTES = 64 << 20  # rows read per block (and as much again for its transpose)
THREADS = 4


def sample_major(folder) -> Path:
    """The path of the entry's X in C order (an (n_samples, n_features) .npy): X.npy itself when
    it is C-ordered, else ``X_rows.npy``, written now if the entry has none yet."""
    folder = Path(folder)
    source = folder / "X.npy"
    if not source.exists():
        raise DataError(f"host_budget needs a dense dataset in the cache's X.npy; {source} does not exist "
                        "(sparse and LIBSVM data stay in RAM).")
    shape, fortran, dtype, offset, _ = read_npy_header(source)
    if not fortran:
        return source
    out = folder / ROWS_FILE
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    if out.exists() and ROWS_FILE in meta["files"]:
        if read_npy_header(out)[0][1] == aligned_width(shape[1], dtype.itemsize):
            return out
        log.info("data: %s/%s has unpadded rows (written before they were aligned): writing it again",
                 folder.name, ROWS_FILE)
    start = time.perf_counter()
    digest = transpose(source, out, shape, dtype, offset)
    meta["files"][ROWS_FILE] = describe_file(out, digest)
    drop_pages(out)  # describe_file's look at the header read ahead into the data
    tmp = meta_path.with_name(f"meta.json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, meta_path)
    log.info("data: %s/%s written in sample-major order (%d x %d, %.2f GB) in %.1fs", folder.name, ROWS_FILE,
             shape[0], shape[1], out.stat().st_size / 1e9, time.perf_counter() - start)
    return out


def features(path) -> int:
    """X's own width in the file a dual model reads (:func:`sample_major`'s path): the values of
    each row that are data; the rest of the row, if any, is zero padding."""
    path = Path(path)
    if path.name == ROWS_FILE:
        return int(read_npy_header(path.with_name("X.npy"))[0][1])
    return int(read_npy_header(path)[0][1])


def drop_pages(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def transpose(source: Path, out: Path, shape, dtype, offset: int, tile_bytes: int = TILE_BYTES) -> str:
    """Write the Fortran-order (n, d) array at ``offset`` of ``source`` as a C-order (n, width) .npy
    at ``out``, each row padded with zeros to ``width`` values (aligned_width(d)); returns the
    xxh3_128 of the whole file written (the cache's checksum)."""
    n, d = (int(s) for s in shape)
    dtype = np.dtype(dtype)
    width = aligned_width(d, dtype.itemsize)
    rows = max(1, min(n, tile_bytes // max(1, width * dtype.itemsize)))
    digest = xxhash.xxh3_128(npy_header((n, width), dtype))
    fd = os.open(source, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # read the runs asked for, no readahead
    tile = np.zeros((width, rows), dtype)  # tile[j, :k] = X[i0:i0 + k, j]; rows d.. stay 0: the padding
    column = n * dtype.itemsize

    def read_columns(i0, k, lo, hi):
        for j in range(lo, hi):
            want = k * dtype.itemsize
            if os.preadv(fd, [memoryview(tile[j, :k]).cast("B")], offset + j * column + i0 * dtype.itemsize) != want:
                raise DataError(f"{source} ended before the data its header announces (column {j}, row {i0})")

    def blocks(pool):
        for i0 in range(0, n, rows):
            k = min(rows, n - i0)
            cuts = np.linspace(0, d, THREADS + 1).astype(int)
            for job in [pool.submit(read_columns, i0, k, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])]:
                job.result()
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the block's pages: not kept
            yield tile[:, :k].T

    try:
        with ThreadPoolExecutor(THREADS, thread_name_prefix="transpose") as pool:
            write_coordinate_major(out, n, width, blocks(pool), dtype, hasher=digest)
    finally:
        os.close(fd)
    return digest.hexdigest()
