"""The dataset cache: made once, checked when read, rebuilt when damaged.

Every dataset is a pure function of its config (and, for files, of the file's
size and modification time; for a zarr store, of its files' names, sizes and times), so a cache keyed by a hash of the config is safe:
a sweep over solver settings makes each dataset once, and concurrent jobs that
race to make the same one each write to a private folder and keep the first.

An entry ``<cache_dir>/<name>-<hash>/`` holds the maker's ``.npy`` files (or, for sparse
data from files and click-like sets, a sparse store: solvers/storage/sparse_store.py, ``X_csr``
and, once a model asks for columns, ``X_csc``) and a ``meta.json`` that records, for each file, its size, its array shape and dtype,
and an xxHash (XXH3-128) of its bytes, computed right after writing. Reading
checks sizes and shapes always (cheap: file metadata and .npy headers), and
the checksums the first time the entry is read in a process (~4 GB/s: 0.04 s
for the default 160 MB). A damaged entry (a file missing, truncated, changed,
or no meta.json) is reported by name and rebuilt. Temporary folders left by a
process that died while making data are removed; a dataset larger than the
free disk is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import scipy.sparse as sp
import xxhash

from solvers.storage.sparse_store import open_store, store_name

from tasks.data.configs import Dataset, resolve_path, validate_data_config
from tasks.data.errors import DataError
from tasks.data.criteo import make_criteo, make_synthetic_criteo
from tasks.data.libsvm import make_libsvm
from tasks.data.makers import (ProgressFn, make_sklearn, make_sphere, make_synthetic_dense, make_synthetic_rows,
                               make_synthetic_sparse, planned_bytes)
from tasks.data.npy import identity as npy_identity
from tasks.data.npy import make_npy
from tasks.data.npy import planned_bytes as npy_planned_bytes
from tasks.data.zarr_store import identity as zarr_identity
from tasks.data.zarr_store import make_zarr
from tasks.data.zarr_store import planned_bytes as zarr_planned_bytes

log = logging.getLogger(__name__)

MAKERS = {
    "sphere": make_sphere,
    "synthetic_dense": make_synthetic_dense,
    "synthetic_rows": make_synthetic_rows,
    "synthetic_sparse": make_synthetic_sparse,
    "libsvm": make_libsvm,
    "criteo": make_criteo,
    "synthetic_criteo": make_synthetic_criteo,
    "sklearn": make_sklearn,
    "npy": make_npy,
    "zarr": make_zarr,
}
BYTE_COUNTED = {"libsvm", "criteo"}  # makers whose progress is the bytes of their file read (the others: steps)
META_VERSION = 2
ADDED_LATER = {"n_groups": 1}  # fields hashed into the cache key only when not at this default
_CHUNK = 1 << 26  # bytes hashed per read
_CHECKED: set = set()  # entries whose checksums this process has verified


def cache_key(cfg: Any, base_dir: Path = Path(".")) -> str:
    """Hash of the config (and of the source file's identity for file datasets)."""
    c = validate_data_config(cfg)
    fields = {k: v for k, v in dataclasses.asdict(c).items()
              if not (k in ADDED_LATER and v == ADDED_LATER[k])}  # caches made before a field existed stay valid
    fields.update(_source_identity(c, base_dir))
    blob = json.dumps(fields, sort_keys=True).encode()
    return f"{c.name}-{hashlib.sha256(blob).hexdigest()[:12]}"


def _source_identity(c, base_dir: Path) -> Dict[str, Any]:
    """The files a dataset is made from: each one's path, size and modification time (hashed
    into the key, and kept in meta.json: an entry of an earlier version of the file is removed)."""
    if c.name in ("libsvm", "criteo"):
        src = resolve_path(c.path, base_dir)
        stat = _stat_or_fail(src, c)
        return {"path": str(src), "source": [stat.st_size, stat.st_mtime_ns]}
    if c.name == "npy":
        return npy_identity(c, base_dir)
    if c.name == "zarr":
        return zarr_identity(c, base_dir)
    return {}


def _stat_or_fail(path: Path, c) -> os.stat_result:
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DataError(f"The 'path' parameter of data '{c.name}' names no file: {path} "
                        "(set data.path=/path/to/file).") from None
    if not path.is_file():
        raise DataError(f"The 'path' parameter of data '{c.name}' must be a file. Got a directory: {path}.")
    return stat


def checksum(path: Path) -> str:
    """XXH3-128 of the file, its pages dropped from the page cache as they are hashed (a check of a
    dataset larger than RAM leaves the cache as it found it, and the disk cold for the arms)."""
    digest = xxhash.xxh3_128()
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        done = 0
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            os.posix_fadvise(fd, done, len(chunk), os.POSIX_FADV_DONTNEED)
            done += len(chunk)
    return digest.hexdigest()


def describe_file(path: Path, known: Optional[str] = None) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"bytes": path.stat().st_size, "xxh3_128": known or checksum(path)}
    if path.suffix == ".npy":
        array = np.load(path, mmap_mode="r")
        entry.update(shape=list(array.shape), dtype=str(array.dtype))
    return entry


