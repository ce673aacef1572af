"""The disk tier: coordinates of a dense matrix read from an .npy on disk into RAM, past the page cache.

A *coordinate* is one row of a coordinate-major (n_coords, length) matrix, one contiguous
run of bytes in the file: a column of the Lasso's X stored in Fortran order, a row of the
dual models' X stored in C order. A gap-chosen set of coordinates is a set of such runs.

Why not ``np.memmap``: it reads through the page cache, which keeps what it read (a RAM
budget would not hold), one page fault at a time (about 0.1 GB/s for a scattered quarter
of the coordinates on this project's machine, against about 1 GB/s here). So:

- **O_DIRECT** where the file system allows it: no page cache at all. Straight into the
  caller's rows when file offsets, row size and rows are aligned (a file from
  :func:`write_coordinate_major` (in ``disk_files``), its header padded to 4096 bytes, read into
  :func:`aligned_empty` rows); through a per-thread aligned bounce buffer otherwise
  (``np.save``'s 128-byte header puts every row off the 512-byte alignment).
- **buffered** where O_DIRECT is refused (and on tmpfs, which accepts O_DIRECT but is RAM):
  no readahead (``POSIX_FADV_RANDOM``), and the pages read dropped after each request
  (``POSIX_FADV_DONTNEED``, widened to page bounds: it drops only whole pages).
- Adjacent coordinates coalesce into one request of at most ``max_request`` bytes (and
  512 buffers: IOV_MAX is 1024); a few threads issue them, since ``preadv`` releases the GIL.
- ``max_hole``: two wanted coordinates at most this many bytes apart share a request too;
  the hole between them is read into a scratch buffer and dropped (and counted: the disk
  read it): fewer requests for more bytes. It pays where requests, not bytes, bound the
  rate; here, with 16 requests in flight, it does not (0.9-1.1x the rate of useful bytes for
  holes of a 40 KB row, 0.6-1x for 320 KB columns: benchmarks.disk_reads): off by default.
- ``scale``: each coordinate multiplied by its own factor as it lands, in the reader's threads
  (in the bounce buffer's copy if any): the dual models' rows y_i x_i from X (y_i = +-1: exact).

NumPy and the standard library only; Linux (O_DIRECT, posix_fadvise, /proc/self/mounts).
"""

import mmap
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from solvers.storage.files import (MAX_IOV, PAGE, RAM_FILE_SYSTEMS, Request, aligned_empty, fs_type, open_direct,
                                     preadv_all, read_npy_header, release)
from solvers.storage.files import write_coordinate_major  # noqa: F401 - part of this module's API

__all__ = ["DiskMatrix", "ReadStats", "aligned_empty", "write_coordinate_major"]

@dataclass
class ReadStats:
    """What one read cost: ``bytes_read`` is what the disk was asked for (alignment padding
    included), ``useful_bytes`` the coordinates themselves, ``seconds`` the wall time from
    the call to the last byte."""
    coords: int = 0
    useful_bytes: int = 0
    bytes_read: int = 0
    requests: int = 0
    seconds: float = 0.0

    @property
    def gbps(self) -> float:
        return self.useful_bytes / self.seconds / 1e9 if self.seconds else float("nan")


