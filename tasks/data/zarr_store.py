"""A user's own zarr array (``data=zarr``): an (n_samples, n_features) zarr v3 (or v2) array in a
local store and its target, converted into the cache's layout (``X.npy`` in Fortran order, its
data at 4096 bytes: what :class:`solvers.storage.reader.DiskMatrix` reads) a tile of the store's own
chunks at a time, never whole in RAM.

- **Tiles follow the chunks**: full-height bands of column chunks when a band of the store's
  chunk width fits the buffer (each feature then written in one run), else bands of chunk rows
  (as wide as the buffer allows), each tile read with zarr (its codecs: Blosc, zstd, none),
  checked finite, transposed, and its features written at their places in the output. Each
  stored chunk is decoded once; its file's pages are dropped once the tile is done, so the
  page cache holds little of the store either. The output is hashed in one more pass past
  the page cache (the cache's checksum).
- **RAM**: the tile (at most half of ``npy.CONVERT_BYTES``, the conversions' buffer, in the store's dtype, or one chunk band
  when a chunk row or column alone is larger), its transposed copy in the output dtype, the
  chunks zarr decodes at once, and the target (8 bytes a sample).
- **A group** (arrays X and y, say) is named by its arrays: ``data.path=my.zarr/X
  data.target=my.zarr/y``; naming the group is an error that lists its arrays.
- **A changed store is made again**: a store is a folder of chunk files, so its fingerprint
  is the size, modification time and name of every file under the array's folder (a
  rewritten chunk, an added or removed one, new metadata), hashed (xxh3) into the cache key.

zarr is imported when a zarr dataset is planned or made (it costs 0.6 s).
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

from solvers.storage.files import HEADER_BYTES, PAGE, npy_header, read_npy_header
from tasks.data import npy
from tasks.data.configs import ZarrData, resolve_path
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn, binary_target

log = logging.getLogger(__name__)

SAVED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what the solvers compute in
NUMERIC = "biuf"  # bool, signed, unsigned, float


@dataclass
class Source:
    array: object  # zarr.Array, opened read-only
    folder: Path  # the array's folder
    given: str  # data.path as the config wrote it (errors quote it)
    target: Optional[Path]  # a zarr array's folder or a .npy
    target_column: Optional[int]  # in [0, n_columns)
    out_dtype: np.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.array.shape)

    @property
    def n_samples(self) -> int:
        return self.shape[0]

    @property
    def n_features(self) -> int:
        return self.shape[1] - (self.target_column is not None)


def _open(path: Path, param: str, given: str):
    """The zarr array at ``path`` (read-only), or a one-line DataError naming ``param``."""
    import zarr

    where = f"The '{param}' parameter of data 'zarr'"
    if not path.exists():
        raise DataError(f"{where} names nothing: {given} ({path}).")
    if not path.is_dir():
        hint = " (a .npy: use data=npy)" if path.suffix == ".npy" else ""
        raise DataError(f"{where} must name a zarr array (a folder holding zarr.json or .zarray). Got a file "
                        f"instead: {given}{hint}.")
    try:
        node = zarr.open(store=str(path), mode="r")
    except Exception as error:  # noqa: BLE001 - missing or malformed metadata: whatever zarr raises
        raise DataError(f"{where} must name a zarr array (a folder holding zarr.json or .zarray). Got {given}, "
                        f"which is not one ({type(error).__name__}).") from None
    if isinstance(node, zarr.Group):
        arrays = sorted(name for name, _ in node.arrays())
        example = f" (e.g. data.path={given.rstrip('/')}/{arrays[0]})" if arrays else ""
        raise DataError(f"{where} must name a zarr array, not a group: {given} is a group holding the arrays "
                        f"{arrays}; name one{example}.")
    return node


def inspect(c: ZarrData, base_dir: Path) -> Source:
    """The array's shape and dtype from its metadata, and its target's; a one-line DataError
    naming the parameter and the value for anything the solvers cannot take."""
    path = resolve_path(c.path, base_dir)
    array = _open(path, "path", c.path)
    shape, dtype = tuple(array.shape), np.dtype(array.dtype)
    npy.check_shape("zarr", c.path, shape)
    if dtype.kind not in NUMERIC:
        raise DataError(f"The 'path' parameter of data 'zarr' must name an array of numbers (bool, int, uint, "
                        f"float). Got {dtype} in {c.path} instead.")
    column = npy.target_column("zarr", c, shape)
    target = None
    if c.target is not None:
        target = resolve_path(c.target, base_dir)
        t_shape, t_dtype = _target_header(target, c.target)
        npy.check_target_shape("zarr", c, shape, t_shape)
        if t_dtype.kind not in NUMERIC:
            raise DataError(f"The 'target' parameter of data 'zarr' must name numbers. Got {t_dtype} in "
                            f"{c.target} instead.")
    native = dtype.newbyteorder("=")
    out = np.dtype(c.dtype) if c.dtype else (native if native in SAVED_DTYPES else np.dtype(np.float64))
    return Source(array, path, c.path, target, column, out)


def _target_header(target: Path, given: str):
    """(shape, dtype) of the target: a .npy file or a zarr array."""
    if target.is_file() and target.suffix == ".npy":
        try:
            shape, _, dtype, _, _ = read_npy_header(target)
        except ValueError:
            raise DataError(f"The 'target' parameter of data 'zarr' must name a zarr array or a .npy. Got "
                            f"{given}, which is neither.") from None
        return tuple(shape), dtype
    array = _open(target, "target", given)
    return tuple(array.shape), np.dtype(array.dtype)


def fingerprint(folder: Path) -> list:
    """[total bytes, xxh3 of every file's (name, size, mtime)] under a store's folder (or of one
    file): any rewritten, added or removed chunk or metadata changes it."""
    if folder.is_file():
        stat = folder.stat()
        return [stat.st_size, stat.st_mtime_ns]
    digest, total = xxhash.xxh3_64(), 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            stat = os.stat(full)
            total += stat.st_size
            digest.update(f"{os.path.relpath(full, folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return [total, digest.hexdigest()]


def identity(c: ZarrData, base_dir: Path) -> Dict[str, object]:
    """The cache key's share of the store: its path and fingerprint (and the target's)."""
    src = inspect(c, base_dir)
    ident: Dict[str, object] = {"path": str(src.folder), "source": fingerprint(src.folder)}
    if src.target is not None:
        ident.update(target_path=str(src.target), target_source=fingerprint(src.target))
    return ident


def planned_bytes(c: ZarrData, base_dir: Path) -> int:
    src = inspect(c, base_dir)
    return HEADER_BYTES + src.n_samples * src.n_features * src.out_dtype.itemsize + 8 * src.n_samples + PAGE


# ------------------------------------------------------------------------------ making ---
def tile_shape(shape, chunks, itemsize, budget) -> tuple:
    """(rows, columns) of a tile: whole chunks, about ``budget`` bytes or one chunk band.
    Full height when a band of one chunk's width fits (each feature one run in the output)."""
    (n, m), (cr, cc) = shape, chunks
    if n * min(cc, m) * itemsize <= budget:
        return n, min(m, max(cc, budget // (n * itemsize) // cc * cc))
    w = min(m, max(cc, budget // (min(cr, n) * itemsize) // cc * cc))
    h = min(n, max(cr, budget // (w * itemsize) // cr * cr)) if w == m else min(n, cr)
    return h, w


def make_zarr(c: ZarrData, out: Path, base_dir: Path, progress: ProgressFn) -> Dict[str, str]:
    """Write the entry (``X.npy``, ``y.npy``) into ``out``; returns {file: xxh3_128}."""
    src = inspect(c, base_dir)
    started = time.perf_counter()
    y = None if src.target is None else _target(src.target, c.target)
    column = _convert(src, out / "X.npy", progress)
    y = column if column is not None else y
    digest = npy.file_hash(out / "X.npy", None)  # one pass past the page cache, npy's conversion buffer
    np.save(out / "y.npy", binary_target(y, c.positive_class, c.name))
    log.info("data zarr: %s %d x %d %s (chunks %s) converted in %.1fs", c.path, src.n_samples, src.n_features,
             src.out_dtype, tuple(src.array.chunks), time.perf_counter() - started)
    return {"X.npy": digest}


def _target(target: Path, given: str) -> np.ndarray:
    if target.is_file():
        y = np.load(target, mmap_mode="r")
    else:
        import zarr
        y = zarr.open_array(store=str(target), mode="r")[...]
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    _finite(y, "target", lambda i: f"entry {i} of {given}")
    return y


def _finite(values, param, where) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise DataError(f"The '{param}' parameter of data 'zarr' must name finite values. Got "
                        f"{values[bad[0]]} at {where(int(bad[0]))} instead.")


def _convert(src: Source, out: Path, progress: ProgressFn) -> Optional[np.ndarray]:
    """Tile by tile into a Fortran-order, 4096-aligned .npy; returns the target column (or None)."""
    array, (n, m) = src.array, src.shape
    itemsize, cut = src.out_dtype.itemsize, src.target_column
    h, w = tile_shape((n, m), tuple(array.chunks), np.dtype(array.dtype).itemsize,
                      npy.CONVERT_BYTES // 2)
    y = None if cut is None else np.empty(n)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, npy_header((n, src.n_features), src.out_dtype, fortran=True), 0)
        os.ftruncate(fd, HEADER_BYTES + n * src.n_features * itemsize)
        done, total = 0, n * m
        for j0 in range(0, m, w):
            j1 = min(m, j0 + w)
            for i0 in range(0, n, h):
                i1 = min(n, i0 + h)
                tile = np.asarray(array[i0:i1, j0:j1])
                _drop_chunks(src, (i0, i1), (j0, j1))
                _check_tile(tile, i0, j0, src)
                stored = np.arange(j0, j1)
                if cut is not None and j0 <= cut < j1:
                    y[i0:i1] = tile[:, cut - j0]
                    tile, stored = np.delete(tile, cut - j0, axis=1), np.delete(stored, cut - j0)
                features = stored - (stored > cut) if cut is not None else stored
                t = np.empty((features.size, i1 - i0), src.out_dtype)  # (features, rows)
                np.copyto(t, tile.T, casting="unsafe")
                del tile
                if i1 - i0 == n and features.size:  # whole features: one run in the output
                    _write(fd, t, HEADER_BYTES + int(features[0]) * n * itemsize, out)
                for k, f in enumerate(features if i1 - i0 < n else ()):
                    _write(fd, t[k], HEADER_BYTES + (int(f) * n + i0) * itemsize, out)
                done += (i1 - i0) * (j1 - j0)
                progress(done, total)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # written once, read by the arms past the cache
    finally:
        os.close(fd)
    return y


def _write(fd: int, data: np.ndarray, at: int, out: Path) -> None:
    if os.pwrite(fd, data, at) != data.nbytes:
        raise OSError(f"short write to {out}")


def _check_tile(tile: np.ndarray, i0: int, j0: int, src: Source) -> None:
    if tile.dtype.kind != "f" or np.isfinite(tile).all():
        return
    i, j = np.argwhere(~np.isfinite(tile))[0]
    col = int(j0 + j)
    param = "target_column" if col == src.target_column else "path"
    raise DataError(f"The '{param}' parameter of data 'zarr' must name finite values. Got {tile[i, j]} at row "
                    f"{i0 + int(i)}, column {col} of {src.given} instead.")


def _drop_chunks(src: Source, rows: tuple, cols: tuple) -> None:
    """Drop from the page cache the stored chunk files (shards, where sharded) a tile read."""
    array = src.array
    sr, sc = array.shards or array.chunks
    for a in range(rows[0] // sr, (rows[1] - 1) // sr + 1):
        for b in range(cols[0] // sc, (cols[1] - 1) // sc + 1):
            try:
                fd = os.open(src.folder / array.metadata.encode_chunk_key((a, b)), os.O_RDONLY)
            except FileNotFoundError:  # an empty chunk: the fill value, no file
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
