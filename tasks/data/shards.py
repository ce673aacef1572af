"""Shards: a part of a dataset kept on the disk of the worker that trains it (``cluster.data_access=disk``).

A CoCoA+ part on disk reads one shard: the coordinates [lo, hi) of the dataset, as the disk
tier (solvers/storage) reads them, in the dataset cache's format, in a folder of its
worker's own disk. Made once, checked when opened, reused by every arm and every later run
that cuts the same data the same way::

    <root>/<source>/<axis>-<lo>-<hi>/
        X.npy      axis "rows" (samples: the classifiers' coordinates): C order (k, width), each
                   row padded with zeros to an O_DIRECT-aligned width (the layout of the cache's
                   sample-major copy, tasks/data/rows.py); axis "columns" (features: the Lasso
                   family's): Fortran order (n_samples, k), a feature a contiguous run (the
                   cache's X.npy). The header is padded to 4096 bytes, so every coordinate is
                   aligned for O_DIRECT.
        y.npy      the targets of its samples (rows: y[lo:hi]; columns: all of y), as in the cache
        stats.npy  (2, k) float64: each coordinate's sum and sum of squares (the problem's row
                   statistics, computed as the shard is written: no pass to build a problem)
        meta.json  the cache's (tasks.data.cache.seal): each file's size, shape, dtype and
                   XXH3-128, and under "config" the shard's description (:class:`ShardSpec`)

``source`` is the dataset's cache key (tasks.data.cache_key): the same data and range have the
same folder on every host. ``root`` is ``cluster.shard_dir`` (``~`` and ``$VARS`` expanded on the
worker), else ``duhl-lab-shards`` beside the worker's Dask scratch space (its
``--local-directory``; on one machine the workers share it, as they share the disk). A sparse
shard will hold the sparse store of its layout (``X_csr`` / ``X_csc``) in place of X.npy.

How a shard gets there:

- **stream** (:func:`stream_shard`, on the driver): read from the driver's cache file in chunks of
  whole coordinates, each scattered straight to the worker and written there at its offset
  (:func:`write_chunk`); at most two chunks in flight, never the shard whole in RAM on either
  side. The written file's checksum must equal the driver's digest of the bytes it sent.
- **file** (:class:`FromFile`, on the worker): the worker copies its byte range of a file it can
  read itself (the driver's cache on a shared file system).
- **maker** (:class:`FromMaker`, on the worker): the worker makes its samples from the data config
  (``synthetic_rows``: a block of rows per seed), reading nothing.

Every writer writes into a temporary folder (``<name>.tmp-<host>-<pid>-<random>``) renamed whole at
the end; one left by a dead process on this host is removed by the next writer. A shard whose files
do not match its meta.json (checked by size and shape always, by checksum the first time a process
opens it) is removed and made again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import xxhash

from solvers.kernels import cpu
from solvers.storage.files import HEADER_BYTES, aligned_width, npy_header, read_npy_header, write_coordinate_major
from tasks.data.cache import checksum, entry_problem, pid_alive, seal
from tasks.data.configs import SyntheticRowsData, validate_data_config
from tasks.data.errors import DataError
from tasks.data.makers import synthetic_rows_range

log = logging.getLogger(__name__)

SHARDS = "duhl-lab-shards"
AXES = ("rows", "columns")
CHUNK_BYTES = 32 << 20  # a streamed chunk (whole coordinates: at least one)
IN_FLIGHT = 2  # streamed chunks scattered and not yet written
_VERIFIED: set = set()  # shard folders whose checksums this process has checked (or written)


class ShardLost(RuntimeError):
    """A shard could not be made on the worker asked (the worker died or did not answer)."""


@dataclass(frozen=True)
class ShardSpec:
    """Which shard: coordinates [lo, hi) along ``axis`` of the dataset ``source`` (its cache key),
    whose X is (n_samples, n_features) of ``dtype``."""

    source: str
    axis: str
    lo: int
    hi: int
    n_samples: int
    n_features: int
    dtype: str = "float64"

    def __post_init__(self):
        if self.axis not in AXES:
            raise ValueError(f"The 'axis' parameter of ShardSpec must be one of {AXES}. Got {self.axis!r} instead.")
        total = self.n_samples if self.axis == "rows" else self.n_features
        if not 0 <= self.lo < self.hi <= total:
            raise ValueError(f"The range of ShardSpec must be 0 <= lo < hi <= {total} ({self.axis}). "
                             f"Got [{self.lo}, {self.hi}) instead.")

    @property
    def name(self) -> str:
        return f"{self.axis}-{self.lo}-{self.hi}"

    @property
    def n_coords(self) -> int:
        return self.hi - self.lo

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def length(self) -> int:
        """Values stored per coordinate (a sample's row padded to an aligned width; a feature's column)."""
        return aligned_width(self.n_features, self.itemsize) if self.axis == "rows" else self.n_samples

    @property
    def coord_bytes(self) -> int:
        return self.length * self.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of its X.npy's data."""
        return self.n_coords * self.coord_bytes

    def header(self) -> bytes:
        if self.axis == "rows":
            return npy_header((self.n_coords, self.length), self.dtype)
        return npy_header((self.n_samples, self.n_coords), self.dtype, fortran=True)

    def folder(self, root) -> Path:
        return Path(root) / self.source / self.name


