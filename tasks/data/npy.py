"""A user's own dense data (``data=npy``): an (n_samples, n_features) ``.npy`` and its target,
brought into the cache's layout (``X.npy`` in Fortran order: each feature one contiguous run,
what :class:`solvers.storage.reader.DiskMatrix` reads for the arms with a ``host_budget``) without
ever holding the file in RAM.

- **In place**: a Fortran-order float32 / float64 file of the configured dtype whose data
  starts at a multiple of 4096 bytes (as ``write_coordinate_major`` writes it), its target in
  a second file: the entry's ``X.npy`` is a symbolic link to it. One pass reads it (past the
  page cache) to check every value is finite and to hash it; nothing is copied.
- **Converted** otherwise: C order, another dtype, the target among the columns, or np.save's
  128-byte header (it leaves every column off the alignment O_DIRECT needs, and DiskMatrix's
  bounce buffer then read a scattered quarter of the columns at 0.33 GB/s against 0.47 from
  the aligned copy: medians of 6, side by side, on this project's machine). A Fortran-order
  source is streamed column block by column block into an aligned file
  (``write_coordinate_major``); a C-order source is read row block by row block, each block
  transposed and its features written at their places in the output (one write per feature
  per block), then the output is hashed in one more pass past the page cache.

The source is read with ``DiskMatrix`` (O_DIRECT, or buffered reads with the pages dropped),
through a buffer of ``CONVERT_BYTES``, whatever the file's size: the conversion's RAM is that
buffer, half of it again for a dtype cast, an eighth for the transposes and the reader's
bounce buffers, and the target (8 bytes a sample). Headers are checked when the config is
planned (cache_key): a missing file, a wrong shape or dtype, a target of the wrong length are
one-line errors before anything is made; a value that is not finite is found while reading.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import xxhash

from solvers.storage.reader import DiskMatrix, aligned_empty, write_coordinate_major
from solvers.storage.files import HEADER_BYTES, PAGE, npy_header, read_npy_header
from tasks.data.configs import NpyData, resolve_path
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn, binary_target

log = logging.getLogger(__name__)

CONVERT_BYTES = 128 << 20  # the read buffer of a conversion (two halves: one read while the other is written)
SAVED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what the solvers compute in


@dataclass
class Source:
    """What the headers say about a user's file and its target (nothing read but headers)."""

    path: Path
    shape: tuple  # as stored: (n_samples, n_columns)
    fortran: bool
    dtype: np.dtype
    offset: int  # where the data starts
    size: int
    target: Optional[Path]
    target_column: Optional[int]  # in [0, n_columns)
    out_dtype: np.dtype
    given: str  # data.path as the config wrote it (errors quote it)

    @property
    def n_samples(self) -> int:
        return self.shape[0]

    @property
    def n_features(self) -> int:
        return self.shape[1] - (self.target_column is not None)

    @property
    def in_place(self) -> bool:
        return (self.fortran and self.dtype == self.out_dtype and self.target_column is None
                and self.offset % HEADER_BYTES == 0)

    def features(self) -> np.ndarray:
        """The stored columns that are features, in order."""
        return np.delete(np.arange(self.shape[1]), [] if self.target_column is None else [self.target_column])


def _file(path: Path, param: str, given: str) -> os.stat_result:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DataError(f"The '{param}' parameter of data 'npy' names no file: {given} ({path}).") from None
    if not path.is_file():
        extra = " (a zarr store: use data=zarr)"
        raise DataError(f"The '{param}' parameter of data 'npy' must name a .npy file. Got a directory instead: "
                        f"{given}{extra if (path / 'zarr.json').exists() or (path / '.zarray').exists() else ''}.")
    return stat


def _header(path: Path, param: str, given: str):
    try:
        return read_npy_header(path)
    except ValueError as error:
        raise DataError(f"The '{param}' parameter of data 'npy' must name a .npy file. Got {given}, which is not "
                        f"one ({str(error).rpartition('(')[2].rstrip(')')}).") from None


def inspect(c: NpyData, base_dir: Path) -> Source:
    """The source's shape, order and dtype from its header, and its target's; a one-line
    DataError naming the parameter and the value for anything the solvers cannot take."""
    path = resolve_path(c.path, base_dir)
    _file(path, "path", c.path)
    shape, fortran, dtype, offset, size = _header(path, "path", c.path)
    check_shape("npy", c.path, shape)
    if dtype.kind != "f":
        raise DataError(f"The 'path' parameter of data 'npy' must name an array of floats (float16, float32, "
                        f"float64). Got {dtype} in {c.path} instead.")
    expected = offset + shape[0] * shape[1] * dtype.itemsize
    if size < expected:
        raise DataError(f"The 'path' parameter of data 'npy' names a truncated file: {c.path} holds {size} bytes, "
                        f"its header announces {expected}.")
    column = target_column("npy", c, shape)
    target = None
    if c.target is not None:
        target = resolve_path(c.target, base_dir)
        _file(target, "target", c.target)
        t_shape, _, t_dtype, _, _ = _header(target, "target", c.target)
        check_target_shape("npy", c, shape, t_shape)
        if t_dtype.kind not in "biuf":
            raise DataError(f"The 'target' parameter of data 'npy' must name numbers. Got {t_dtype} in "
                            f"{c.target} instead.")
    native = dtype.newbyteorder("=")
    out = np.dtype(c.dtype) if c.dtype else (native if native in SAVED_DTYPES else np.dtype(np.float64))
    return Source(path, shape, fortran, dtype, offset, size, target, column, out, c.path)



