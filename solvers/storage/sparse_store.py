"""The sparse store: a sparse matrix on disk, coordinate-major, read a set of coordinates at a time.

A *coordinate* is what DuHL updates: a row of X for the models solved in the dual (SVM,
logistic: layout ``"csr"``, a sample per coordinate), a column of X for the Lasso family
(layout ``"csc"``, a feature per coordinate). A store holds one layout; a dataset that serves
both families holds two stores (``X_csr`` and ``X_csc``, the second written from the first by
:func:`solvers.storage.sparse_transpose.transpose_store`). Files, in one folder, named after
the store (``name``, e.g. ``X_csr``):

- ``<name>.indptr``: int64, n_coords + 1 offsets (coordinate i's entries are
  ``indptr[i]:indptr[i + 1]``), read into RAM when the store is opened (8 bytes a coordinate);
- ``<name>.indices``: the other dimension's index of each entry, sorted within a coordinate,
  int32 when that dimension has at most 2^31 - 1 places, int64 beyond (a converter that does
  not know the width in advance starts with int32 and widens once, if ever, when an index
  needs it);
- ``<name>.values``: each entry's value, float32 or float64; absent for binary data (every
  value 1, as click data is): the reader then reads indices only;
- ``<name>.json``: layout, shape of X, nnz, the dtypes, ``block_entries`` and each file's
  size and XXH3-128 checksum (computed while writing).

The data files are raw little-endian arrays from byte 0, padded with zeros to a multiple of
``block_entries`` entries: a block of entries is a whole number of 4096-byte pages in both
``indices`` and ``values`` (``block_entries`` = 4096 / the smaller itemsize), so the reader
reads any range of entries widened to blocks with O_DIRECT, into buffers whose entry positions
agree in both files, and no aligned read passes the end of a file. Nothing limits nnz to 2^31:
offsets are int64 throughout.

Writing (:class:`SparseStoreWriter`) streams: coordinates are appended in order, in batches,
through an aligned staging buffer per file, past the page cache; nothing is held but the
buffers. Every file is written under a temporary name (``.tmp-<pid>``) and renamed when all of
them are whole, the JSON last: a store whose JSON exists is complete, and a killed writer
leaves only ``.tmp-`` files (:func:`remove_stale_temporaries` clears those of dead processes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import numpy as np
import xxhash

from solvers.storage.files import STAGE_BYTES, AppendFile, fsync_dir

__all__ = ["ALIGN", "INDEX_DTYPES", "LAYOUTS", "VALUE_DTYPES", "SparseStore", "SparseStoreWriter", "open_store",
           "remove_stale_temporaries", "store_name", "write_sparse_store"]

FORMAT = "duhl-lab sparse store"
VERSION = 1
ALIGN = 4096  # bytes: a block of entries starts and ends on this boundary in every data file
LAYOUTS = ("csr", "csc")
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INT32_MAX = np.iinfo(np.int32).max
REWRITE_BYTES = 16 << 20  # bytes read at a time when the indices written so far are rewritten


def store_name(layout: str) -> str:
    """The default name of a dataset's store of ``layout``: ``X_csr`` / ``X_csc``."""
    return f"X_{layout}"


def block_entries(index_dtype, value_dtype) -> int:
    """Entries per aligned block: ALIGN bytes of the smaller itemsize (a whole number of
    ALIGN-byte pages of the larger)."""
    sizes = [np.dtype(index_dtype).itemsize] + ([np.dtype(value_dtype).itemsize] if value_dtype is not None else [])
    return ALIGN // min(sizes)


def _check_layout(layout, owner):
    if layout not in LAYOUTS:
        raise ValueError(f"The 'layout' parameter of {owner} must be one of {list(LAYOUTS)}. Got {layout!r} instead.")