# --------------------------------------------------------------- where (on a worker)
def shard_root(shard_dir: Optional[str] = None, worker=None) -> Path:
    """The folder this process keeps shards in: ``shard_dir`` (expanded here), else beside the Dask
    worker's scratch space (its --local-directory; ``worker``: the one a ``Client.run`` call passes,
    where get_worker finds none), else the system's temporary folder (no worker: cluster=none)."""
    if shard_dir:
        return Path(os.path.expandvars(os.path.expanduser(str(shard_dir))))
    try:
        if worker is None:
            from distributed import get_worker

            worker = get_worker()
        local = Path(worker.local_directory)
    except (ImportError, ValueError):  # not in a worker
        return Path(tempfile.gettempdir()) / SHARDS
    base = local.parent
    if base.name == "dask-scratch-space":
        base = base.parent
    return base / SHARDS


def describe_shard(folder: Path) -> Dict[str, Any]:
    """Where a shard is and what it holds (the run's accounting): host, path, bytes, X's checksum."""
    meta = json.loads((folder / "meta.json").read_text())
    return {"host": socket.gethostname(), "path": str(folder), "bytes": int(meta["files"]["X.npy"]["bytes"]),
            "xxh3_128": meta["files"]["X.npy"]["xxh3_128"], **meta["config"]["shard"],
            "made_by": meta["config"].get("made_by", "")}


def open_shard(spec: ShardSpec, shard_dir: Optional[str] = None) -> Optional[Path]:
    """The shard's folder on this host if it is there and whole (its checksums checked the first time
    this process opens it), else None (a damaged or mismatched one is removed)."""
    folder = spec.folder(shard_root(shard_dir))
    if not folder.exists():
        return None
    problem = entry_problem(folder, with_checksums=str(folder) not in _VERIFIED)
    if problem is None:
        try:
            config = json.loads((folder / "meta.json").read_text())["config"]["shard"]
        except (OSError, ValueError, KeyError):
            config = None
        if config != asdict(spec):
            problem = f"it describes {config}, not {asdict(spec)}"
    if problem is not None:
        log.warning("shard %s is damaged (%s): making it again", folder, problem)
        _discard(folder)
        return None
    _VERIFIED.add(str(folder))
    return folder