def check_shape(kind: str, given: str, shape) -> None:
    """A one-line DataError unless ``shape`` is a 2-D (n_samples, n_features) with one of each (``kind``: 'npy', 'zarr')."""
    if len(shape) != 2 or min(shape) < 1:
        raise DataError(f"The 'path' parameter of data '{kind}' must name a 2-D (n_samples, n_features) array with "
                        f"at least one of each. Got shape {shape} in {given} instead.")


def target_column(kind: str, c, shape) -> Optional[int]:
    """``c.target_column`` as an index in [0, n_features), checked; None when not given."""
    column = c.target_column
    if column is not None:
        if not -shape[1] <= column < shape[1] or shape[1] < 2:
            raise DataError(f"The 'target_column' parameter of data '{kind}' must be a column of the {shape[1]} of "
                            f"{c.path} (in [{-shape[1]}, {shape[1]}), leaving at least one feature). "
                            f"Got {column} instead.")
        column %= shape[1]
    return column


def check_target_shape(kind: str, c, shape, t_shape) -> None:
    """A one-line DataError unless the target holds one value per row."""
    if t_shape not in ((shape[0],), (shape[0], 1)):
        raise DataError(f"The 'target' parameter of data '{kind}' must name n_samples ({shape[0]}) values, one "
                        f"per row of {c.path}. Got shape {t_shape} in {c.target} instead.")

def identity(c: NpyData, base_dir: Path) -> Dict[str, object]:
    """The cache key's share of the files: each one's path, size and modification time (a
    changed file gets a new entry; ``cache`` removes the one it replaces)."""
    src = inspect(c, base_dir)
    ident: Dict[str, object] = {"path": str(src.path), "source": _stamp(src.path)}
    if src.target is not None:
        ident.update(target_path=str(src.target), target_source=_stamp(src.target))
    return ident


def _stamp(path: Path) -> list:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def planned_bytes(c: NpyData, base_dir: Path) -> int:
    src = inspect(c, base_dir)
    copied = 0 if src.in_place else HEADER_BYTES + src.n_samples * src.n_features * src.out_dtype.itemsize
    return copied + 8 * src.n_samples + PAGE


# ------------------------------------------------------------------------------ making ---
def make_npy(c: NpyData, out: Path, base_dir: Path, progress: ProgressFn) -> Dict[str, str]:
    """Write the entry (``X.npy``, ``y.npy``) into ``out``; returns {file: xxh3_128} of what
    it hashed on the way (the cache's seal need not read X again)."""
    src = inspect(c, base_dir)
    started = time.perf_counter()
    matrix = DiskMatrix(src.path, max_request=_request_bytes())
    try:
        y = None if src.target is None else _target(src, c.target)
        if src.in_place:
            digest = _scan(matrix, src, progress)
            os.symlink(src.path, out / "X.npy")
            how = "used in place (a link)"
        elif src.fortran:
            digest = _convert_fortran(matrix, src, out / "X.npy", progress)
            how = "converted from Fortran order"
        else:
            column = _convert_c(matrix, src, out / "X.npy", progress)  # its buffer freed before the hash's
            digest = file_hash(out / "X.npy", src)
            y = column if column is not None else y
            how = "converted from C order"
        if y is None:  # the target column of a Fortran-order file
            y = _column(matrix, src.target_column)
            _finite(y, "target_column", lambda i: f"row {i}, column {src.target_column} of {c.path}")
    finally:
        matrix.close()
    np.save(out / "y.npy", binary_target(y, c.positive_class, c.name))
    log.info("data npy: %s %d x %d %s %s in %.1fs", c.path, src.n_samples, src.n_features, src.out_dtype, how,
             time.perf_counter() - started)
    return {"X.npy": digest}