class SparseStore:
    """A store on disk, opened: its description, and ``indptr`` in RAM.

    ``shape`` is X's (n_samples, n_features) whatever the layout; ``n_coords`` and ``length``
    are the coordinate-major view's: (n_samples, n_features) for ``"csr"``, (n_features,
    n_samples) for ``"csc"``. ``value_dtype`` is None for a binary store (no values file).
    """

    def __init__(self, folder, name):
        self.folder, self.name = Path(folder), str(name)
        meta_path = self.folder / f"{self.name}.json"
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"No sparse store {self.name!r} in {self.folder}: {meta_path} does not exist "
                                    "(a store is complete once its .json is written).") from None
        except ValueError as error:
            raise ValueError(f"{meta_path} is not a sparse store's description ({error})") from None
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"{meta_path} is not a {FORMAT} of version {VERSION} "
                             f"(format {meta.get('format')!r}, version {meta.get('version')!r})")
        self.meta = meta
        self.layout = meta["layout"]
        self.shape = tuple(int(s) for s in meta["shape"])
        self.nnz = int(meta["nnz"])
        self.index_dtype = np.dtype(meta["indices"])
        self.value_dtype = None if meta["values"] is None else np.dtype(meta["values"])
        self.block_entries = int(meta["block_entries"])
        self.checksums = {f: d["xxh3_128"] for f, d in meta["files"].items()}
        self.n_coords, self.length = self.shape if self.layout == "csr" else self.shape[::-1]
        padded = -(-self.nnz // self.block_entries) * self.block_entries
        expected = {self.path("indptr"): 8 * (self.n_coords + 1),
                    self.path("indices"): padded * self.index_dtype.itemsize}
        if self.value_dtype is not None:
            expected[self.path("values")] = padded * self.value_dtype.itemsize
        for path, size in expected.items():
            try:
                got = path.stat().st_size
            except FileNotFoundError:
                raise FileNotFoundError(f"The sparse store {self.name!r} in {self.folder} lacks {path.name}.") from None
            if got != size:
                raise ValueError(f"{path} has {got} bytes; the store's description says {size}: damaged, "
                                 "write it again")
        self.indptr = _read_raw(self.path("indptr"), np.int64)
        if self.indptr[0] != 0 or self.indptr[-1] != self.nnz:
            raise ValueError(f"{self.path('indptr')} does not run from 0 to nnz = {self.nnz}: damaged, write it again")

    def __repr__(self):
        kind = "binary" if self.binary else str(self.value_dtype)
        return (f"SparseStore({str(self.folder)!r}, {self.name!r}: {self.layout}, X {self.shape[0]} x {self.shape[1]}, "
                f"nnz {self.nnz}, {self.index_dtype} indices, {kind})")

    @property
    def binary(self) -> bool:
        return self.value_dtype is None

    def path(self, part) -> Path:
        """The file of ``part`` ('indptr', 'indices', 'values', 'json')."""
        return self.folder / f"{self.name}.{part}"

    @property
    def files(self):
        """The store's files (data files and its JSON)."""
        parts = ["indptr", "indices"] + ([] if self.binary else ["values"]) + ["json"]
        return [self.path(p) for p in parts]

    @property
    def entry_bytes(self) -> int:
        """Bytes on disk of one entry (index, and value unless binary)."""
        return self.index_dtype.itemsize + (0 if self.binary else self.value_dtype.itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes of the entries on disk (indices and values; indptr aside)."""
        return self.nnz * self.entry_bytes

    def coord_nnz(self) -> np.ndarray:
        """Entries of each coordinate (int64)."""
        return np.diff(self.indptr)

    def memmaps(self):
        """(indices, values) memory-mapped read-only (values None for a binary store): through
        the page cache, for small stores and tests; the solver reads with SparseReader."""
        indices = np.memmap(self.path("indices"), self.index_dtype, "r", shape=(self.nnz,)) if self.nnz else \
            np.zeros(0, self.index_dtype)
        values = None
        if not self.binary:
            values = np.memmap(self.path("values"), self.value_dtype, "r", shape=(self.nnz,)) if self.nnz else \
                np.zeros(0, self.value_dtype)
        return indices, values

    def matrix(self, dtype=np.float64):
        """X as scipy sees it, memory-mapped (a csr_matrix for layout 'csr', a csc_matrix for
        'csc'); a binary store's values are a read-only broadcast 1 of ``dtype`` (no memory)."""
        import scipy.sparse as sp

        indices, values = self.memmaps()
        if values is None:
            values = np.broadcast_to(np.ones(1, np.dtype(dtype)), (self.nnz,))
        kind = sp.csr_matrix if self.layout == "csr" else sp.csc_matrix
        m = kind(self.shape)  # set in place: the constructor would check (and copy) nnz-long arrays
        # past 2^31 entries int64 offsets beside int32 indices: scipy wants one dtype for both, and the
        # indices' int64 copy would be 8 bytes an entry in RAM (scipy's routines that need it make it)
        wide = self.index_dtype == np.int32 and self.nnz > INT32_MAX
        m.indptr = self.indptr if wide else self.indptr.astype(indices.dtype, copy=False)
        m.indices, m.data = indices, values
        m.has_sorted_indices = True
        return m

    def load(self, dtype=None):
        """The coordinate-major matrix in RAM: a CSR of shape (n_coords, length) (X for 'csr',
        X^T for 'csc'); values of ``dtype`` (default: the store's, float64 when binary)."""
        import scipy.sparse as sp

        indices, values = self.memmaps()
        dtype = np.dtype(dtype or self.value_dtype or np.float64)
        data = np.ones(self.nnz, dtype) if values is None else np.array(values, dtype=dtype)
        return sp.csr_matrix((data, np.array(indices), self.indptr.copy()), shape=(self.n_coords, self.length))

    def verify(self) -> Optional[str]:
        """What is wrong with the files (None: every checksum matches); reads them whole,
        dropping their pages after."""
        for path in self.files[:-1]:
            if _checksum(path) != self.checksums.get(path.name):
                return f"{path.name} has changed since it was written (checksum)"
        return None


def open_store(folder, name) -> SparseStore:
    """The store ``name`` in ``folder`` (a FileNotFoundError when it has no complete store)."""
    return SparseStore(folder, name)


def _read_raw(path, dtype) -> np.ndarray:
    """A raw file into RAM, its pages dropped after (a read of every offset: once, when opened)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        out = np.empty(size // np.dtype(dtype).itemsize, dtype)
        view, pos = memoryview(out.view(np.uint8)), 0
        while pos < size:
            n = os.preadv(fd, [view[pos:pos + (64 << 20)]], pos)
            if n == 0:
                raise EOFError(f"{path} ended at byte {pos} of {size}")
            pos += n
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return out


def _checksum(path) -> str:
    digest = xxhash.xxh3_128()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        buf, pos = bytearray(64 << 20), 0
        view = memoryview(buf)
        while n := os.preadv(fd, [view], pos):
            digest.update(view[:n])
            os.posix_fadvise(fd, pos, n, os.POSIX_FADV_DONTNEED)
            pos += n
    finally:
        os.close(fd)
    return digest.hexdigest()


def remove_stale_temporaries(folder) -> list:
    """Remove the ``.tmp-<pid>`` files of writers that died (their pid no longer runs); the names removed."""
    removed = []
    for path in Path(folder).glob("*.tmp-*"):
        pid = path.name.rpartition(".tmp-")[2].split(".")[0]
        if path.is_file() and pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SparseStoreWriter:
    """Write a store a batch of coordinates at a time, in order (see the module's docstring).

    Parameters
    ----------
    folder, name : where, and the files' prefix (``<name>.indptr`` ...).
    layout : 'csr' (coordinates are X's rows) or 'csc' (X's columns).
    length : the other dimension (X's n_features for 'csr'), or None: the largest index + 1,
        known at :meth:`close` (which may also raise it).
    dtype : float32 or float64: the values' type.
    binary : None: no values file while every value appended is 1 (written from the first one
        that is not, the ones before it included); True: no values (only ones may be
        appended); False: always a values file.
    index_dtype : None: int32 while every index and ``length`` fit, widened to int64 once when
        one does not; or int32 / int64.
    stage_bytes : each file's staging buffer (the writer's RAM: about three of them).

    Notes
    -----
    As a context manager, leaving it on an exception removes every file written.
    """

    def __init__(self, folder, name, layout="csr", length=None, dtype=np.float64, binary=None, index_dtype=None,
                 stage_bytes=STAGE_BYTES):
        _check_layout(layout, "SparseStoreWriter")
        if np.dtype(dtype) not in VALUE_DTYPES:
            raise ValueError(f"The 'dtype' parameter of SparseStoreWriter must be float32 or float64. "
                             f"Got {dtype!r} instead.")
        if binary not in (None, True, False):
            raise ValueError(f"The 'binary' parameter of SparseStoreWriter must be None, True or False. "
                             f"Got {binary!r} instead.")
        if index_dtype is not None and np.dtype(index_dtype) not in INDEX_DTYPES:
            raise ValueError(f"The 'index_dtype' parameter of SparseStoreWriter must be None, int32 or int64. "
                             f"Got {index_dtype!r} instead.")
        if length is not None and int(length) < 0:
            raise ValueError(f"The 'length' parameter of SparseStoreWriter must be None or an int >= 0. "
                             f"Got {length!r} instead.")
        self.folder, self.name, self.layout = Path(folder), str(name), layout
        self.length = None if length is None else int(length)
        self.dtype, self.binary_mode = np.dtype(dtype), binary
        wide = self.length is not None and self.length - 1 > INT32_MAX
        self.index_dtype = np.dtype(index_dtype) if index_dtype is not None else \
            np.dtype(np.int64 if wide else np.int32)
        self._fixed_index = index_dtype is not None
        if self.index_dtype == np.int32 and wide:
            raise ValueError(f"The 'index_dtype' parameter of SparseStoreWriter cannot be int32 with length "
                             f"{self.length} (indices up to {self.length - 1}). Got int32 instead.")
        self.stage_bytes = int(stage_bytes)
        self.n_coords, self.nnz, self.max_index = 0, 0, -1
        self._ended = 0  # entries in ended coordinates
        self._tag = f"tmp-{os.getpid()}"
        self._hashers = {}
        self._files = {}
        self.folder.mkdir(parents=True, exist_ok=True)
        self._open("indptr")
        self._files["indptr"].write(np.zeros(1, np.int64))
        self._open("indices")
        self._values = binary is False  # a values file is being written
        if self._values:
            self._open("values")
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        if kind is not None:
            self.abort()

    def _tmp(self, part) -> Path:
        return self.folder / f"{self.name}.{part}.{self._tag}"

    def _open(self, part):
        self._hashers[part] = xxhash.xxh3_128()
        self._files[part] = AppendFile(self._tmp(part), self.stage_bytes, self._hashers[part])

    def append(self, lengths, indices, values=None):
        """Append coordinates: ``lengths[k]`` entries each, their ``indices`` (sorted within
        each coordinate, >= 0) and ``values`` (None: all ones) concatenated."""
        lengths = np.asarray(lengths)
        indices = np.asarray(indices)
        if lengths.ndim != 1 or (lengths.size and (lengths.dtype.kind not in "iu" or lengths.min() < 0)):
            raise ValueError(f"The 'lengths' parameter of SparseStoreWriter.append must be a 1-D array of "
                             f"counts >= 0. Got a {lengths.shape} {lengths.dtype} array instead.")
        total = int(lengths.sum(dtype=np.int64))
        if indices.shape != (total,) or (total and indices.dtype.kind not in "iu"):
            raise ValueError(f"The 'indices' parameter of SparseStoreWriter.append must hold {total} integers "
                             f"(the lengths' sum). Got a {indices.shape} {indices.dtype} array instead.")
        values = self._check_entries(indices, values, total)
        self._write_entries(indices, values, total)
        self.append_lengths(lengths)

    def append_entries(self, indices, values=None):
        """Append entries to the coordinate(s) not yet ended by :meth:`append_lengths` (a
        coordinate too long for one batch goes in parts; its length is appended once it is whole)."""
        indices = np.asarray(indices)
        total = indices.shape[0] if indices.ndim == 1 else -1
        self._check_entries(indices, values, total)
        self._write_entries(indices, values, total)

    def append_lengths(self, lengths):
        """End coordinates: ``lengths`` entries each, of the entries appended since the last
        coordinate ended."""
        lengths = np.asarray(lengths, dtype=np.int64)
        ends = self._ended + np.cumsum(lengths, dtype=np.int64)
        if lengths.size and (lengths.min() < 0 or ends[-1] > self.nnz):
            raise ValueError(f"The 'lengths' parameter of SparseStoreWriter.append_lengths must be counts >= 0 "
                             f"of the {self.nnz - self._ended} entries not yet in a coordinate. "
                             f"Got {lengths.sum()} entries instead.")
        self._files["indptr"].write(ends)
        self.n_coords += lengths.size
        self._ended = int(ends[-1]) if lengths.size else self._ended

    def _write_entries(self, indices, values, total):
        self._files["indices"].write(indices.astype(self.index_dtype, copy=False))
        if self._values:
            self._files["values"].write(np.ones(total, self.dtype) if values is None
                                        else values.astype(self.dtype, copy=False))
        self.nnz += total

    def _check_entries(self, indices, values, total):
        """Check a batch of entries (widening the indices, starting the values file, as needed);
        returns the values as an array or None."""
        if indices.shape != (total,) or (total and indices.dtype.kind not in "iu"):
            raise ValueError(f"The 'indices' parameter of SparseStoreWriter must hold {total} integers. "
                             f"Got a {indices.shape} {indices.dtype} array instead.")
        if values is not None:
            values = np.asarray(values)
            if values.shape != (total,):
                raise ValueError(f"The 'values' parameter of SparseStoreWriter must be None or hold {total} "
                                 f"values. Got shape {values.shape} instead.")
        if total:
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0:
                raise ValueError(f"The 'indices' parameter of SparseStoreWriter must hold indices >= 0. "
                                 f"Got {lo} instead.")
            if self.length is not None and hi >= self.length:
                raise ValueError(f"The 'indices' parameter of SparseStoreWriter must hold indices below "
                                 f"length {self.length}. Got {hi} instead.")
            if hi > INT32_MAX and self.index_dtype == np.int32:
                if self._fixed_index:
                    raise ValueError(f"The 'indices' parameter of SparseStoreWriter holds {hi}, beyond "
                                     "index_dtype int32.")
                self._rewrite_indices(lambda a: a.astype(np.int64), np.int64)
            self.max_index = max(self.max_index, hi)
        if values is not None and not self._values:
            ones = bool(np.all(values == 1))
            if self.binary_mode is True and not ones:
                raise ValueError("The 'values' parameter of SparseStoreWriter must be None or all ones "
                                 "for a binary store (binary=True).")
            if not ones:  # the first value that is not 1: the values file from here, its ones before
                self._open("values")
                self._values = True
                for lo in range(0, self.nnz, 1 << 22):
                    self._files["values"].write(np.ones(min(1 << 22, self.nnz - lo), self.dtype))
        return values

    def shift_indices(self, delta):
        """Add ``delta`` to every index written so far (a LIBSVM file read as one-based that turns
        out to be zero-based: its first index 0 comes late). Rewrites the indices file once."""
        delta = int(delta)
        if self.max_index + delta > INT32_MAX and self.index_dtype == np.int32 and not self._fixed_index:
            self._rewrite_indices(lambda a: a.astype(np.int64) + delta, np.int64)
        else:
            self._rewrite_indices(lambda a: a + a.dtype.type(delta), self.index_dtype)
        self.max_index += delta if self.nnz else 0

    def _rewrite_indices(self, transform, dtype):
        """Pass the indices written so far through ``transform`` into a file of ``dtype``."""
        old = self._files.pop("indices")
        size = old.size
        old.close(pad_to=1)
        source = self._tmp("indices")
        moved = source.with_name(source.name + ".old")
        os.replace(source, moved)
        old_dtype, self.index_dtype = self.index_dtype, np.dtype(dtype)
        self._open("indices")
        fd = os.open(moved, os.O_RDONLY)
        try:
            buf = np.empty(REWRITE_BYTES, np.uint8)  # a multiple of both itemsizes
            for pos in range(0, size, REWRITE_BYTES):
                want = min(REWRITE_BYTES, size - pos)
                if os.preadv(fd, [memoryview(buf)[:want]], pos) != want:
                    raise EOFError(f"{moved} ended before byte {pos + want}")
                self._files["indices"].write(transform(buf[:want].view(old_dtype)))
                os.posix_fadvise(fd, pos, want, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
            moved.unlink()

    def close(self, length=None) -> SparseStore:
        """Finish: pad, write out and rename every file, the JSON last; returns the store opened.
        ``length``: the other dimension, at least the largest index + 1 (default: that)."""
        if self._closed:
            raise ValueError(f"SparseStoreWriter {self.name!r} is closed")
        try:
            if self._ended != self.nnz:
                raise ValueError(f"SparseStoreWriter {self.name!r}: {self.nnz - self._ended} entries appended "
                                 "after the last coordinate ended (append_lengths)")
            length = self._final_length(length)
            values = self.dtype if self._values else None
            block = block_entries(self.index_dtype, values)
            self._files["indptr"].close(pad_to=1)
            self._files["indices"].close(pad_to=block * self.index_dtype.itemsize)
            if self._values:
                self._files["values"].close(pad_to=block * self.dtype.itemsize)
            shape = (self.n_coords, length) if self.layout == "csr" else (length, self.n_coords)
            files = {}
            for part, f in self._files.items():
                final = self.folder / f"{self.name}.{part}"
                files[final.name] = {"bytes": f.size, "xxh3_128": self._hashers[part].hexdigest()}
            meta = {"format": FORMAT, "version": VERSION, "layout": self.layout, "shape": list(shape),
                    "nnz": self.nnz, "indices": str(self.index_dtype),
                    "values": None if values is None else str(values),
                    "block_entries": block, "files": files}
            for part in self._files:
                os.replace(self._tmp(part), self.folder / f"{self.name}.{part}")
            stale = self.folder / f"{self.name}.values"
            if not self._values and stale.exists():  # a binary store over an older store with values
                stale.unlink()
            tmp_json = self._tmp("json")
            tmp_json.write_text(json.dumps(meta, indent=1))
            os.replace(tmp_json, self.folder / f"{self.name}.json")
            fsync_dir(self.folder)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        return SparseStore(self.folder, self.name)

    def _final_length(self, length):
        smallest = self.max_index + 1
        if length is None:
            length = self.length if self.length is not None else smallest
        length = int(length)
        if length < smallest:
            raise ValueError(f"The 'length' parameter of SparseStoreWriter.close must be at least the largest "
                             f"index + 1 ({smallest}). Got {length} instead.")
        if length - 1 > INT32_MAX and self.index_dtype == np.int32:
            if self._fixed_index:
                raise ValueError(f"The 'length' parameter of SparseStoreWriter.close ({length}) does not fit "
                                 "index_dtype int32.")
            self._rewrite_indices(lambda a: a.astype(np.int64), np.int64)
        return length

    def abort(self):
        """Stop and remove every file written (idempotent)."""
        self._closed = True
        for part, f in self._files.items():
            f.abort()
            self._tmp(part).unlink(missing_ok=True)
            self._tmp(part).with_name(self._tmp(part).name + ".old").unlink(missing_ok=True)
        self._tmp("json").unlink(missing_ok=True)


def write_sparse_store(folder, X, layout="csr", name=None, dtype=None, binary=None, index_dtype=None,
                       batch_entries=1 << 22) -> SparseStore:
    """A scipy sparse matrix (or anything ``scipy.sparse.csr_matrix`` takes) written as a store of
    ``layout`` ('csr': coordinates are X's rows; 'csc': its columns), in batches of about
    ``batch_entries`` entries (duplicates summed, indices sorted: scipy's canonical form). The
    matrix is converted once in RAM to the layout asked for when it is not already in it; for
    data larger than RAM write the layout it is in, then the other by
    solvers.storage.sparse_transpose.transpose_store. ``dtype``: the values' (default: X's
    float32 / float64, else float64); ``binary``, ``index_dtype``: as SparseStoreWriter's."""
    import scipy.sparse as sp

    _check_layout(layout, "write_sparse_store")
    M = X if sp.issparse(X) else sp.csr_matrix(X)
    M = M.tocsr() if layout == "csr" else M.tocsc()
    if not M.has_canonical_format:
        M = M.copy()
        M.sum_duplicates()
    if dtype is None:
        dtype = M.dtype if M.dtype in VALUE_DTYPES else np.float64
    n_coords, length = M.shape if layout == "csr" else M.shape[::-1]
    with SparseStoreWriter(folder, name or store_name(layout), layout, length=length, dtype=dtype,
                           binary=binary, index_dtype=index_dtype) as w:
        indptr = np.asarray(M.indptr, dtype=np.int64)
        start = 0
        while start < n_coords:
            # coordinates up to about batch_entries entries (at least one)
            stop = int(np.searchsorted(indptr, indptr[start] + batch_entries, side="right")) - 1
            stop = min(n_coords, max(stop, start + 1))
            lo, hi = indptr[start], indptr[stop]
            w.append(np.diff(indptr[start:stop + 1]), M.indices[lo:hi], M.data[lo:hi])
            start = stop
        return w.close()