def held_shard(spec: ShardSpec, shard_dir: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """describe_shard's row of the shard if this host holds it whole (open_shard), else None."""
    folder = open_shard(spec, shard_dir)
    return None if folder is None else {**describe_shard(folder), "made": False, "seconds": 0.0}


def list_shards(shard_dir: Optional[str] = None, source: Optional[str] = None, dask_worker=None) -> List[Dict[str, Any]]:
    """Every whole shard this host keeps (of ``source`` only, if given): describe_shard's rows. (Run on
    every worker by ``Client.run``, which passes ``dask_worker``.)"""
    root = shard_root(shard_dir, dask_worker)
    found = []
    for meta in sorted(root.glob(f"{source or '*'}/*/meta.json")):
        if ".tmp-" not in meta.parent.name:
            try:
                found.append(describe_shard(meta.parent))
            except (OSError, ValueError, KeyError):
                continue
    return found


def _discard(folder: Path) -> None:
    aside = folder.with_name(f"{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}-damaged")
    try:
        os.rename(folder, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _remove_stale(parent: Path) -> None:
    """Temporary folders of processes on this host that died while writing a shard."""
    host = socket.gethostname()
    for tmp in parent.glob("*.tmp-*"):
        tag = tmp.name.partition(".tmp-")[2].split("-")
        if len(tag) >= 2 and tag[0] == host and tag[1].isdigit() and not pid_alive(int(tag[1])):
            shutil.rmtree(tmp, ignore_errors=True)




# --------------------------------------------------------------- writing (on a worker)
def begin_shard(spec: ShardSpec, shard_dir: Optional[str] = None) -> str:
    """A temporary folder for ``spec``'s shard with its X.npy allocated (header written); its path."""
    parent = spec.folder(shard_root(shard_dir)).parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent)
    free = shutil.disk_usage(parent).free
    if spec.nbytes > free:
        raise DataError(f"shard {spec.name} of {spec.source} needs {spec.nbytes / 1e9:.2f} GB in {parent}, which has "
                        f"{free / 1e9:.2f} GB free: set cluster.shard_dir to a larger disk.")
    tmp = parent / f"{spec.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tmp.mkdir()
    with open(tmp / "X.npy", "wb") as f:
        f.write(spec.header())
        f.truncate(HEADER_BYTES + spec.nbytes)
    return str(tmp)


def write_chunk(tmp: str, spec: ShardSpec, first: int, data: np.ndarray) -> Tuple[int, np.ndarray, np.ndarray]:
    """Write coordinates [first, first + k) of the shard (``data``: (k, length)) at their offset in the
    temporary X.npy, past the page cache (written, synced, its pages dropped); returns (first, each
    coordinate's sum, sum of squares)."""
    rows = np.ascontiguousarray(data, dtype=spec.dtype).reshape(-1, spec.length)
    offset = HEADER_BYTES + first * spec.coord_bytes
    _pwrite(Path(tmp) / "X.npy", rows, offset)
    sums, sq = cpu.dense_row_stats(rows)
    return first, sums, sq


def _pwrite(path: Path, rows: np.ndarray, offset: int) -> None:
    view = memoryview(rows.reshape(-1).view(np.uint8))
    fd = os.open(path, os.O_WRONLY)
    try:
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)
        os.fdatasync(fd)
        os.posix_fadvise(fd, offset, len(view), os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def finish_shard(tmp: str, spec: ShardSpec, y: np.ndarray, stats: np.ndarray, made_by: str,
                 expected: Optional[str] = None, shard_dir: Optional[str] = None,
                 known: Optional[str] = None) -> Dict[str, Any]:
    """Seal the temporary folder (y.npy, stats.npy, meta.json with every checksum) and rename it to the
    shard's folder. ``expected``: the XXH3-128 X.npy must have (a streamed shard: the driver's digest of
    what it sent), checked against the file read back from disk; ``known``: X.npy's, hashed by the writer
    as it wrote (not read again). Returns describe_shard's row."""
    tmp = Path(tmp)
    if known is None:
        known = checksum(tmp / "X.npy")
        if expected is not None and known != expected:
            shutil.rmtree(tmp, ignore_errors=True)
            raise DataError(f"shard {spec.name} of {spec.source}: the file written on {socket.gethostname()} is not "
                            "what was sent (checksum); it was removed")
    np.save(tmp / "y.npy", np.asarray(y, dtype=np.float64))
    np.save(tmp / "stats.npy", np.asarray(stats, dtype=np.float64))
    seal(tmp, {"shard": asdict(spec), "made_by": made_by}, {"X.npy": known})
    folder = spec.folder(shard_root(shard_dir))
    try:
        os.rename(tmp, folder)  # atomic; fails when another writer on this host won the race
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if open_shard(spec, shard_dir) is None:
            raise
    _VERIFIED.add(str(folder))
    return describe_shard(folder)


def abort_shard(tmp: str) -> bool:
    shutil.rmtree(tmp, ignore_errors=True)
    return True


# --------------------------------------------------------------- sources a worker reads itself
@dataclass(frozen=True)
class FromFile:
    """The dataset's coordinate-major file and its targets, at paths this host can read (the driver's
    cache on a shared file system): ``path`` holds the whole data in the shard's layout (a rows
    shard: the sample-major copy, tasks.data.rows; a columns shard: the Fortran-order X.npy)."""

    path: str
    y_path: str


@dataclass(frozen=True)
class FromMaker:
    """A data config whose samples any host can make by ranges (``synthetic_rows``)."""

    data: Dict[str, Any]


MAKES_BY_RANGE = ("synthetic_rows",)  # data kinds FromMaker makes


def ensure_shard(spec: ShardSpec, source, shard_dir: Optional[str] = None) -> Dict[str, Any]:
    """On a worker: the shard, from this host's disk if it is there and whole, else made here from
    ``source`` (FromFile or FromMaker). Returns describe_shard's row (with ``made`` True when made now)."""
    folder = open_shard(spec, shard_dir)
    if folder is not None:
        return {**describe_shard(folder), "made": False, "seconds": 0.0}
    start = time.perf_counter()
    tmp = Path(begin_shard(spec, shard_dir))
    try:
        if isinstance(source, FromFile):
            y, stats, digest = _copy_range(spec, source, tmp)
            made_by = f"file {source.path}"
        elif isinstance(source, FromMaker):
            y, stats, digest = _make_range(spec, source, tmp)
            made_by = f"maker {source.data['name']} (seed {source.data.get('seed')})"
        else:
            raise TypeError(f"The 'source' parameter of ensure_shard must be FromFile or FromMaker. Got {source!r} instead.")
        row = finish_shard(str(tmp), spec, y, stats, made_by, shard_dir=shard_dir, known=digest)
    except BaseException:
        abort_shard(str(tmp))
        raise
    return {**row, "made": True, "seconds": time.perf_counter() - start}


def source_layout(path, spec: ShardSpec) -> int:
    """The data offset of the file a shard of ``spec`` is cut from, after checking its layout (the
    shard's coordinates contiguous in it, as the shard stores them)."""
    shape, fortran, dtype, offset, size = read_npy_header(path)
    want = ((spec.n_samples, spec.length) if spec.axis == "rows" else (spec.n_samples, spec.n_features))
    if spec.axis == "rows" and (fortran or tuple(shape) != want) or \
            spec.axis == "columns" and (not fortran or tuple(shape) != want) or dtype != np.dtype(spec.dtype):
        order = "C order, rows padded to an aligned width" if spec.axis == "rows" else "Fortran order"
        raise DataError(f"{path} holds {dtype}{list(shape)} ({'Fortran' if fortran else 'C'} order); a {spec.axis} "
                        f"shard is cut from {spec.dtype}{list(want)} in {order}")
    return offset


def read_chunks(path, spec: ShardSpec, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Tuple[int, np.ndarray]]:
    """(first coordinate, (k, length) array) of the shard's byte range of ``path``, a chunk of whole
    coordinates at a time, read past the page cache (buffered reads, their pages dropped)."""
    offset = source_layout(path, spec) + spec.lo * spec.coord_bytes
    per = max(1, int(chunk_bytes) // spec.coord_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        for first in range(0, spec.n_coords, per):
            k = min(per, spec.n_coords - first)
            out = np.empty((k, spec.length), dtype=spec.dtype)
            at, view = offset + first * spec.coord_bytes, memoryview(out.reshape(-1).view(np.uint8))
            got = 0
            while got < len(view):
                n = os.preadv(fd, [view[got:]], at + got)
                if n == 0:
                    raise DataError(f"{path} ended before coordinate {spec.lo + first + k} of its {spec.axis}")
                got += n
            os.posix_fadvise(fd, at, len(view), os.POSIX_FADV_DONTNEED)
            yield first, out
    finally:
        os.close(fd)


def _targets(spec: ShardSpec, y) -> np.ndarray:
    y = np.asarray(y)
    return np.array(y[spec.lo:spec.hi] if spec.axis == "rows" else y, dtype=np.float64)


def _copy_range(spec, source: FromFile, tmp: Path):
    stats = np.empty((2, spec.n_coords))
    digest = xxhash.xxh3_128(spec.header())

    def blocks():
        for first, rows in read_chunks(source.path, spec):
            stats[0, first:first + rows.shape[0]], stats[1, first:first + rows.shape[0]] = cpu.dense_row_stats(rows)
            yield rows

    _write_sequential(tmp, spec, blocks(), digest)
    return _targets(spec, np.load(source.y_path, mmap_mode="r")), stats, digest.hexdigest()


def _write_sequential(tmp: Path, spec: ShardSpec, blocks: Iterable[np.ndarray], digest) -> None:
    write_coordinate_major(tmp / "X.npy", spec.n_coords, spec.length, blocks, spec.dtype, hasher=digest,
                           fortran=spec.axis == "columns")


def _make_range(spec, source: FromMaker, tmp: Path):
    c = validate_data_config(source.data)
    if not isinstance(c, SyntheticRowsData):
        raise DataError(f"data '{c.name}' cannot be made by ranges on a worker (only {MAKES_BY_RANGE}); "
                        "stream it from the driver (cluster.shard_source=stream)")
    if (c.n_samples, c.n_features, c.dtype) != (spec.n_samples, spec.n_features, spec.dtype):
        raise DataError(f"data {c.name} is {c.dtype}[{c.n_samples}, {c.n_features}]; the shard asks for "
                        f"{spec.dtype}[{spec.n_samples}, {spec.n_features}]")
    if spec.axis == "rows":
        stats = np.empty((2, spec.n_coords))
        ys = np.empty(spec.n_coords)
        digest = xxhash.xxh3_128(spec.header())

        def blocks():
            done = 0
            for X, y in synthetic_rows_range(c, spec.lo, spec.hi):
                rows = np.zeros((X.shape[0], spec.length), dtype=spec.dtype)
                rows[:, :spec.n_features] = X
                stats[0, done:done + len(y)], stats[1, done:done + len(y)] = cpu.dense_row_stats(rows)
                ys[done:done + len(y)] = y
                done += len(y)
                yield rows

        _write_sequential(tmp, spec, blocks(), digest)
        return ys, stats, digest.hexdigest()
    # columns: each block of samples adds a run to every column (written at its offset); the statistics
    # and the checksum then from the file read back a chunk of whole columns at a time, as every
    # other writer computes them (the same numbers whoever made the shard)
    ys = np.empty(spec.n_samples)
    path, done = tmp / "X.npy", 0
    fd = os.open(path, os.O_WRONLY)
    try:
        for X, y in synthetic_rows_range(c, 0, spec.n_samples):
            part = np.ascontiguousarray(X[:, spec.lo:spec.hi].T)
            for j in range(spec.n_coords):
                at = HEADER_BYTES + j * spec.coord_bytes + done * spec.itemsize
                view = memoryview(part[j].view(np.uint8))
                written = 0
                while written < len(view):
                    written += os.pwrite(fd, view[written:], at + written)
            ys[done:done + len(y)] = y
            done += len(y)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    itself = ShardSpec(spec.source, "columns", 0, spec.n_coords, spec.n_samples, spec.n_coords, spec.dtype)
    stats = np.empty((2, spec.n_coords))
    digest = xxhash.xxh3_128(spec.header())
    for first, cols in read_chunks(path, itself):
        digest.update(cols)
        stats[0, first:first + cols.shape[0]], stats[1, first:first + cols.shape[0]] = cpu.dense_row_stats(cols)
    return ys, stats, digest.hexdigest()


# --------------------------------------------------------------- streaming (on the driver)
def stream_shard(client, worker: str, spec: ShardSpec, path, y, shard_dir: Optional[str] = None,
                 chunk_bytes: int = CHUNK_BYTES, timeout_s: float = 60.0, progress=None) -> Dict[str, Any]:
    """Make ``spec``'s shard on ``worker`` from the driver's file ``path`` (its layout: source_layout)
    and targets ``y``: chunks of whole coordinates read here past the page cache, scattered straight to
    the worker and written there at their offsets, at most IN_FLIGHT at a time; then sealed there (its
    checksum checked against the digest of what was sent). ``progress(bytes)``: after each chunk.
    Raises ShardLost when the worker dies or does not answer within ``timeout_s``."""
    on = dict(workers=[worker], allow_other_workers=False, pure=False)
    start = time.perf_counter()

    def wait(future):
        try:
            return future.result(timeout=timeout_s)
        except Exception as error:  # the worker died (cancelled, lost), or no answer in time
            raise ShardLost(f"streaming shard {spec.name} to {worker}: {type(error).__name__}: "
                            f"{str(error).splitlines()[0][:200] if str(error) else ''}") from None

    tmp = wait(client.submit(begin_shard, spec, shard_dir, **on))
    digest = xxhash.xxh3_128(spec.header())
    stats = np.empty((2, spec.n_coords))
    pending: deque = deque()
    sent = 0

    def collect():
        data, task = pending.popleft()
        first, sums, sq = wait(task)
        stats[0, first:first + sums.shape[0]], stats[1, first:first + sums.shape[0]] = sums, sq
        client.cancel([data, task])

    try:
        for first, rows in read_chunks(path, spec, chunk_bytes):
            digest.update(rows)
            [data] = client.scatter([rows], workers=[worker], direct=True, hash=False)
            pending.append((data, client.submit(write_chunk, tmp, spec, first, data, **on)))
            sent += rows.nbytes
            del rows
            if progress is not None:
                progress(sent)
            if len(pending) >= IN_FLIGHT:
                collect()
        while pending:
            collect()
        row = wait(client.submit(finish_shard, tmp, spec, _targets(spec, y), stats, f"stream from {socket.gethostname()}",
                                 digest.hexdigest(), shard_dir, **on))
    except BaseException:
        try:
            client.submit(abort_shard, tmp, **on)
        except Exception:  # the worker is gone: its temporary folder goes with it, or with the next writer there
            pass
        raise
    return {**row, "made": True, "seconds": time.perf_counter() - start, "sent_bytes": sent}
