"""What an arm costs the machine, as the operating system counts it: bytes read from
block devices (``/proc/self/io`` ``read_bytes``), peak resident memory (``VmHWM``, reset
per arm through ``/proc/self/clear_refs``), and the disk's cold read bandwidth. Linux;
elsewhere the numbers are NaN."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solvers.storage.reader import DiskMatrix, aligned_empty


def _proc_field(path: str, name: str, scale: int = 1) -> float:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name):
                    return float(line.split()[1]) * scale
    except OSError:
        pass
    return math.nan


def os_read_bytes() -> float:
    """Bytes this process has asked of block devices (page-cache hits not counted)."""
    return _proc_field("/proc/self/io", "read_bytes:")


def rss_bytes(pid: str = "self") -> float:
    return _proc_field(f"/proc/{pid}/status", "VmRSS:", 1024)


def peak_rss_bytes(pid: str = "self") -> float:
    return _proc_field(f"/proc/{pid}/status", "VmHWM:", 1024)


_children_peak = [0.0]  # the largest peak RSS above its start of a helper process since the arm began


def note_child_peak(delta: float) -> None:
    """A child process that worked for the arm (a peer's fits: tasks/stoppable.py) rose ``delta``
    bytes above its RSS at its start; ArmResources adds the largest such rise to its own."""
    if not math.isnan(delta):
        _children_peak[0] = max(_children_peak[0], delta)


def reset_peak_rss(pid: str = "self") -> bool:
    """Reset VmHWM of process ``pid`` to its current RSS (Linux >= 4.0); False where refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class ArmResources:
    """Counters around one arm: ``with ArmResources() as r: ...`` then ``r.os_read_bytes``
    (block-device bytes read meanwhile, reaped children's included: the kernel adds them to the
    parent's count) and ``r.peak_rss_delta`` (peak RSS above the RSS at the start, plus the
    largest rise of a child that worked meanwhile, noted by :func:`note_child_peak`: the
    child's memory lives beside the parent's)."""

    os_read_bytes: float = math.nan
    peak_rss_delta: float = math.nan

    def __enter__(self):
        self._read0 = os_read_bytes()
        self._peak_reset = reset_peak_rss()
        self._rss0 = rss_bytes()
        _children_peak[0] = 0.0
        return self

    def __exit__(self, *exc):
        self.os_read_bytes = os_read_bytes() - self._read0
        if self._peak_reset:
            self.peak_rss_delta = peak_rss_bytes() - self._rss0 + _children_peak[0]
        return False

    def metrics(self) -> dict:
        return {k: v for k, v in (("os_read_bytes", self.os_read_bytes), ("peak_rss_delta", self.peak_rss_delta))
                if not math.isnan(v)}


def _worker_counters(reset: bool = False):
    """On a worker: (RSS, peak RSS, bytes read from block devices) of its process; ``reset``: its peak
    RSS reset to its RSS first."""
    if reset:
        reset_peak_rss()
    return rss_bytes(), peak_rss_bytes(), os_read_bytes()


class WorkerResources:
    """What an arm cost each Dask worker process of ``client`` (None: nothing to count): its peak
    RSS above its RSS at the arm's start (VmHWM, reset then), and bytes it read from block devices
    meanwhile. A worker that joined during the arm counts its peak RSS above its first RSS seen;
    one that left is not in the numbers. ``metrics()``: ``workers_peak_rss_delta`` (the largest),
    ``workers_peak_rss`` (the largest peak), ``workers_os_read_bytes`` (their sum), and per worker
    (numbered in the order of their addresses at the start) ``worker<i>_peak_rss_delta``."""

    def __init__(self, client):
        self.client = client
        self.start: dict = {}
        self.end: dict = {}

    def __enter__(self):
        if self.client is not None:
            try:
                self.start = self.client.run(_worker_counters, True)
            except Exception:  # the cluster is not answering: nothing to count
                self.start = {}
        return self

    def __exit__(self, *exc):
        if self.client is not None:
            try:
                self.end = self.client.run(_worker_counters)
            except Exception:
                self.end = {}
        return False

    def metrics(self) -> dict:
        if not self.end:
            return {}
        order = {w: i for i, w in enumerate(sorted(self.start))}
        out, deltas = {}, {}
        for worker, (rss, peak, read) in self.end.items():
            rss0, _, read0 = self.start.get(worker, (rss, peak, read))
            deltas[worker] = peak - rss0
            if worker in order:
                out[f"worker{order[worker]}_peak_rss_delta"] = deltas[worker]
        reads = [read - self.start.get(w, (0, 0, read))[2] for w, (_, _, read) in self.end.items()]
        out.update(workers_peak_rss_delta=max(deltas.values()), workers_peak_rss=max(p for _, p, _ in self.end.values()),
                   workers_os_read_bytes=float(sum(reads)))
        return {k: v for k, v in out.items() if not math.isnan(v)}


def cold_read_bandwidth(path, max_bytes: int = 1 << 30) -> float:
    """GB/s of one read of up to ``max_bytes`` of the coordinate-major .npy ``path`` (or of the
    sparse store in the folder ``path``) past the page cache (O_DIRECT where the file system
    allows it), 64 MiB at a time as the disk tier reads (8 MiB requests on its threads): the
    disk's rate as the solver can see it."""
    if Path(path).is_dir():
        return _cold_store_bandwidth(Path(path), max_bytes)
    with DiskMatrix(Path(path)) as matrix:
        rows = max(1, min(matrix.shape[0], max_bytes // matrix.row_bytes))
        chunk = max(1, min(rows, (64 << 20) // matrix.row_bytes))
        buffer = aligned_empty((chunk, matrix.shape[1]), matrix.dtype)
        start = time.perf_counter()
        for lo in range(0, rows, chunk):
            coords = np.arange(lo, min(rows, lo + chunk))
            matrix.read_into(coords, buffer[:coords.size])
        seconds = time.perf_counter() - start
        return rows * matrix.row_bytes / seconds / 1e9


def _cold_store_bandwidth(folder: Path, max_bytes: int) -> float:
    """cold_read_bandwidth of a cache entry's sparse store: its entries in file order."""
    from solvers.storage.sparse_reader import ChunkBuffer, SparseReader
    from solvers.storage.sparse_store import open_store, store_name

    name = next(store_name(k) for k in ("csr", "csc") if (folder / f"{store_name(k)}.json").exists())
    store = open_store(folder, name)
    with SparseReader(store, max_request=8 << 20, threads=4) as reader:
        buffer = ChunkBuffer.of_bytes(store, 128 << 20)
        stop = min(store.nnz, max(1, max_bytes // store.entry_bytes))
        start = time.perf_counter()
        for _ in reader.stream(buffer, 0, stop):
            pass
        seconds = time.perf_counter() - start
        return reader.bytes_read / seconds / 1e9 if seconds > 0 else float("nan")