def _request_bytes() -> int:
    """The reader's request size (each of its 4 threads may hold a bounce buffer this big)."""
    return max(PAGE, min(8 << 20, CONVERT_BYTES // 32 // PAGE * PAGE))


def _half_rows(row_bytes: int) -> int:
    return max(1, CONVERT_BYTES // 2 // row_bytes)


def _target(src: Source, given: str) -> np.ndarray:
    y = np.asarray(np.load(src.target, mmap_mode="r"), dtype=np.float64).reshape(-1)
    _finite(y, "target", lambda i: f"entry {i} of {given}")
    return y


def _column(matrix: DiskMatrix, column: int) -> np.ndarray:
    one = aligned_empty((1, matrix.shape[1]), matrix.dtype)
    matrix.read_into(np.array([column]), one)
    return one[0].astype(np.float64)


def _finite(values: np.ndarray, param: str, where) -> None:
    """A DataError naming ``param`` and the first value of a vector that is not finite;
    ``where(index)`` says where it is."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise DataError(f"The '{param}' parameter of data 'npy' must name finite values. Got "
                        f"{values[bad[0]]} at {where(int(bad[0]))} instead.")


def _check_block(block: np.ndarray, coords: np.ndarray, src: Source) -> None:
    """Every value of a block of stored coordinates (columns of a Fortran file, rows of a C
    one) finite, or the error with the value's row and column."""
    if np.isfinite(block).all():
        return
    k, i = np.argwhere(~np.isfinite(block))[0]
    row, col = (int(i), int(coords[k])) if src.fortran else (int(coords[k]), int(i))
    param = "target_column" if col == src.target_column else "path"
    raise DataError(f"The '{param}' parameter of data 'npy' must name finite values. Got {block[k, i]} at row "
                    f"{row}, column {col} of {src.given} instead.")


def _scan(matrix: DiskMatrix, src: Source, progress: ProgressFn, check: bool = True) -> str:
    """One pass over the file in file order past the page cache: every value finite (``check``),
    and the xxh3_128 of all its bytes (the cache's checksum)."""
    digest = xxhash.xxh3_128()
    fd = os.open(matrix.path, os.O_RDONLY)
    try:
        digest.update(os.pread(fd, matrix.offset, 0))
        buffer = aligned_empty((2 * _half_rows(matrix.row_bytes), matrix.shape[1]), matrix.dtype)
        done = 0
        for part, rows in matrix.chunks(np.arange(matrix.shape[0]), buffer):
            if check:
                _check_block(rows, part, src)
            digest.update(rows)
            done += part.size
            progress(done, matrix.shape[0])
        end = matrix.offset + matrix.nbytes
        tail = os.fstat(fd).st_size - end
        if tail > 0:  # bytes after the array (np.save writes none): hashed as the cache's checksum does
            digest.update(os.pread(fd, tail, end))
            os.posix_fadvise(fd, end, tail, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _convert_fortran(matrix: DiskMatrix, src: Source, out: Path, progress: ProgressFn) -> str:
    """Columns are already contiguous: stream them, cast, into an aligned file."""
    n, features = src.n_samples, src.features()
    digest = xxhash.xxh3_128(npy_header((n, features.size), src.out_dtype, fortran=True))
    buffer = aligned_empty((2 * _half_rows(matrix.row_bytes), n), matrix.dtype)
    # one cast buffer, reused: the writer has copied a block out before it asks for the next
    cast = None if matrix.dtype == src.out_dtype else np.empty((buffer.shape[0] // 2, n), src.out_dtype)

    def blocks():
        done = 0
        for part, rows in matrix.chunks(features, buffer):
            _check_block(rows, part, src)
            if cast is None:
                yield rows
            else:
                np.copyto(cast[:part.size], rows, casting="unsafe")
                yield cast[:part.size]
            done += part.size
            progress(done, features.size)

    write_coordinate_major(out, features.size, n, blocks(), src.out_dtype, hasher=digest, fortran=True)
    return digest.hexdigest()


def _convert_c(matrix: DiskMatrix, src: Source, out: Path, progress: ProgressFn):
    """Rows are contiguous: read a block of rows, write each feature's part of it where that
    feature's run lies in the Fortran-order output. Returns the target column (or None)."""
    n, features = src.n_samples, src.features()
    p, itemsize = features.size, src.out_dtype.itemsize
    y = None if src.target_column is None else np.empty(n)
    header = npy_header((n, p), src.out_dtype, fortran=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, header, 0)
        os.ftruncate(fd, HEADER_BYTES + n * p * itemsize)
        buffer = aligned_empty((2 * _half_rows(matrix.row_bytes), matrix.shape[1]), matrix.dtype)
        # runs of stored columns that are features: (first stored column, last + 1, first output feature)
        cut = src.target_column
        runs = [(0, src.shape[1], 0)] if cut is None else [(0, cut, 0), (cut + 1, src.shape[1], cut)]
        for part, rows in matrix.chunks(np.arange(n), buffer):
            _check_block(rows, part, src)
            first, k = int(part[0]), part.size
            if y is not None:
                y[first:first + k] = rows[:, cut]
            width = max(1, (CONVERT_BYTES // 16) // (k * itemsize))  # features transposed at a time
            for lo, hi, at in runs:
                for s in range(lo, hi, width):
                    e = min(hi, s + width)
                    t = np.ascontiguousarray(rows[:, s:e].T, dtype=src.out_dtype)  # (features, rows)
                    for j in range(e - s):
                        at_byte = HEADER_BYTES + ((at + s - lo + j) * n + first) * itemsize
                        if os.pwrite(fd, t[j], at_byte) != t[j].nbytes:
                            raise OSError(f"short write to {out}")
            progress(first + k, n)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # written once, read by the arms past the cache
    finally:
        os.close(fd)
    return y


def file_hash(path: Path, src: Source) -> str:
    """The xxh3_128 of a file just written, read past the page cache."""
    written = DiskMatrix(path, max_request=_request_bytes())
    try:
        return _scan(written, src, lambda done, total: None, check=False)
    finally:
        written.close()
