"""Sparse data into the store: a scipy matrix or a ``.npz``, and the layout a model reads.

- :func:`convert_npz`: a ``.npz`` written by ``scipy.sparse.save_npz`` (CSR or CSC, compressed
  or not), streamed out of the zip member by member a batch of coordinates at a time into a
  store of its own layout: RAM is the batch, whatever the file's size;
- :func:`convert_matrix`: a scipy matrix in RAM (solvers.storage.sparse_store.write_sparse_store);
- :func:`sparse_layout`: a cache entry's store of the layout a model reads, ``X_csr`` (the
  dual models: a sample per coordinate) or ``X_csc`` (the Lasso family: a feature per
  coordinate), written once from the other by the external transpose
  (solvers.storage.sparse_transpose) and added to the entry's ``meta.json`` with its checksums,
  so the cache checks it as it checks the entry's other files.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np

from solvers.storage.sparse_store import SparseStore, SparseStoreWriter, open_store, store_name, write_sparse_store
from solvers.storage.sparse_transpose import transpose_store
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn

log = logging.getLogger(__name__)

BATCH_ENTRIES = 1 << 22  # entries per batch of a .npz conversion (about 50 MB of int32 + float64 in flight)
TRANSPOSE_BYTES = 256 << 20


class _Member:
    """One array of a .npz, read in order a slice at a time from the zip (never whole)."""

    def __init__(self, archive: zipfile.ZipFile, name: str, path):
        try:
            self._f = archive.open(f"{name}.npy")
        except KeyError:
            raise DataError(f"{path} is not a scipy sparse .npz: it has no {name!r} array "
                            f"(it holds {sorted(n[:-4] for n in archive.namelist())}).") from None
        version = np.lib.format.read_magic(self._f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        self.shape, fortran, self.dtype = read(self._f)
        self.n = int(np.prod(self.shape))

    def read(self, count) -> np.ndarray:
        out = np.empty(int(count), self.dtype)
        view, got = memoryview(out.view(np.uint8)), 0
        while got < out.nbytes:
            chunk = self._f.read(out.nbytes - got)
            if not chunk:
                raise DataError(f"a member of the .npz ended {out.nbytes - got} bytes early: the file is truncated")
            view[got:got + len(chunk)] = chunk
            got += len(chunk)
        return out

    def close(self):
        self._f.close()


def convert_npz(path, folder, name: Optional[str] = None, dtype=None, batch_entries: int = BATCH_ENTRIES,
                progress: Optional[ProgressFn] = None) -> SparseStore:
    """A ``scipy.sparse.save_npz`` file (CSR or CSC) to a store of its own layout in ``folder``
    (``name`` default ``X_<layout>``), streamed; ``dtype``: the values' (default: the file's float32 /
    float64, else float64). Other formats (COO, ...): convert to CSR first (``.tocsr()``)."""
    path = Path(path)
    report = progress or (lambda done, total: None)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise DataError(f"{path} is not a .npz file ({error}).") from None
    with archive:
        if "format.npy" not in archive.namelist():
            raise DataError(f"{path} is not a scipy sparse .npz (scipy.sparse.save_npz): it has no 'format'.")
        with archive.open("format.npy") as f:
            kind = np.lib.format.read_array(f).item()
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind not in ("csr", "csc"):
            raise DataError(f"The .npz {path} holds a {kind} matrix; convert_npz reads CSR or CSC "
                            "(save X.tocsr() with scipy.sparse.save_npz).")
        with archive.open("shape.npy") as f:
            shape = tuple(int(s) for s in np.lib.format.read_array(f))
        n_coords, length = shape if kind == "csr" else shape[::-1]
        indptr_m, indices_m, data_m = (_Member(archive, part, path) for part in ("indptr", "indices", "data"))
        try:
            if indptr_m.n != n_coords + 1 or indices_m.n != data_m.n:
                raise DataError(f"The .npz {path} is inconsistent: indptr has {indptr_m.n} entries for {n_coords} "
                                f"coordinates, indices {indices_m.n} and data {data_m.n}.")
            if dtype is None:
                dtype = data_m.dtype if data_m.dtype in (np.float32, np.float64) else np.float64
            nnz = indices_m.n
            with SparseStoreWriter(folder, name or store_name(kind), kind, length=length, dtype=dtype) as writer:
                previous = int(indptr_m.read(1)[0])
                if previous != 0:
                    raise DataError(f"The .npz {path} is inconsistent: its indptr starts at {previous}, not 0.")
                done = 0
                while done < n_coords:
                    ends = indptr_m.read(min(n_coords - done, max(1, batch_entries // 8))).astype(np.int64)
                    lengths = np.diff(np.concatenate([[previous], ends]))
                    if (lengths.size and lengths.min() < 0) or ends[-1] > nnz:
                        raise DataError(f"The .npz {path} is inconsistent: its indptr decreases or passes nnz.")
                    # the batch's entries, in slices of at most batch_entries (a coordinate may be longer)
                    total, last = int(ends[-1] - previous), None
                    starts = ends - previous - lengths  # each coordinate's first entry in the batch
                    for k in range(0, total, batch_entries):
                        m = min(batch_entries, total - k)
                        indices = indices_m.read(m)
                        last = _check_sorted(indices, k, starts, last, path)
                        writer.append_entries(indices, data_m.read(m))
                    writer.append_lengths(lengths)
                    previous = int(ends[-1])
                    done += lengths.size
                    report(previous, nnz)
                return writer.close()
        finally:
            for m in (indptr_m, indices_m, data_m):
                m.close()


def _check_sorted(indices, offset, starts, last, path):
    """Indices increase within each coordinate (scipy's canonical format: sorted, no repeats);
    ``indices`` are the batch's entries from ``offset``, ``last`` the entry before them (None at a
    batch's start). Returns the last index."""
    if not indices.size:
        return last
    ok = np.diff(indices) > 0
    # the pairs that straddle a coordinate's start need not increase
    new = np.zeros(indices.size, bool)
    inside = starts[(starts >= offset) & (starts < offset + indices.size)] - offset
    new[inside] = True
    ok |= new[1:]
    first_ok = last is None or new[0] or indices[0] > last
    if not (ok.all() and first_ok):
        raise DataError(f"The .npz {path} holds a matrix whose indices are not sorted and distinct within each "
                        "coordinate: save it after X.sum_duplicates() and X.sort_indices() (canonical format).")
    return indices[-1]


def convert_matrix(X, folder, layout="csr", name=None, dtype=None) -> SparseStore:
    """A scipy sparse matrix in RAM to a store (see write_sparse_store)."""
    return write_sparse_store(folder, X, layout=layout, name=name, dtype=dtype)


def sparse_layout(folder, layout: str, buffer_bytes: int = TRANSPOSE_BYTES, progress: Optional[ProgressFn] = None,
                  direct=None) -> SparseStore:
    """The cache entry's store of ``layout`` ('csr' or 'csc'), written now from the other one when
    the entry has none yet (external transpose, ``buffer_bytes`` of RAM), and added to the entry's
    meta.json with its checksums."""
    folder = Path(folder)
    name = store_name(layout)
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        raise DataError(f"{folder} is not a dataset cache entry (no readable meta.json).") from None
    if f"{name}.json" in meta["files"]:
        return open_store(folder, name)
    other = store_name("csc" if layout == "csr" else "csr")
    if f"{other}.json" not in meta["files"]:
        raise DataError(f"host_budget with sparse data needs the dataset cache entry's sparse store; {folder.name} "
                        f"has neither {name} nor {other} (its data are dense, or the entry predates the store).")
    start = time.perf_counter()
    store = transpose_store(open_store(folder, other), folder, name, buffer_bytes=buffer_bytes, progress=progress,
                            direct=direct)
    for path in store.files:
        entry = {"bytes": path.stat().st_size}
        entry["xxh3_128"] = store.checksums.get(path.name) or _hash_small(path)
        meta["files"][path.name] = entry
    tmp = meta_path.with_name(f"meta.json.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, meta_path)
    log.info("data: %s/%s written (%d x %d, nnz %d) in %.1fs", folder.name, name, store.shape[0], store.shape[1],
             store.nnz, time.perf_counter() - start)
    return store


def _hash_small(path) -> str:
    from tasks.data.cache import checksum

    return checksum(path)