class DiskMatrix:
    """A dense coordinate-major matrix in an .npy on disk: row i of the (n_coords, length) matrix is
    coordinate i. A C-order (n_coords, length) .npy, or a Fortran-order (length, n_coords) .npy
    (coordinate j = column j: the Lasso's X as scikit-learn sees it).

    ``direct``: None uses O_DIRECT where the file system allows it (not tmpfs) and buffered
    reads with the pages dropped after elsewhere; True requires O_DIRECT (OSError where it
    cannot be had); False always reads buffered. The counters ``bytes_read`` and
    ``useful_bytes`` add up every read, ``read_s`` the seconds with at least one read in
    flight (overlapping calls count once) (thread-safe); a pickled copy reopens the file by
    path, its counters at 0. Buffered reads count whole pages; with several threads two
    requests may share an edge page the OS reads once, so the OS's count may be lower.

    ``scale``: None, or one factor per coordinate: what a read delivers is coordinate i
    times scale[i] (multiplied in the reader's threads, while other requests are in flight).

    ``max_hole``: bytes between two wanted coordinates that one request reads through (and
    ``bytes_read`` counts); 0 reads only the coordinates asked for.
    """

    def __init__(self, path, *, threads=4, max_request=8 << 20, direct=None, scale=None, max_hole=0):
        if int(threads) < 1:
            raise ValueError(f"The 'threads' parameter of DiskMatrix must be an int >= 1. Got {threads!r} instead.")
        if int(max_request) < PAGE:
            raise ValueError(f"The 'max_request' parameter of DiskMatrix must be at least {PAGE} bytes. "
                             f"Got {max_request!r} instead.")
        if not isinstance(max_hole, (int, np.integer)) or max_hole < 0:
            raise ValueError(f"The 'max_hole' parameter of DiskMatrix must be an int >= 0 (bytes). "
                             f"Got {max_hole!r} instead.")
        if direct not in (None, True, False):
            raise ValueError(f"The 'direct' parameter of DiskMatrix must be None, True or False. Got {direct!r} instead.")
        self.path, self.threads, self.max_request = os.fspath(path), int(threads), int(max_request)
        self._direct_asked, self.max_hole = direct, int(max_hole)
        shape, fortran, dtype, self.offset, size = read_npy_header(self.path)
        if len(shape) != 2 or dtype.hasobject or dtype.itemsize == 0:
            raise ValueError(f"DiskMatrix needs a 2-D numeric .npy; {self.path} holds a {dtype} array of shape {shape}")
        self.fortran = fortran
        self.shape = (shape[1], shape[0]) if fortran else shape
        self.scale = self._check_scale(scale, dtype)
        self.dtype, self.itemsize, self.ndim = dtype, dtype.itemsize, 2
        self.row_bytes = self.shape[1] * dtype.itemsize
        self.nbytes = self.shape[0] * self.row_bytes
        if size < self.offset + self.nbytes:
            raise ValueError(f"{self.path} is truncated: its header announces {self.nbytes} data bytes, "
                             f"the file holds {size - self.offset}")
        self.fs_type = fs_type(self.path)
        fd, self.align = (None, None) if direct is False or self.fs_type in RAM_FILE_SYSTEMS else open_direct(self.path)
        if fd is None:
            if direct:
                raise OSError(f"O_DIRECT is not available for {self.path} (file system {self.fs_type}"
                              + (": its data is RAM)" if self.fs_type in RAM_FILE_SYSTEMS else ")"))
            fd = os.open(self.path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # read what is asked, no readahead
        self.direct = self.align is not None
        # the holes' bytes land here (every hole of every request: they are never read back)
        self._scratch = memoryview(mmap.mmap(-1, -(-self.max_hole // PAGE) * PAGE)) if self.max_hole else None
        self.bytes_read, self.read_s, self.useful_bytes = 0, 0.0, 0
        self._in_flight, self._busy_since, self._idle_since = 0, 0.0, 0.0  # read_s: the calls' spans' union
        self._busy_span = (np.inf, -1)  # the file bytes requested since nothing was last in flight
        self._fd, self._lock, self._tls = fd, threading.Lock(), threading.local()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="diskmatrix")
        self._finalizer = weakref.finalize(self, release, self._pool, fd)

    def __repr__(self):
        how = f"O_DIRECT ({self.align}-byte aligned)" if self.direct else "buffered + FADV_DONTNEED"
        how += f", holes up to {self.max_hole} bytes read through" if self.max_hole else ""
        return (f"DiskMatrix({self.path!r}, shape={self.shape}, dtype={self.dtype}, "
                f"{'Fortran' if self.fortran else 'C'} order, {how} on {self.fs_type})")

    def __getstate__(self):
        return {"path": self.path, "threads": self.threads, "max_request": self.max_request,
                "direct": self._direct_asked, "scale": self.scale, "max_hole": self.max_hole}

    def _check_scale(self, scale, dtype):
        if scale is None:
            return None
        s = np.asarray(scale)
        if s.shape != (self.shape[0],) or s.dtype.kind not in "iuf" or not np.isfinite(s).all():
            raise ValueError(f"The 'scale' parameter of DiskMatrix must be None or {self.shape[0]} finite numbers, "
                             f"one per coordinate. Got a {s.shape} {s.dtype} array instead.")
        return s.astype(dtype)  # multiplied in the data's precision (exact for +-1)

    def __setstate__(self, state):
        path = state.pop("path")
        self.__init__(path, **state)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Wait for reads in flight, close the file. Idempotent."""
        self._pool.shutdown(wait=True)
        self._finalizer()

    # ------------------------------------------------------------------ reading ---
    def read_into(self, coords, out, rows=None) -> ReadStats:
        """Read coordinate ``coords[i]`` into ``out[rows[i]]`` (``rows`` defaults to 0, 1, ...);
        ``out`` is a C-contiguous (k, length) array of this matrix's dtype."""
        return self._start(coords, out, rows, "read_into").result()

    def prefetch(self, coords, out, rows=None) -> Future:
        """:meth:`read_into` in the background: a Future of its ReadStats. The destination
        rows must not be touched until it is done."""
        return self._start(coords, out, rows, "prefetch")

    def _start(self, coords, out, rows, where):
        t0 = time.perf_counter()
        coords = self._check_coords(coords, where)
        self._check_out(out, where)
        rows = self._check_rows(rows, coords, out, where)
        return self._run(self._plan(coords, out, rows), ReadStats(coords.size, coords.size * self.row_bytes), t0)

    def chunks(self, coords, buffer):
        """Read ``coords`` in order through ``buffer`` (an aligned (k, length) array, k >= 2),
        split in two halves: yields (chunk_coords, view of the rows read) while the next chunk
        is read into the other half (started before the yielded one was awaited). A view is
        valid until the next iteration."""
        coords = self._check_coords(coords, "chunks")
        self._check_out(buffer, "chunks", min_rows=2)
        return self._chunks(coords, buffer)

    def _chunks(self, coords, buffer):
        half = buffer.shape[0] // 2
        halves = (buffer[:half], buffer[half:2 * half])
        parts = [coords[i:i + half] for i in range(0, coords.size, half)]
        pending = {0: self._start(parts[0], halves[0], None, "chunks")} if parts else {}
        try:
            for i, part in enumerate(parts):
                # the half the caller is done with takes the next read before this one is awaited:
                # the disk never waits for a read's set-up (2.5 ms a call under load: 17% of a refresh)
                if i + 1 < len(parts):
                    pending[i + 1] = self._start(parts[i + 1], halves[(i + 1) % 2], None, "chunks")
                pending.pop(i).result()
                yield part, halves[i % 2][:part.size]
        finally:  # left early: no thread may still write into the caller's buffer
            [future.exception() for future in pending.values()]

    def _check_coords(self, coords, where):
        if not self._finalizer.alive:
            raise ValueError(f"{self!r} is closed")
        c = np.asarray(coords)
        if c.size == 0:
            return np.zeros(0, np.int64)
        if c.ndim != 1 or c.dtype.kind not in "iu":
            raise ValueError(f"The 'coords' parameter of DiskMatrix.{where} must be a 1-D array of integers. "
                             f"Got a {c.ndim}-D {c.dtype} array instead.")
        if c.min() < 0 or c.max() >= self.shape[0]:
            bad = c[(c < 0) | (c >= self.shape[0])][0]
            raise IndexError(f"The 'coords' parameter of DiskMatrix.{where} must hold coordinates in "
                             f"[0, {self.shape[0]}). Got {bad} instead.")
        return c.astype(np.int64, copy=False)

    def _check_out(self, out, where, min_rows=0):
        ok = (isinstance(out, np.ndarray) and out.ndim == 2 and out.shape[1] == self.shape[1]
              and out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable
              and out.shape[0] >= min_rows)
        if not ok:
            got = (f"a {'read-only ' if not out.flags.writeable else ''}{out.shape} {out.dtype} array"
                   f"{'' if out.flags.c_contiguous else ' (not C-contiguous)'}"
                   if isinstance(out, np.ndarray) else type(out).__name__)
            raise ValueError(f"The '{'buffer' if where == 'chunks' else 'out'}' parameter of DiskMatrix.{where} "
                             f"must be a writeable C-contiguous (k, {self.shape[1]}) {self.dtype} array"
                             f"{f' with k >= {min_rows}' if min_rows else ''}. Got {got} instead.")

    def _check_rows(self, rows, coords, out, where):
        if rows is None:
            if coords.size > out.shape[0]:
                raise ValueError(f"The 'out' parameter of DiskMatrix.{where} has {out.shape[0]} rows; "
                                 f"{coords.size} coordinates need as many.")
            return np.arange(coords.size)
        r = np.asarray(rows)
        if r.shape != coords.shape or (r.size and r.dtype.kind not in "iu"):
            raise ValueError(f"The 'rows' parameter of DiskMatrix.{where} must be {coords.size} integers, "
                             f"one per coordinate. Got a {r.shape} {r.dtype} array instead.")
        if r.size and (r.min() < 0 or r.max() >= out.shape[0] or np.unique(r).size != r.size):
            raise IndexError(f"The 'rows' parameter of DiskMatrix.{where} must be distinct rows of out, "
                             f"in [0, {out.shape[0]}). Got {r.tolist()[:8]}{'...' if r.size > 8 else ''} instead.")
        return r.astype(np.int64, copy=False)

    def _plan(self, coords, out, rows):
        """The requests reading ``coords`` into ``out[rows]``: runs of coordinates (in file
        order) at most ``max_hole`` bytes apart, cut at ``max_request`` bytes and MAX_IOV
        buffers. Vectorised, then one short Python step per request (a request costs the
        caller's thread microseconds: scattered rows make thousands)."""
        order = np.argsort(coords, kind="stable")
        c, r = coords[order], rows[order]
        if not c.size:
            return []
        stride, align = self.row_bytes, self.align or 1
        view = memoryview(out.reshape(-1).view(np.uint8))
        # straight into the rows only if every file offset, size and address is aligned
        direct_ok = (self.offset % align == 0 and stride % align == 0 and out.ctypes.data % align == 0)
        scales = None if self.scale is None else self.scale[c]
        cl, rl = c.tolist(), r.tolist()
        if stride > self.max_request:  # a coordinate longer than a request: cut in pieces
            piece = self.max_request - self.max_request % PAGE
            return [self._request(self.offset + x * stride + p, min(piece, stride - p),
                                  [(0, view[y * stride + p:y * stride + min(stride, p + piece)])], direct_ok,
                                  None if scales is None else scales[i:i + 1])
                    for i, (x, y) in enumerate(zip(cl, rl)) for p in range(0, stride, piece)]
        hole_rows = self.max_hole // stride
        # a request spans at most this many rows of the file: a buffer per row, one per hole
        per_request = max(1, min(self.max_request // stride, MAX_IOV // (2 if hole_rows else 1)))
        step = np.diff(c)
        # a run: coordinates at most hole_rows apart (a repeat starts a new one: each read once)
        new_run = np.concatenate([[True], (step == 0) | (step > hole_rows + 1)])
        first = c[new_run][np.cumsum(new_run) - 1]  # each coordinate's run's first
        part = (c - first) // per_request  # runs cut every per_request rows of the file
        new_req = new_run.copy()
        new_req[1:] |= part[1:] != part[:-1]
        starts = np.flatnonzero(new_req)
        ends = np.append(starts[1:], c.size)
        # one destination when the request's coordinates are adjacent and go to consecutive rows
        breaks = np.cumsum(np.concatenate([[True], (step != 1) | (np.diff(r) != 1)]))
        single = (breaks[ends - 1] == breaks[starts]).tolist()
        reqs = []
        for s, e, one in zip(starts.tolist(), ends.tolist(), single):
            c0 = cl[s]
            if one:
                dsts = [(0, view[rl[s] * stride:(rl[e - 1] + 1) * stride])]
            else:
                dsts = [((cl[i] - c0) * stride, view[rl[i] * stride:(rl[i] + 1) * stride]) for i in range(s, e)]
            reqs.append(self._request(self.offset + c0 * stride, (cl[e - 1] - c0 + 1) * stride, dsts, direct_ok,
                                      None if scales is None else scales[s:e]))
        return reqs

    def _request(self, start, length, dsts, direct_ok, scales):
        """A request for ``length`` bytes at ``start`` delivering ``dsts`` ((start in the request,
        destination)); the bytes between them are a hole, read and dropped."""
        if direct_ok:
            iov, pos = [], 0
            for at, d in dsts:
                if at > pos:  # a hole: into the scratch buffer
                    iov.append(self._scratch[:at - pos])
                iov.append(d)
                pos = at + d.nbytes
            return Request(start, length, iov=iov, pieces=dsts, scales=scales)
        lo = start - start % self.align
        hi = -(-(start + length) // self.align) * self.align
        return Request(lo, hi - lo, pieces=[(start - lo + at, d) for at, d in dsts], scales=scales)

    def _scale(self, q, src=None):
        """Multiply what ``q`` delivered by its coordinates' factors: in place (``src`` None), or
        from the bounce buffer ``src`` as it is copied out (one pass over the bytes, not two)."""
        pieces = q.pieces
        # a factor per destination (a row, or a piece of one), or one destination for a run of rows
        factors = q.scales[:, None] if len(pieces) == q.scales.size else [q.scales[:, None]]
        for (pos, d), f in zip(pieces, factors):
            dst = np.frombuffer(d, self.dtype).reshape(f.shape[0], -1)
            data = dst if src is None else src[pos:pos + d.nbytes].view(self.dtype).reshape(dst.shape)
            np.multiply(data, f, out=dst)

    # ---------------------------------------------------------------- execution ---
    def _bounce(self, n):
        """This thread's aligned bounce buffer, at least ``n`` bytes."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or len(buf) < n:
            buf = self._tls.buf = mmap.mmap(-1, -(-n // PAGE) * PAGE)
        return memoryview(buf)[:n]

    def _read(self, q) -> int:
        """Do one request; the bytes the disk was asked for."""
        if q.iov:
            got = preadv_all(self._fd, q.iov, q.offset)
        else:
            buf = self._bounce(q.length)
            got = preadv_all(self._fd, [buf], q.offset, to_eof=True)
            if got < q.pieces[-1][0] + q.pieces[-1][1].nbytes:  # the file shrank since it was opened
                raise EOFError(f"{self.path} ends at byte {q.offset + got}, before the data its header announces")
            src = np.frombuffer(buf, np.uint8)
            if q.scales is not None:
                self._scale(q, src)
            for pos, d in q.pieces if q.scales is None else ():
                np.copyto(np.frombuffer(d, np.uint8), src[pos:pos + d.nbytes])
        if q.scales is not None and q.iov:
            self._scale(q)
        if not self.direct:  # drop the pages just read; DONTNEED drops whole pages only
            lo = q.offset - q.offset % PAGE
            hi = -(-(q.offset + got) // PAGE) * PAGE
            os.posix_fadvise(self._fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
            return hi - lo
        # an aligned read that ends past the end of the file still counts to its aligned
        # end (as /proc/self/io does: the disk reads whole logical blocks)
        return q.length

    def _drop_busy_span(self):
        """Drop, once no request is in flight, the pages of every request since the last time:
        two concurrent requests that share a page can each fail to drop it (the other holds it
        at that moment), which leaves it cached; nothing of ours holds one now."""
        lo, hi = self._busy_span
        self._busy_span = (np.inf, -1)
        if hi > lo:
            lo -= lo % PAGE
            os.posix_fadvise(self._fd, int(lo), int(-(-hi // PAGE) * PAGE - lo), os.POSIX_FADV_DONTNEED)

    def _run(self, reqs, stats, t0) -> Future:
        """Run ``reqs`` on up to ``threads`` workers that pull from one queue; the Future
        resolves when the last one finishes."""
        fut = Future()
        fut.set_running_or_notify_cancel()
        if not reqs:
            stats.seconds = time.perf_counter() - t0
            fut.set_result(stats)
            return fut
        with self._lock:  # the disk is busy from the first call in flight to the last one's end
            if self._in_flight == 0:  # a call started before the last period ended counts from its end
                self._busy_since = max(t0, self._idle_since)
            self._in_flight += 1
            if not self.direct:
                lo, hi = self._busy_span
                last = reqs[-1]  # requests are planned in file order
                self._busy_span = (min(lo, reqs[0].offset), max(hi, last.offset + last.length))
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
                    got += self._read(q)
            except BaseException as e:  # noqa: BLE001 - handed to the Future
                state["error"] = state["error"] or e
            with lock:
                state["bytes"] += got
                state["left"] -= 1
                if state["left"]:
                    return
            stats.bytes_read, stats.requests = state["bytes"], len(reqs)
            with self._lock:  # the end read under the lock: no other call's start slips in before it
                end = time.perf_counter()
                stats.seconds = end - t0
                self.bytes_read += stats.bytes_read
                self._in_flight -= 1
                if self._in_flight == 0:  # overlapping calls (a read-ahead beside a refresh) count once
                    self.read_s += end - self._busy_since
                    self._idle_since = end
                    if not self.direct:
                        self._drop_busy_span()
                self.useful_bytes += stats.useful_bytes if state["error"] is None else 0
            if state["error"] is not None:
                fut.set_exception(state["error"])
            else:
                fut.set_result(stats)

        for _ in range(state["left"]):
            self._pool.submit(worker)
        return fut