def _problem(folder: Path, with_checksums: bool) -> Optional[str]:
    """What is wrong with a cache entry (None: it is whole)."""
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError):
        return "meta.json is missing or unreadable"
    if meta.get("version") != META_VERSION:
        return f"meta.json is of version {meta.get('version')}, not {META_VERSION}"
    for name, expected in files.items():
        path = folder / name
        if not path.exists():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["bytes"]:
            return f"{name} has {size} bytes, not {expected['bytes']}"
        if "shape" in expected:
            try:
                array = np.load(path, mmap_mode="r")
            except ValueError as error:
                return f"{name} is not a readable .npy file ({error})"
            if list(array.shape) != expected["shape"] or str(array.dtype) != expected["dtype"]:
                return f"{name} holds {array.dtype}{list(array.shape)}, not {expected['dtype']}{expected['shape']}"
        if with_checksums and checksum(path) != expected["xxh3_128"]:
            return f"{name} has changed since it was written (checksum)"
    return None


def entry_problem(folder: Path, with_checksums: bool = True) -> Optional[str]:
    """What is wrong with a folder in the cache's layout (an entry, or a worker's shard:
    tasks/data/shards.py): None when its files match its meta.json (sizes, shapes, and
    checksums if asked), else the first mismatch in a few words."""
    return _problem(Path(folder), with_checksums)


