"""Where "device" memory lives, and every byte that moves into it.

A block holds the resident coordinates' data on a device and runs the device
side of a DuHL round there: ``local_epochs`` coordinate descent epochs, then
the gaps of its own coordinates. The host keeps all data, ``a`` and ``z``.

Devices:

- ``cpu``: the block is a separate contiguous buffer in RAM, so a swap is a
  real copy; the kernels share (a, z) with the host. When the budget covers
  all data the block is the host array itself (the one logical load is still
  counted).
- ``cuda``: the block, a, z live in CuPy arrays; incoming coordinates are
  gathered into pinned host memory and copied on a dedicated copy stream,
  ordered before compute by a CUDA event; TPA-SCD kernels
  (:mod:`solvers.kernels.cuda`) run on the compute stream.
- ``cuda_sim``: the same CUDA kernels under Numba's CUDA simulator on NumPy
  arrays (tiny problems only: ~1e5 times slower than a GPU).

``bytes_h2d`` counts every byte copied host->device: coordinate data on
swaps, and for GPU devices the (a, z) state sent each round. This module is
the only one that imports CuPy.
"""

import contextlib
import math
import os
import warnings

import numpy as np
import scipy.sparse as sp

from solvers.kernels import cpu

DEVICES = ("cpu", "cuda", "cuda_sim")
GAP_KERNELS = ("tpa", "blas")


class NoCudaDevice(RuntimeError):
    """device="cuda" was asked for on a machine without a usable GPU."""

    def __init__(self, detail=""):
        super().__init__("no CUDA device found: use device=cpu or device=cuda_sim"
                         + (f" ({detail})" if detail else ""))


# --------------------------------------------------------------------------- devices


class CPUDevice:
    """Host memory as the device: copies are plain memcpy, kernels are Numba's CPU ones."""

    name = "cpu"
    xp = np

    def __init__(self):
        self.bytes_h2d = 0

    def context(self):
        """Where a block's array work runs (CUDA: the compute stream)."""
        return contextlib.nullcontext()

    def upload_rows(self, dst, dst_rows, src_rows, prefetch=False):
        """dst[dst_rows] = src_rows (host rows already gathered), counted."""
        dst[dst_rows] = src_rows
        self.bytes_h2d += src_rows.nbytes

    def upload_into(self, dst, start, src, prefetch=False):
        dst[start:start + src.shape[0]] = src
        self.bytes_h2d += src.nbytes

    def gather(self, dst, start, src, positions, prefetch=False):
        """dst[start:...] = src[positions], both on the device (not counted: no host bytes)."""
        dst[start:start + positions.shape[0]] = src[positions]

    def settle(self):
        """Make later compute wait for the prefetched copies (CUDA)."""

    def synchronize(self):
        """Wait (host) until the block's queued work is done (CUDA)."""

    def begin_round(self, state):
        return state  # shared memory: the kernels update the host's arrays

    def end_round(self, state, dev_state):
        pass

    def to_host(self, x):
        return x

    def epoch_dense(self, data, coords, order, st, p):
        return cpu.scd_epoch_dense(data, coords, order, *st, p.mu, p.sqnorm, p.c, p.model, *p.params)

    def epoch_sparse(self, buf, coords, order, st, p):
        return cpu.scd_epoch_sparse(*buf, coords, order, *st, p.mu, p.sqnorm, p.c, p.model, *p.params)

    def gaps_dense(self, data, rows, coords, st, p):
        """The gaps of coords (data rows ``rows``) at st, as a device array (see to_host)."""
        out = np.empty(rows.shape[0])
        cpu.gaps_dense(data, rows, coords, *st, p.mu, p.c, p.model, *p.params, out)
        return out

    def gaps_sparse(self, buf, rows, coords, st, p):
        out = np.empty(rows.shape[0])
        cpu.gaps_sparse(*buf, rows, coords, *st, p.mu, p.c, p.model, *p.params, out)
        return out


