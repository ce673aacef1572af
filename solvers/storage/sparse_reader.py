"""Scattered coordinates of a sparse store read past the page cache, a buffer at a time.

A coordinate of a :class:`solvers.storage.sparse_store.SparseStore` is a run of entries of
variable length (``indptr[i]:indptr[i + 1]``), in the ``indices`` file and, unless the store is
binary, at the same entry positions in the ``values`` file. Reading a set of coordinates:

- **Planned in entries, read in blocks.** Each wanted coordinate's run is widened to whole
  blocks (``block_entries`` entries: whole 4096-byte pages in both files); runs whose blocks
  touch (or are at most ``max_hole`` bytes of indices apart) share one *run* of blocks, read
  as one or more requests of at most ``max_request`` bytes. Small coordinates that share a
  page are read once; the bytes around them that no one asked for are read too, and counted.
- **Into one of two halves of a buffer**, at an entry position that agrees in both files, so
  the chunk needs no copy: a *local CSR* (``indptr`` over the half, every wanted coordinate a
  row, the bytes between them rows no one reads) goes straight to the compiled kernels, which
  touch only the rows listed in ``positions``. The next chunk is read into the other half
  while the caller computes on this one.
- **A coordinate longer than a half** is cut into pieces (consecutive rows of the local CSR,
  ``first`` / ``last`` mark them): the caller sums what it computes over a coordinate's pieces.
- **O_DIRECT** where the file system allows it (no page cache, so RAM stays within the
  buffers); buffered ``pread`` with ``POSIX_FADV_DONTNEED`` after each request elsewhere
  (tmpfs, which accepts O_DIRECT but is RAM). ``preadv`` releases the GIL: ``threads``
  requests are in flight at once.

Counters (thread-safe, as solvers.storage.reader.DiskMatrix's): ``bytes_read`` is what the
disk was asked for (whole blocks: with O_DIRECT, what /proc/self/io's read_bytes counts),
``useful_bytes`` the wanted coordinates' own entries, ``read_s`` the seconds with a read in
flight (overlapping calls count once), ``requests``.

NumPy, Numba (the planner) and the standard library; Linux (O_DIRECT, posix_fadvise).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit

from solvers.storage.files import PAGE, RAM_FILE_SYSTEMS, aligned_empty, fs_type, open_direct, preadv_all
from solvers.storage.sparse_store import SparseStore

__all__ = ["ChunkBuffer", "SparseChunk", "SparseReader", "plan_chunk"]

THREADS = 16  # requests in flight: scattered small requests need many (as OnDisk's READ_THREADS)
MAX_REQUEST = 2 << 20
PIECE_ENTRIES = 16  # a half's entries per piece its plan can hold


@dataclass
class SparseChunk:
    """The wanted coordinates of one chunk, in the half of the buffer they were read into.

    ``indptr``, ``indices``, ``values``: a local CSR over the half (``values`` a read-only 1
    of the buffer's ``ones_dtype`` for a binary store); the wanted pieces are its rows
    ``positions`` (one per piece, in file order). ``coords``: each piece's coordinate;
    ``unique``: its index in the sorted, de-duplicated coordinates of the read; ``first`` /
    ``last``: whether the piece starts / ends its coordinate (False only for coordinates cut
    in pieces); ``starts``: its first entry in the store's files. Valid until the next chunk is
    asked for."""
    indptr: np.ndarray
    positions: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    coords: np.ndarray
    unique: np.ndarray
    first: np.ndarray
    last: np.ndarray
    starts: np.ndarray

    @property
    def size(self) -> int:
        return self.positions.shape[0]


class ChunkBuffer:
    """Two halves of ``capacity`` entries each (indices, and values unless the store is binary),
    page-aligned for O_DIRECT; a binary store's chunks get a read-only array of ones of
    ``ones_dtype`` as values. About ``2 * capacity * entry_bytes`` (+ ``capacity * 8`` of ones)."""

    def __init__(self, store: SparseStore, capacity: int, ones_dtype=np.float64):
        block = store.block_entries
        self.capacity = max(4 * block, int(capacity) // block * block)
        self.indices = [aligned_empty((self.capacity,), store.index_dtype) for _ in range(2)]
        if store.binary:
            ones = aligned_empty((self.capacity,), ones_dtype)
            ones[:] = 1
            ones.setflags(write=False)
            self.values = [ones, ones]
        else:
            self.values = [aligned_empty((self.capacity,), store.value_dtype) for _ in range(2)]
        # each half's plan: at most a piece per PIECE_ENTRIES entries of capacity (a chunk of shorter
        # coordinates is cut there: its plan stays a sixteenth of its data's size in int64s); made
        # when first planned (a stream of entries in file order needs none)
        self.pieces = max(16, self.capacity // PIECE_ENTRIES)
        self._plans = None
        self.nbytes = (sum(a.nbytes for a in self.indices) + sum({id(a): a.nbytes for a in self.values}.values())
                       + 2 * 8 * 8 * self.pieces)

    @property
    def plans(self):
        if self._plans is None:
            self._plans = [tuple(np.empty(self.pieces, np.int64) for _ in range(8)) for _ in range(2)]
        return self._plans

    @classmethod
    def of_bytes(cls, store: SparseStore, buffer_bytes: int, ones_dtype=np.float64):
        """A buffer of about ``buffer_bytes`` in all (its plans included)."""
        per_entry = 2 * store.entry_bytes + (np.dtype(ones_dtype).itemsize if store.binary else 0) \
            + 2 * 8 * 8 / PIECE_ENTRIES
        return cls(store, int(int(buffer_bytes) / per_entry), ones_dtype)


@njit(cache=True, nogil=True)
def plan_chunk(indptr, coords, k, lo, block, capacity, piece_max, hole, p_coord, p_lo, p_hi, p_start, p_end,
               r_lo, r_hi, r_pos):
    """Plan one chunk: the reads of the sorted, distinct ``coords`` from ``coords[k]`` (from its
    entry ``lo``; -1: its start) into a half of ``capacity`` entries.

    Each coordinate is one piece, or pieces of at most ``piece_max`` entries when longer. A piece
    joins the current run of blocks when its first block is at most ``hole`` entries past the
    run's end and the run still fits the half, else starts a new run; the chunk ends when the half
    is full or the piece arrays are. Fills, per piece: its coordinate's index in ``coords``, file
    entry start and end, buffer start and end; per run: first and end entry (multiples of
    ``block``) and buffer position. Returns (pieces, runs, next k, next lo)."""
    n = coords.shape[0]
    max_pieces = p_coord.shape[0]
    fill = 0  # the half's entries taken: the end of the last run
    last_end = 0
    n_runs = 0
    p = 0
    while k < n and p < max_pieces:
        lo_c = indptr[coords[k]]
        hi_c = indptr[coords[k] + 1]
        if lo < 0:
            lo = lo_c
        hi = min(hi_c, lo + piece_max)
        if hi > lo:
            b_lo = lo - lo % block
            b_hi = (hi + block - 1) // block * block
            joined = False
            if n_runs > 0 and b_lo <= r_hi[n_runs - 1] + hole:
                new_hi = max(r_hi[n_runs - 1], b_hi)
                if r_pos[n_runs - 1] + new_hi - r_lo[n_runs - 1] <= capacity:
                    r_hi[n_runs - 1] = new_hi
                    fill = r_pos[n_runs - 1] + new_hi - r_lo[n_runs - 1]
                    joined = True
            if not joined:
                if fill + b_hi - b_lo > capacity:
                    break  # the half is full: this piece starts the next chunk
                r_lo[n_runs] = b_lo
                r_hi[n_runs] = b_hi
                r_pos[n_runs] = fill
                fill += b_hi - b_lo
                n_runs += 1
            base = r_pos[n_runs - 1] - r_lo[n_runs - 1]
            p_start[p] = base + lo
            p_end[p] = base + hi
            last_end = p_end[p]
        else:  # an empty coordinate: an empty row, nothing to read
            p_start[p] = last_end
            p_end[p] = last_end
        p_coord[p] = k
        p_lo[p] = lo
        p_hi[p] = hi
        p += 1
        lo = hi
        if lo >= hi_c:
            k += 1
            lo = -1
    return p, n_runs, k, lo


class SparseReader:
    """Reads coordinates of a :class:`SparseStore` past the page cache (see the module's docstring).

    ``direct``: None uses O_DIRECT where the file system allows it (not tmpfs), True requires it,
    False reads buffered (pages dropped after each request). ``max_hole``: bytes of indices
    between two wanted blocks that one request reads through (0: only touching blocks merge).
    A pickled copy reopens the files by path, its counters at 0.
    """

    def __init__(self, store, *, threads=THREADS, max_request=MAX_REQUEST, direct=None, max_hole=0):
        if not isinstance(store, SparseStore):
            raise ValueError(f"The 'store' parameter of SparseReader must be a SparseStore. "
                             f"Got {type(store).__name__} instead.")
        if not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"The 'threads' parameter of SparseReader must be an int >= 1. Got {threads!r} instead.")
        if not isinstance(max_request, (int, np.integer)) or max_request < 2 * PAGE:
            raise ValueError(f"The 'max_request' parameter of SparseReader must be an int of at least {2 * PAGE} "
                             f"bytes. Got {max_request!r} instead.")
        if not isinstance(max_hole, (int, np.integer)) or max_hole < 0:
            raise ValueError(f"The 'max_hole' parameter of SparseReader must be an int >= 0 (bytes). "
                             f"Got {max_hole!r} instead.")
        if direct not in (None, True, False):
            raise ValueError(f"The 'direct' parameter of SparseReader must be None, True or False. "
                             f"Got {direct!r} instead.")
        self.store, self.threads, self.max_request = store, int(threads), int(max_request)
        self.max_hole, self._direct_asked = int(max_hole), direct
        self.block = store.block_entries
        self.fs_type = fs_type(store.path("indices"))
        self._fds, aligns = [], []
        parts = ["indices"] + ([] if store.binary else ["values"])
        try:
            for part in parts:
                path = store.path(part)
                fd, align = (None, None) if direct is False or self.fs_type in RAM_FILE_SYSTEMS else open_direct(path)
                if fd is None:
                    if direct:
                        raise OSError(f"O_DIRECT is not available for {path} (file system {self.fs_type}"
                                      + (": its data is RAM)" if self.fs_type in RAM_FILE_SYSTEMS else ")"))
                    fd = os.open(path, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                self._fds.append(fd)
                aligns.append(align)
        except BaseException:
            for fd in self._fds:
                os.close(fd)
            raise
        self.direct = all(a is not None for a in aligns)
        self.itemsizes = [store.index_dtype.itemsize] + ([] if store.binary else [store.value_dtype.itemsize])
        self.bytes_read, self.useful_bytes, self.read_s, self.requests = 0, 0, 0.0, 0
        self._lock = threading.Lock()
        self._in_flight, self._busy_since, self._idle_since = 0, 0.0, 0.0
        self._busy_span = (np.inf, -1)  # the entries requested since nothing was last in flight
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="sparsereader")
        self._finalizer = weakref.finalize(self, _release, self._pool, list(self._fds))

    def __repr__(self):
        how = "O_DIRECT" if self.direct else "buffered + FADV_DONTNEED"
        return f"SparseReader({self.store!r}, {how} on {self.fs_type})"

    def __getstate__(self):
        return {"folder": str(self.store.folder), "name": self.store.name, "threads": self.threads,
                "max_request": self.max_request, "direct": self._direct_asked, "max_hole": self.max_hole}

    def __setstate__(self, state):
        store = SparseStore(state.pop("folder"), state.pop("name"))
        self.__init__(store, **state)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for reads in flight, close the files. Idempotent."""
        self._pool.shutdown(wait=True)
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    # ------------------------------------------------------------------ planning ---
    def check_coords(self, coords, where) -> np.ndarray:
        if self.closed:
            raise ValueError(f"{self!r} is closed")
        c = np.asarray(coords)
        if c.size == 0:
            return np.zeros(0, np.int64)
        if c.ndim != 1 or c.dtype.kind not in "iu":
            raise ValueError(f"The 'coords' parameter of {where} must be a 1-D array of integers. "
                             f"Got a {c.ndim}-D {c.dtype} array instead.")
        n = self.store.n_coords
        if c.min() < 0 or c.max() >= n:
            bad = c[(c < 0) | (c >= n)][0]
            raise IndexError(f"The 'coords' parameter of {where} must hold coordinates in [0, {n}). "
                             f"Got {bad} instead.")
        return c.astype(np.int64, copy=False)

    def chunks(self, unique, buffer: ChunkBuffer):
        """Read the sorted distinct coordinates ``unique`` through ``buffer``: yields a
        :class:`SparseChunk` per chunk, the next one planned and read meanwhile into the other
        half (a chunk is planned only when its read starts: RAM stays the buffer's)."""
        unique = np.asarray(unique, np.int64)
        if unique.size > 1 and np.any(np.diff(unique) <= 0):
            raise ValueError("The 'unique' parameter of SparseReader.chunks must be sorted and distinct "
                             "(np.unique of the coordinates).")
        if not unique.size:
            return iter(())
        return self._chunks(unique, buffer)

    def _chunks(self, unique, buffer):
        indptr = self.store.indptr
        cap = buffer.capacity
        hole = self.max_hole // self.itemsizes[0] // self.block * self.block
        entry_bytes = sum(self.itemsizes)
        values = None if self.store.binary else buffer.values
        state = {"k": 0, "lo": -1}

        def start(half):
            """Plan the next chunk into ``half`` and start its read: (pieces, future), or None at the end."""
            if state["k"] >= unique.size:
                return None
            plan = buffer.plans[half]
            n_p, n_r, state["k"], state["lo"] = plan_chunk(indptr, unique, state["k"], state["lo"], self.block, cap,
                                                           cap - 2 * self.block, hole, *plan)
            p_lo, p_hi, r_lo, r_hi, r_pos = plan[1][:n_p], plan[2][:n_p], plan[5][:n_r], plan[6][:n_r], plan[7][:n_r]
            useful = int((p_hi - p_lo).sum()) * entry_bytes
            return n_p, self.read_runs(r_lo, r_hi, r_pos, buffer.indices[half],
                                       None if values is None else values[half], useful)

        pending = [start(0), None]
        half = 0
        try:
            while pending[half] is not None:
                pending[1 - half] = start(1 - half)  # the other half's read starts before this one is awaited
                n_p, future = pending[half]
                future.result()
                plan = buffer.plans[half]
                p_coord, p_lo, p_hi, p_start, p_end = (a[:n_p] for a in plan[:5])
                coords = unique[p_coord]
                indptr_local = np.empty(2 * n_p + 1, np.int64)
                indptr_local[0] = 0
                indptr_local[1::2] = p_start
                indptr_local[2::2] = p_end
                yield SparseChunk(indptr_local, np.arange(1, 2 * n_p, 2, dtype=np.int64), buffer.indices[half],
                                  buffer.values[half], coords, p_coord.copy(), p_lo == indptr[coords],
                                  p_hi == indptr[coords + 1], p_lo.copy())
                pending[half] = None
                half = 1 - half
        finally:  # left early: no thread may still write into the caller's buffer
            for item in pending:
                if item is not None:
                    item[1].exception()

    def stream(self, buffer: ChunkBuffer, start=0, stop=None, values=True):
        """Entries ``start:stop`` (default: all) in file order, a half of ``buffer`` at a time, the
        next half read meanwhile: yields (first entry, indices, values) views (values None for a
        binary store, or when ``values`` is False: then only the indices are read), valid until
        the next one is asked for."""
        stop = self.store.nnz if stop is None else int(stop)
        start = int(start)
        step = buffer.capacity
        lo0 = start - start % self.block
        cuts = list(range(lo0, stop, step))
        if not cuts or start >= stop:
            return
        values = values and not self.store.binary

        def begin(i):
            a = cuts[i]
            b = min(stop, a + step)
            hi = -(-b // self.block) * self.block
            half = i % 2
            useful = (b - max(a, start)) * (sum(self.itemsizes) if values else self.itemsizes[0])
            return self.read_runs(np.array([a]), np.array([hi]), np.zeros(1, np.int64), buffer.indices[half],
                                  buffer.values[half] if values else None, useful)

        pending = {0: begin(0)}
        try:
            for i, a in enumerate(cuts):
                if i + 1 < len(cuts):
                    pending[i + 1] = begin(i + 1)
                pending.pop(i).result()
                b, half, skip = min(stop, a + step), i % 2, max(a, start) - a
                yield (a + skip, buffer.indices[half][skip:b - a],
                       buffer.values[half][skip:b - a] if values else None)
        finally:
            [future.exception() for future in pending.values()]

    def read_runs(self, lo, hi, pos, indices, values, useful=0) -> Future:
        """Read entries [lo[r], hi[r]) (multiples of the block) to position pos[r] of ``indices``
        (and ``values``), in requests of at most ``max_request`` bytes; a Future of the bytes read."""
        step = max(self.block, self.max_request // max(self.itemsizes) // self.block * self.block)
        reqs = []
        dests = [memoryview(indices.view(np.uint8))] + ([] if values is None else [memoryview(values.view(np.uint8))])
        for a, b, p in zip(lo.tolist(), hi.tolist(), pos.tolist()):
            for s in range(a, b, step):
                e = min(b, s + step)
                reqs.append((s, e, p + s - a))
        return self._run(reqs, dests, useful)

    def _read(self, req, dests) -> int:
        s, e, p = req
        got = 0
        for fd, size, dest in zip(self._fds, self.itemsizes, dests):
            view = dest[p * size:(p + e - s) * size]
            got += preadv_all(fd, [view], s * size)
            if not self.direct:  # drop the pages just read (whole pages)
                lo = s * size - s * size % PAGE
                hi = -(-(e * size) // PAGE) * PAGE
                os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
        return got

    def _drop_busy_span(self):
        """Drop, once no request is in flight, the pages of every request since the last time (as
        DiskMatrix does: two concurrent requests sharing a page can each fail to drop it)."""
        lo, hi = self._busy_span
        self._busy_span = (np.inf, -1)
        for fd, size in zip(self._fds, self.itemsizes) if hi > lo else ():
            a = int(lo) * size - int(lo) * size % PAGE
            os.posix_fadvise(fd, a, -(-(int(hi) * size) // PAGE) * PAGE - a, os.POSIX_FADV_DONTNEED)

    def _run(self, reqs, dests, useful) -> Future:
        """Run ``reqs`` on up to ``threads`` workers pulling from one queue (as DiskMatrix._run)."""
        t0 = time.perf_counter()
        fut = Future()
        fut.set_running_or_notify_cancel()
        if not reqs:
            fut.set_result(0)
            return fut
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = max(t0, self._idle_since)
            self._in_flight += 1
            if not self.direct:
                lo, hi = self._busy_span
                self._busy_span = (min(lo, reqs[0][0]), max(hi, reqs[-1][1]))  # planned in file order
        queue, lock = iter(reqs), threading.Lock()
        state = {"left": min(self.threads, len(reqs)), "bytes": 0, "error": None}

        def worker():
            got = 0
            try:
                while state["error"] is None:
                    with lock:
                        q = next(queue, None)
                    if q is None:
                        break
                    got += self._read(q, dests)
            except BaseException as e:  # noqa: BLE001 - handed to the Future
                state["error"] = state["error"] or e
            with lock:
                state["bytes"] += got
                state["left"] -= 1
                if state["left"]:
                    return
            with self._lock:
                end = time.perf_counter()
                self.bytes_read += state["bytes"]
                self.requests += len(reqs)
                self._in_flight -= 1
                if self._in_flight == 0:
                    self.read_s += end - self._busy_since
                    self._idle_since = end
                    if not self.direct:
                        self._drop_busy_span()
                self.useful_bytes += useful if state["error"] is None else 0
            if state["error"] is not None:
                fut.set_exception(state["error"])
            else:
                fut.set_result(state["bytes"])

        for _ in range(state["left"]):
            self._pool.submit(worker)
        return fut


def _release(pool, fds):
    pool.shutdown(wait=False)
    for fd in fds:
        os.close(fd)