def pid_alive(pid: int) -> bool:
    """Whether a process of this host is alive (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(cache_dir: Path) -> None:
    """Temporary folders of processes on this host that died while making data."""
    host = socket.gethostname()
    for tmp in cache_dir.glob("*.tmp-*"):
        _, _, tag = tmp.name.partition(".tmp-")
        parts = tag.split("-")
        if len(parts) >= 3 and parts[0] == host and parts[1].isdigit() and not pid_alive(int(parts[1])):
            log.warning("removing %s, left by process %s, which died while making data", tmp.name, parts[1])
            shutil.rmtree(tmp, ignore_errors=True)


def _check_room(c, cache_dir: Path, base_dir: Path) -> None:
    own = {"npy": npy_planned_bytes, "zarr": zarr_planned_bytes}
    needed = own.get(c.name, planned_bytes)(c, base_dir)
    free = shutil.disk_usage(cache_dir).free
    if needed > free:
        raise DataError(f"data '{c.name}' needs {needed / 1e9:.1f} GB in {cache_dir}, which has "
                        f"{free / 1e9:.1f} GB free: make it smaller, or set cache_dir to a larger disk.")


def _writable_dir(cache_dir: Path) -> Path:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-")
        probe.close()
    except OSError as error:
        raise DataError(f"The 'cache_dir' {cache_dir} is not a writable folder ({error.strerror}).") from None
    return cache_dir


def load_dataset(cfg: Any, cache_dir: Path, base_dir: Path = Path("."),
                 progress: Optional[ProgressFn] = None) -> Dataset:
    """Make the dataset once (into the cache), then return it memory-mapped and checked."""
    c = validate_data_config(cfg)
    cache_dir = _writable_dir(Path(cache_dir))
    folder = cache_dir / cache_key(c, base_dir)
    _remove_stale_temporaries(cache_dir)
    if folder.exists():
        problem = _problem(folder, with_checksums=False)
        if problem is None:
            try:
                return read_cached(folder)  # the checksums, once per process
            except DataError as error:
                problem = str(error).rpartition("damaged: ")[2].rstrip(".")
        log.warning("dataset cache entry %s is damaged (%s): rebuilding it", folder.name, problem)
        _discard(folder)
    _check_room(c, cache_dir, base_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f"{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}-",
                                dir=cache_dir))
    try:
        with _cleanup_on_sigterm():
            known = MAKERS[c.name](c, tmp, base_dir, progress or (lambda done, total: None))
        identity = _source_identity(c, base_dir)
        seal(tmp, {**dataclasses.asdict(c), **identity}, known)
        try:
            os.rename(tmp, folder)  # atomic; fails if a concurrent job won the race
        except OSError:
            if _problem(folder, with_checksums=False) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _CHECKED.add(str(folder))  # just written and hashed
    if identity:
        _remove_superseded(cache_dir, folder, identity)
    return read_cached(folder)


@contextlib.contextmanager
def _cleanup_on_sigterm():
    """While data are made: SIGTERM (a kill, a job scheduler's stop) raises SystemExit, so the
    temporary folder is removed on the way out (SIGKILL cannot be caught: the next run removes
    what it left). Only in the main thread, and only over Python's default handling."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def seal(folder: Path, config: Dict[str, Any], known: Optional[Dict[str, str]] = None) -> None:
    """Write a folder's meta.json: each file's size, shape, dtype and checksum (a maker's
    output, or files a user wrote in the cache's layout); ``known``: checksums the maker
    computed while writing (file name -> xxh3_128), not read again."""
    known = known or {}
    files = {p.name: describe_file(p, known.get(p.name)) for p in sorted(Path(folder).iterdir()) if p.name != "meta.json"}
    meta = {"version": META_VERSION, "config": config, "files": files}
    (Path(folder) / "meta.json").write_text(json.dumps(meta, indent=1))


def _remove_superseded(cache_dir: Path, folder: Path, identity: Dict[str, Any]) -> None:
    """Entries made from an earlier version of the same source file (its size or modification
    time has changed since): no key reaches them any more, and a converted copy may be large.
    An entry whose X.npy is a link to the file loses the link only."""
    kind, files = folder.name.rpartition("-")[0], _stamps(identity)
    for other in cache_dir.glob(f"{kind}-*"):
        if other == folder or ".tmp-" in other.name:
            continue
        try:
            config = json.loads((other / "meta.json").read_text())["config"]
        except (OSError, ValueError, KeyError):
            continue
        if any(files.get(path, stamp) != stamp for path, stamp in _stamps(config).items()):
            log.warning("removing dataset cache entry %s: made from an earlier version of its file(s) %s",
                        other.name, ", ".join(files))
            try:
                _discard(other)
            except OSError:
                pass  # another process removed it first


def _stamps(config: Dict[str, Any]) -> Dict[str, Any]:
    """{source file: [size, mtime]} of an entry's config (or of a source identity)."""
    pairs = (("path", "source"), ("target_path", "target_source"))
    return {config[p]: config[s] for p, s in pairs if config.get(p) is not None and config.get(s) is not None}


def _discard(folder: Path) -> None:
    """Move a damaged entry aside, then delete it (a reader elsewhere keeps its open files)."""
    aside = folder.with_name(f"{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}-damaged")
    os.rename(folder, aside)
    shutil.rmtree(aside, ignore_errors=True)


def read_cached(folder: Path) -> Dataset:
    """A cache entry, memory-mapped; its sizes and shapes checked (and its checksums, the first
    time in this process). A damaged entry is a DataError naming it (``load_dataset`` rebuilds)."""
    folder = Path(folder)
    with_checksums = str(folder) not in _CHECKED
    started = time.perf_counter()
    problem = _problem(folder, with_checksums)
    verify_s = time.perf_counter() - started
    if problem is not None:
        raise DataError(f"dataset cache entry {folder.name} is damaged: {problem}.")
    _CHECKED.add(str(folder))

    def load(name: str) -> np.ndarray:
        return np.load(folder / name, mmap_mode="r")

    store = None
    if (folder / "X.npy").exists():
        X = load("X.npy")
    elif (folder / f"{store_name('csr')}.json").exists():  # a sparse store: X memory-mapped from it
        try:
            store = open_store(folder, store_name("csr"))
        except (OSError, ValueError) as error:
            raise DataError(f"dataset cache entry {folder.name} is damaged: {error}.") from None
        X = store.matrix()
    else:
        shape = tuple(json.loads((folder / "shape.json").read_text()))
        X = sp.csr_matrix((load("X_data.npy"), load("X_indices.npy"), load("X_indptr.npy")),
                          shape=shape, copy=False)
    coef = load("coef.npy") if (folder / "coef.npy").exists() else None
    return Dataset(X=X, y=load("y.npy"), coef=coef, path=folder,
                   verified="checksum" if with_checksums else "size and shape", verify_s=verify_s, store=store)