class CUDADevice(CPUDevice):
    """CuPy memory and numba.cuda kernels; ``simulate=True`` runs them on NumPy arrays.

    Streams: every CuPy operation of a block and every kernel runs on the
    compute stream (the block enters :meth:`context`); host->device copies run
    on a copy stream from pinned buffers. A copy's event orders the compute
    stream after it at once, or, for a prefetch, only at :meth:`settle` (the
    start of the next swap), so a prefetch travels while the round computes.
    Temporaries live and die on one stream, so CuPy's per-stream memory pool
    never hands out memory another stream may still read; pinned buffers are
    held until their copy's event has completed.
    """

    def __init__(self, problem, simulate, gap_kernel="tpa", concurrency="auto"):
        super().__init__()
        self.simulate = simulate
        self.gap_kernel = gap_kernel
        self.concurrency = concurrency
        self.name = "cuda_sim" if simulate else "cuda"
        self._held = []          # (event, pinned buffers) of copies that may be in flight
        self._prefetched = None  # event of the last prefetch copy, not yet waited for
        if simulate:
            _enable_simulator()
            self.xp = np
        else:
            cp = _cupy()
            from numba import cuda

            self.xp = cp
            self.copy_stream = cp.cuda.Stream(non_blocking=True)
            self.compute_stream = cp.cuda.Stream(non_blocking=True)
            self._kernel_stream = cuda.external_stream(self.compute_stream.ptr)
        from solvers.kernels import cuda as kernels

        self.k = kernels
        with self.context():
            self.mu = self._put(problem.mu)
            self.sqnorm = self._put(problem.sqnorm)

    def context(self):
        return contextlib.nullcontext() if self.simulate else self.compute_stream

    def _put(self, host):
        """A small host array (an order, rows) on the current stream."""
        if self.simulate:
            return np.array(host)
        return self.xp.asarray(host)

    def _launch(self, kernel, n_blocks, *args):
        if n_blocks == 0:
            return
        if self.simulate:
            kernel[n_blocks, self.k.TPB](*args)
            return
        from numba import cuda

        # sync=False: the arrays' work is ordered on the compute stream already, so
        # Numba need not block the host on each argument's stream
        args = [cuda.as_cuda_array(x, sync=False) if hasattr(x, "__cuda_array_interface__") else x
                for x in args]
        kernel[n_blocks, self.k.TPB, self._kernel_stream](*args)

    @contextlib.contextmanager
    def _copying(self, prefetch=False):
        """CuPy work on the copy stream; the compute stream waits for it now, or
        (``prefetch``) at the next :meth:`settle`. Yields a list for the pinned
        buffers to hold until the copy is done."""
        if self.simulate:
            yield None
            return
        held = []
        with self.copy_stream:
            yield held
            done = self.copy_stream.record()
        self._held = [(event, bufs) for event, bufs in self._held if not event.done]
        self._held.append((done, held))
        if prefetch:
            self._prefetched = done
        else:
            self.compute_stream.wait_event(done)

    def _to_device(self, src, held):
        """A new device array holding host ``src``, copied from pinned memory (inside _copying)."""
        self.bytes_h2d += src.nbytes
        if self.simulate:
            return np.array(src)
        cp = self.xp
        pinned = cp.cuda.alloc_pinned_memory(max(src.nbytes, 1))
        staged = np.frombuffer(pinned, src.dtype, src.size).reshape(src.shape)
        staged[...] = src
        held.append(staged)
        dev = cp.empty(src.shape, src.dtype)
        dev.set(staged, stream=self.copy_stream)
        return dev

    def upload_rows(self, dst, dst_rows, src_rows, prefetch=False):
        with self._copying(prefetch) as held:
            dst[self._put(dst_rows)] = self._to_device(src_rows, held)

    def upload_into(self, dst, start, src, prefetch=False):
        with self._copying(prefetch) as held:
            dst[start:start + src.shape[0]] = self._to_device(src, held)

    def gather(self, dst, start, src, positions, prefetch=False):
        # a prefetch's gather stays off the compute stream, like its copies
        with self._copying(prefetch=True) if prefetch else contextlib.nullcontext():
            super().gather(dst, start, src, self._put(positions))

    def synchronize(self):
        if not self.simulate:
            self.compute_stream.synchronize()

    def settle(self):
        if self._prefetched is not None:
            self.compute_stream.wait_event(self._prefetched)
            self._prefetched = None

    def begin_round(self, state):
        with self._copying() as held:
            return tuple(self._to_device(x, held) for x in state)

    def end_round(self, state, dev_state):
        for host, dev in zip(state, dev_state):
            host[...] = self.to_host(dev)

    def to_host(self, x):
        if self.simulate:
            return np.asarray(x)
        self.compute_stream.synchronize()
        return x.get(stream=self.compute_stream)

    def epoch_grid(self, n):
        """Thread blocks of an epoch over n coordinates: the most updates in flight at once."""
        cap = math.isqrt(n) if self.concurrency == "auto" else int(self.concurrency)
        return max(1, min(n, cap))

    def epoch_dense(self, data, coords, order, st, p):
        self._launch(self.k.tpa_scd_dense, self.epoch_grid(order.shape[0]), data, coords,
                     self._put(order), *st, self.mu, self.sqnorm, p.c, p.model, *p.params)
        return order.shape[0]

    def epoch_sparse(self, buf, coords, order, st, p):
        self._launch(self.k.tpa_scd_sparse, self.epoch_grid(order.shape[0]), *buf, coords,
                     self._put(order), *st, self.mu, self.sqnorm, p.c, p.model, *p.params)
        return order.shape[0]

    def gaps_dense(self, data, rows, coords, st, p):
        out = self.xp.empty(rows.shape[0])
        if self.gap_kernel == "blas":
            # one matrix-vector product over the block's rows (cuBLAS gemv; staging rows
            # ride along), in the data's precision, then one thread per coordinate
            a, z, off = st
            dots = data @ z.astype(data.dtype, copy=False)
            blocks = -(-rows.shape[0] // self.k.TPB)
            self._launch(self.k.gaps_from_dots, blocks, dots, self._put(rows), coords, a, off,
                         self.mu, p.c, z.shape[0], p.model, *p.params, out)
            return out
        self._launch(self.k.gaps_dense, rows.shape[0], data, self._put(rows), coords, *st,
                     self.mu, p.c, p.model, *p.params, out)
        return out

    def gaps_sparse(self, buf, rows, coords, st, p):
        out = self.xp.empty(rows.shape[0])
        self._launch(self.k.gaps_sparse, rows.shape[0], *buf, self._put(rows), coords, *st,
                     self.mu, p.c, p.model, *p.params, out)
        return out


def _enable_simulator():
    import sys

    from numba import config

    if not config.ENABLE_CUDASIM:
        if "numba.cuda" in sys.modules:
            raise RuntimeError("device='cuda_sim' needs NUMBA_ENABLE_CUDASIM=1 set before "
                               "numba.cuda is first imported")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        config.ENABLE_CUDASIM = 1


def _cupy():
    try:
        import cupy
    except ImportError as err:
        raise NoCudaDevice("CuPy is not installed: pip install -e .[gpu]") from err
    try:
        if not cupy.cuda.is_available():
            raise NoCudaDevice()
    except Exception as err:  # a missing driver raises from inside CuPy
        raise NoCudaDevice(str(err)) from err
    return cupy


def check_device(device):
    """Raise NoCudaDevice (device="cuda" without a usable GPU) or ValueError (unknown name)."""
    if device not in DEVICES:
        raise ValueError(f"The 'device' parameter must be one of {DEVICES}. Got {device!r} instead.")
    if device == "cuda":
        _cupy()


def free_device_bytes(device):
    """Free memory of the GPU (None for cpu and cuda_sim)."""
    if device != "cuda":
        return None
    return _cupy().cuda.runtime.memGetInfo()[0]


# --------------------------------------------------------------------------- blocks


def _passes(local_epochs, n_block, n_visit, most=16):
    """Passes over the visited coordinates worth local_epochs epochs of the block
    (a round does about the same work however far shrinking has gone)."""
    return local_epochs * min(most, max(1, n_block // max(1, n_visit)))


def _by_coordinate(rows, row_coord):
    """``rows`` ordered by the coordinate they hold: epochs and gap sums then depend
    on which coordinates are resident, never on where they sit (so prefetching
    changes no iterate)."""
    return rows[np.argsort(row_coord[rows], kind="stable")]


class _Block:
    """What both layouts share: counters, and a round's shape.

    A round runs ``local_epochs`` epochs on the block, then (when asked)
    prefetches the next round's likely newcomers into staging memory while
    the epochs run, then returns the block's gaps. ``prefetch_hits`` counts
    swapped-in coordinates found already on the device (no copy on the
    critical path); ``bytes_prefetched`` the bytes copied ahead of need (in
    ``bytes_h2d`` too, used or not).
    """

    _cached = (None, None)
    staging_bytes = 0

    def __init__(self):
        self.prefetch_hits = 0
        self.bytes_prefetched = 0

    @property
    def bytes_h2d(self):
        return self.device.bytes_h2d

    def _positions(self, coords, row_coord):
        """Where ``coords`` sit in the block, in coordinate order; cached while the
        same array is passed."""
        if self._cached[0] is not coords:
            self._cached = (coords, _by_coordinate(np.flatnonzero(np.isin(row_coord, coords)), row_coord))
        return self._cached[1]

    def run_round(self, state, rng, local_epochs, with_gaps=True, active=None, prefetch=None):
        """local_epochs epochs on the block (only its ``active`` coordinates, when
        given), then the gaps of all of it; meanwhile the coordinates ``prefetch``
        are staged for the next swap. Returns (updates, coords, gaps or None)."""
        dev = self.device
        with dev.context():
            st = dev.begin_round(state)
            n_block, visit = self._visit(active)
            updates = 0
            for _ in range(_passes(local_epochs, n_block, visit.shape[0])):
                updates += self._epoch(rng.permutation(visit), st)
            coords, gaps = self._gaps(st) if with_gaps else (self.resident(), None)
            if prefetch is not None and self.staging_bytes:
                before = dev.bytes_h2d
                self.prefetch(np.asarray(prefetch, dtype=np.int64))
                self.bytes_prefetched += dev.bytes_h2d - before
            dev.end_round(state, st)
            return updates, coords, None if gaps is None else dev.to_host(gaps)


class DenseBlock(_Block):
    """Rows of equal size: ``n_slots`` of them form the block; ``n_stage`` more
    (staging) hold coordinates prefetched for a coming swap or left by a past
    one. A swap copies a coordinate only if no row holds it yet, into a row
    outside the block, and flips which rows are in the block."""

    def __init__(self, problem, n_slots, device, n_stage=0):
        super().__init__()
        self.problem = problem
        self.device = device
        A = problem.A
        self.whole = n_slots >= A.shape[0]
        n_slots = min(n_slots, A.shape[0])
        n_stage = 0 if self.whole else min(int(n_stage), A.shape[0] - n_slots)
        self.row_coord = np.full(n_slots + n_stage, -1, dtype=np.int64)  # -1: an empty row
        self.in_block = np.zeros(n_slots + n_stage, dtype=bool)
        if self.whole and device.name == "cpu":
            self.data = A  # zero-copy: everything is resident
        else:
            with device.context():
                self.data = device.xp.empty((n_slots + n_stage, A.shape[1]), dtype=A.dtype)
        self._coords_dev = None
        self.capacity_bytes = n_slots * _unit(A)
        self.staging_bytes = n_stage * _unit(A)

    def resident(self):
        return self.row_coord[self.in_block]

    def _set_rows(self, rows, coords, prefetch=False):
        """Copy the coordinates' data host->device into ``rows``."""
        if self.data is self.problem.A:  # zero-copy whole block: a logical load, counted
            self.device.bytes_h2d += int(self.problem.coord_bytes[coords].sum())
        else:
            self.device.upload_rows(self.data, rows, self.problem.A[coords], prefetch=prefetch)
        self.row_coord[rows] = coords
        self._coords_dev = None

    def assign(self, coords):
        """Make ``coords`` the block; copies only coordinates no row holds. Returns
        how many coordinates joined the block."""
        coords = np.asarray(coords, dtype=np.int64)
        with self.device.context():
            self.device.settle()
            joined = ~np.isin(coords, self.row_coord[self.in_block])
            held = np.isin(self.row_coord, coords)  # rows that already hold a chosen coordinate
            self.prefetch_hits += int(np.count_nonzero(held & ~self.in_block))
            missing = coords[~np.isin(coords, self.row_coord[held])]
            if self.data is self.problem.A:
                rows = missing  # zero-copy whole block: row i is coordinate i
            else:
                free = np.flatnonzero(~held)
                rows = free[np.argsort(self.row_coord[free] >= 0, kind="stable")][: missing.shape[0]]
            if missing.shape[0]:
                self._set_rows(rows, missing)
                held[rows] = True
            self.in_block = held
        return int(np.count_nonzero(joined))

    def prefetch(self, coords):
        """Copy ``coords`` not yet on the device into rows outside the block (empty
        rows first), on the copy stream: the next assign finds them there."""
        wanted = coords[~np.isin(coords, self.row_coord)]
        rows = np.flatnonzero(~self.in_block & ~np.isin(self.row_coord, coords))
        rows = rows[np.argsort(self.row_coord[rows] >= 0, kind="stable")]
        n = min(rows.shape[0], wanted.shape[0])
        if n:
            self._set_rows(rows[:n], wanted[:n], prefetch=True)
        return n

    def _coords(self):
        if self._coords_dev is None:
            self._coords_dev = self.device.xp.asarray(self.row_coord)
        return self._coords_dev

    def _block_rows(self):
        return _by_coordinate(np.flatnonzero(self.in_block), self.row_coord)

    def _visit(self, active):
        block_rows = self._block_rows()
        visit = block_rows if active is None else self._positions(active, self.row_coord)
        return block_rows.shape[0], visit

    def _epoch(self, order, st):
        return self.device.epoch_dense(self.data, self._coords(), order, st, self.problem)

    def _gaps(self, st):
        rows = self._block_rows()
        coords = self.row_coord[rows]
        return coords, self.device.gaps_dense(self.data, rows, self.device.xp.asarray(coords), st,
                                              self.problem)


class _CSRRows:
    """Rows of a CSR matrix in device memory (host row pointers), rebuilt into a
    spare pair of arrays on every change so that kept rows stay compact."""

    def __init__(self, device, capacity, indices_dtype, data_dtype):
        xp = device.xp
        self.capacity = int(capacity)
        self.coords = np.empty(0, dtype=np.int64)
        self.indptr = np.zeros(1, np.int64)
        with device.context():
            self.indices, self.data = xp.empty(capacity, indices_dtype), xp.empty(capacity, data_dtype)
            self._spare = (xp.empty(capacity, indices_dtype), xp.empty(capacity, data_dtype))

    def entries(self, rows):
        """Positions of the rows' entries, in order, and the rows' lengths."""
        starts, stops = self.indptr[rows], self.indptr[rows + 1]
        lengths = stops - starts
        return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum()), lengths

    def rebuild(self, device, parts, A, incoming, prefetch=False):
        """The rows become: ``rows`` of each (source, rows) in ``parts``, gathered
        device-to-device, then A's rows ``incoming``, copied host->device."""
        new_indices, new_data = self._spare
        filled, lengths, coords = 0, [], []
        for source, rows in parts:
            positions, part_lengths = source.entries(rows)
            if positions.shape[0]:
                device.gather(new_indices, filled, source.indices, positions, prefetch)
                device.gather(new_data, filled, source.data, positions, prefetch)
            filled += int(positions.shape[0])
            lengths.append(part_lengths)
            coords.append(source.coords[rows])
        rows_in = A[incoming]
        if incoming.shape[0]:
            device.upload_into(new_indices, filled, rows_in.indices.astype(A.indices.dtype, copy=False),
                               prefetch)
            device.upload_into(new_data, filled, rows_in.data, prefetch)
        lengths.append(np.diff(rows_in.indptr))
        coords.append(incoming)
        self._spare = (self.indices, self.data)
        self.indices, self.data = new_indices, new_data
        self.indptr = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
        self.coords = np.concatenate(coords).astype(np.int64)


class SparseBlock(_Block):
    """A CSR buffer of fixed capacity in entries; a swap compacts the kept rows
    (device-to-device) and appends the incoming ones, taken from the staging
    buffer when prefetched there (device-to-device), else host->device. The
    compaction writes into a spare buffer of the same size, so the device holds
    twice the budget's bytes for sparse data (make_block's GPU check counts it)."""

    def __init__(self, problem, capacity_nnz, device, stage_nnz=0):
        super().__init__()
        self.problem = problem
        self.device = device
        A = problem.A
        self.whole = capacity_nnz >= A.nnz
        self.zero_copy = self.whole and device.name == "cpu"
        cap = A.nnz if self.whole else int(capacity_nnz)
        stage = 0 if self.whole else int(stage_nnz)
        self.rows = _CSRRows(device, cap, A.indices.dtype, A.data.dtype)
        self.stage = _CSRRows(device, stage, A.indices.dtype, A.data.dtype)
        self._indptr_dev = None
        self.capacity_bytes = cap * _unit(A)
        self.staging_bytes = stage * _unit(A)

    @property
    def buf(self):
        """(indptr, indices, data) of the block on the device."""
        if self.zero_copy:
            A = self.problem.A
            return A.indptr, A.indices, A.data
        return self._indptr_dev, self.rows.indices, self.rows.data

    def resident(self):
        return self.rows.coords

    def assign(self, coords):
        coords = np.asarray(coords, dtype=np.int64)
        A, dev = self.problem.A, self.device
        joined = ~np.isin(coords, self.rows.coords)
        incoming = coords[joined]
        if self.zero_copy:
            self.rows.coords = np.arange(A.shape[0], dtype=np.int64)
            self.rows.indptr = A.indptr
            dev.bytes_h2d += int(self.problem.coord_bytes[incoming].sum())
            return int(incoming.shape[0])
        with dev.context():
            dev.settle()
            kept = np.flatnonzero(np.isin(self.rows.coords, coords))
            hits = np.flatnonzero(np.isin(self.stage.coords, incoming))
            self.prefetch_hits += int(hits.shape[0])
            missing = incoming[~np.isin(incoming, self.stage.coords[hits])]
            self.rows.rebuild(dev, [(self.rows, kept), (self.stage, hits)], A, missing)
            self._indptr_dev = dev.xp.asarray(self.rows.indptr)
        return int(incoming.shape[0])

    def prefetch(self, coords):
        """Stage ``coords`` not in the block (as many as fit, in order); staged rows
        still wanted stay, the others make room."""
        A = self.problem.A
        wanted = coords[~np.isin(coords, self.rows.coords)]
        keep = np.flatnonzero(np.isin(self.stage.coords, wanted))
        new = wanted[~np.isin(wanted, self.stage.coords)]
        room = self.stage.capacity - int(np.diff(self.stage.indptr)[keep].sum())
        fits = np.cumsum(np.diff(A.indptr)[new]) <= room
        new = new[: int(np.argmin(fits)) if not fits.all() else new.shape[0]]
        if new.shape[0] == 0 and keep.shape[0] == self.stage.coords.shape[0]:
            return 0  # nothing to change
        self.stage.rebuild(self.device, [(self.stage, keep)], A, new, prefetch=True)
        return int(new.shape[0])

    def _visit(self, active):
        coords = self.rows.coords
        visit = (_by_coordinate(np.arange(coords.shape[0]), coords) if active is None
                 else self._positions(active, coords))
        return coords.shape[0], visit

    def _epoch(self, order, st):
        return self.device.epoch_sparse(self.buf, self._coords_dev, order, st, self.problem)

    def run_round(self, state, rng, local_epochs, with_gaps=True, active=None, prefetch=None):
        with self.device.context():
            self._coords_dev = self.device.xp.asarray(self.rows.coords)
        return super().run_round(state, rng, local_epochs, with_gaps, active, prefetch)

    def _gaps(self, st):
        coords = self.rows.coords
        rows = _by_coordinate(np.arange(coords.shape[0]), coords)
        coords = coords[rows]
        return coords, self.device.gaps_sparse(self.buf, rows, self.device.xp.asarray(coords), st,
                                               self.problem)


def check_concurrency(concurrency):
    if concurrency != "auto" and (isinstance(concurrency, bool) or not isinstance(
            concurrency, (int, np.integer)) or concurrency < 1):
        raise ValueError("The 'concurrency' parameter must be 'auto' or an int >= 1. "
                         f"Got {concurrency!r} instead.")


def check_gap_kernel(gap_kernel, device, sparse=False):
    """ValueError unless ``gap_kernel`` applies: "blas" is a dense product on a GPU device."""
    if gap_kernel not in GAP_KERNELS:
        raise ValueError(f"The 'gap_kernel' parameter must be one of {GAP_KERNELS}. "
                         f"Got {gap_kernel!r} instead.")
    if gap_kernel == "blas" and device == "cpu":
        raise ValueError("The 'gap_kernel' parameter 'blas' runs on device='cuda' or 'cuda_sim' "
                         "(the CPU computes gaps with its own kernels). Got device='cpu'.")
    if gap_kernel == "blas" and sparse:
        raise ValueError("The 'gap_kernel' parameter 'blas' needs dense data (a cuBLAS "
                         "matrix-vector product); use gap_kernel='tpa' for sparse data.")


def make_device(problem, device, gap_kernel="tpa", concurrency="auto"):
    if device not in DEVICES:
        raise ValueError(f"The 'device' parameter must be one of {DEVICES}. Got {device!r} instead.")
    check_gap_kernel(gap_kernel, device, sp.issparse(problem.A))
    check_concurrency(concurrency)
    if device == "cpu":
        return CPUDevice()
    return CUDADevice(problem, simulate=device == "cuda_sim", gap_kernel=gap_kernel,
                      concurrency=concurrency)


def make_block(problem, budget_bytes, device="cpu", prefetch=0.0, gap_kernel="tpa",
               concurrency="auto"):
    """The device block of a problem for a budget in bytes (None: all data), of
    which a ``prefetch`` share is staging memory for coordinates copied ahead of
    their swap (none when the budget holds all data); ``gap_kernel`` computes the
    block's gaps on a GPU device ("tpa": a thread block per coordinate; "blas":
    one cuBLAS matrix-vector product, then a thread per coordinate); ``concurrency``
    caps the coordinates a GPU epoch updates at once ("auto": sqrt of the epoch's)."""
    dev = make_device(problem, device, gap_kernel, concurrency)
    total = int(problem.coord_bytes.sum())
    budget = total if budget_bytes is None else min(int(budget_bytes), total)
    free = free_device_bytes(device)
    # a sparse block also keeps a spare buffer of its size to compact into on swaps
    copies = 2 if sp.issparse(problem.A) else 1
    if free is not None and budget * copies > 0.9 * free:
        cut = int(0.9 * free) // copies
        warnings.warn(f"memory_budget of {budget / 1e9:.2f} GB is more than fits on the GPU "
                      f"({free / 1e9:.2f} GB free{', twice the budget for sparse data' if copies == 2 else ''}); "
                      f"using {cut / 1e9:.2f} GB", RuntimeWarning, stacklevel=3)
        budget = cut
    block, staging = split_budget(problem, budget, prefetch)
    unit = _unit(problem.A)
    kind = SparseBlock if sp.issparse(problem.A) else DenseBlock
    return kind(problem, block // unit, dev, staging // unit)


def _unit(A):
    """Bytes of the block's unit of memory: a sparse entry (value and index), a dense row."""
    return A.data.itemsize + A.indices.itemsize if sp.issparse(A) else A.shape[1] * A.itemsize


def split_budget(problem, budget, prefetch):
    """(block bytes, staging bytes) of a budget in bytes, in whole units (a dense row,
    a sparse entry): a staging share too small for one unit takes nothing from the
    block, and a budget that holds all data needs no staging."""
    unit = _unit(problem.A)
    total = int(problem.coord_bytes.sum())
    staging = int(prefetch * budget) // unit if budget < total else 0
    return (budget // unit - staging) * unit, staging * unit
