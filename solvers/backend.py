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

import os
import warnings

import numpy as np
import scipy.sparse as sp

from solvers.kernels import cpu

DEVICES = ("cpu", "cuda", "cuda_sim")


class NoCudaDevice(RuntimeError):
    """device="cuda" was asked for on a machine without a usable GPU."""

    def __init__(self, detail=""):
        super().__init__("no CUDA device found: use device=cpu or device=cuda_sim"
                         + (f" ({detail})" if detail else ""))


# --------------------------------------------------------------------------- devices


class CPUDevice:
    name = "cpu"
    xp = np

    def __init__(self):
        self.bytes_h2d = 0

    def upload_rows(self, dst, dst_rows, src_rows):
        """dst[dst_rows] = src_rows (host rows already gathered), counted."""
        dst[dst_rows] = src_rows
        self.bytes_h2d += src_rows.nbytes

    def upload_into(self, dst, start, src):
        dst[start:start + src.shape[0]] = src
        self.bytes_h2d += src.nbytes

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
        out = np.empty(rows.shape[0])
        cpu.gaps_dense(data, rows, coords, *st, p.mu, p.c, p.model, *p.params, out)
        return out

    def gaps_sparse(self, buf, rows, coords, st, p):
        out = np.empty(rows.shape[0])
        cpu.gaps_sparse(*buf, rows, coords, *st, p.mu, p.c, p.model, *p.params, out)
        return out


class CUDADevice(CPUDevice):
    """CuPy memory and numba.cuda kernels; ``simulate=True`` runs them on NumPy arrays."""

    def __init__(self, problem, simulate):
        super().__init__()
        self.simulate = simulate
        self.name = "cuda_sim" if simulate else "cuda"
        if simulate:
            _enable_simulator()
            self.xp = np
        else:
            self.xp = _cupy()
            self.copy_stream = self.xp.cuda.Stream(non_blocking=True)
            self.compute_stream = self.xp.cuda.Stream(non_blocking=True)
        from solvers.kernels import cuda as kernels

        self.k = kernels
        self.mu = self._put(problem.mu)
        self.sqnorm = self._put(problem.sqnorm)

    def _put(self, host):
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

        with cuda.external_stream(self.compute_stream.ptr) as stream:
            kernel[n_blocks, self.k.TPB, stream](*args)

    def _staged(self, src):
        """Host rows -> device, through pinned memory on the copy stream; returns the device copy."""
        if self.simulate:
            self.bytes_h2d += src.nbytes
            return np.array(src)
        cp = self.xp
        pinned = cp.cuda.alloc_pinned_memory(src.nbytes)
        staged = np.frombuffer(pinned, src.dtype, src.size).reshape(src.shape)
        staged[...] = src
        dev = cp.empty(src.shape, src.dtype)
        dev.set(staged, stream=self.copy_stream)
        done = self.copy_stream.record()
        self.compute_stream.wait_event(done)  # compute sees the block only once it has arrived
        self.bytes_h2d += src.nbytes
        return dev

    def upload_rows(self, dst, dst_rows, src_rows):
        dev = self._staged(src_rows)
        with self._on_compute():
            dst[self._put(dst_rows)] = dev

    def upload_into(self, dst, start, src):
        dev = self._staged(src)
        with self._on_compute():
            dst[start:start + src.shape[0]] = dev

    def _on_compute(self):
        import contextlib

        return contextlib.nullcontext() if self.simulate else self.compute_stream

    def begin_round(self, state):
        a, z, off = state
        return tuple(self._staged(x) for x in (a, z, off))

    def end_round(self, state, dev_state):
        for host, dev in zip(state, dev_state):
            host[...] = self.to_host(dev)

    def to_host(self, x):
        if self.simulate:
            return np.asarray(x)
        self.compute_stream.synchronize()
        return self.xp.asnumpy(x)

    def epoch_dense(self, data, coords, order, st, p):
        self._launch(self.k.tpa_scd_dense, order.shape[0], data, coords, self._put(order), *st,
                     self.mu, self.sqnorm, p.c, p.model, *p.params)
        return order.shape[0]

    def epoch_sparse(self, buf, coords, order, st, p):
        self._launch(self.k.tpa_scd_sparse, order.shape[0], *buf, coords, self._put(order), *st,
                     self.mu, self.sqnorm, p.c, p.model, *p.params)
        return order.shape[0]

    def gaps_dense(self, data, rows, coords, st, p):
        out = self.xp.empty(rows.shape[0])
        self._launch(self.k.gaps_dense, rows.shape[0], data, self._put(rows), coords, *st,
                     self.mu, p.c, p.model, *p.params, out)
        return self.to_host(out)

    def gaps_sparse(self, buf, rows, coords, st, p):
        out = self.xp.empty(rows.shape[0])
        self._launch(self.k.gaps_sparse, rows.shape[0], *buf, self._put(rows), coords, *st,
                     self.mu, p.c, p.model, *p.params, out)
        return self.to_host(out)


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


class _Block:
    _cached = (None, None)

    def _positions(self, coords, slot_coord):
        """Where ``coords`` sit in the block; cached while the same array is passed."""
        if self._cached[0] is not coords:
            self._cached = (coords, np.flatnonzero(np.isin(slot_coord, coords)))
        return self._cached[1]


class DenseBlock(_Block):
    """Fixed slots of equal size: a swap overwrites the outgoing slots in place."""

    def __init__(self, problem, n_slots, device):
        self.problem = problem
        self.device = device
        A = problem.A
        self.whole = n_slots >= A.shape[0]
        n_slots = min(n_slots, A.shape[0])
        self.slot_coord = np.full(n_slots, -1, dtype=np.int64)
        if self.whole and device.name == "cpu":
            self.data = A  # zero-copy: everything is resident
        else:
            self.data = device.xp.empty((n_slots, A.shape[1]), dtype=A.dtype)
        self._coords_dev = None
        self.capacity_bytes = n_slots * A.shape[1] * A.itemsize

    @property
    def bytes_h2d(self):
        return self.device.bytes_h2d

    def resident(self):
        return self.slot_coord[self.slot_coord >= 0]

    def assign(self, coords):
        """Make ``coords`` the resident set; copies only coordinates not already resident."""
        coords = np.asarray(coords, dtype=np.int64)
        keep = np.isin(self.slot_coord, coords)
        incoming = coords[~np.isin(coords, self.slot_coord)]
        free = np.flatnonzero(~keep)[: incoming.shape[0]]
        self.slot_coord[~keep] = -1
        if incoming.shape[0] and self.data is self.problem.A:
            # zero-copy whole block: slot i is coordinate i; a logical load, counted
            self.device.bytes_h2d += int(self.problem.coord_bytes[incoming].sum())
            self.slot_coord[incoming] = incoming
            self._coords_dev = None
        elif incoming.shape[0]:
            self.device.upload_rows(self.data, free, self.problem.A[incoming])
            self.slot_coord[free] = incoming
            self._coords_dev = None
        return int(incoming.shape[0])

    def _coords(self):
        if self._coords_dev is None:
            self._coords_dev = self.device.xp.asarray(self.slot_coord)
        return self._coords_dev

    def run_round(self, state, rng, local_epochs, with_gaps=True, active=None):
        """local_epochs epochs on the block (only its ``active`` coordinates, when given),
        then the gaps of all of it: (updates, coords, gaps or None)."""
        p, dev = self.problem, self.device
        slots = np.flatnonzero(self.slot_coord >= 0)
        visit = slots if active is None else self._positions(active, self.slot_coord)
        st = dev.begin_round(state)
        updates = 0
        for _ in range(_passes(local_epochs, slots.shape[0], visit.shape[0])):
            updates += dev.epoch_dense(self.data, self._coords(), rng.permutation(visit), st, p)
        gaps = (dev.gaps_dense(self.data, slots, dev.xp.asarray(self.slot_coord[slots]), st, p)
                if with_gaps else None)
        dev.end_round(state, st)
        return updates, self.slot_coord[slots], gaps


class SparseBlock(_Block):
    """A CSR buffer of fixed capacity in entries; a swap compacts the kept rows
    (device-to-device) and appends the incoming ones (host-to-device, counted)."""

    def __init__(self, problem, capacity_nnz, device):
        self.problem = problem
        self.device = device
        A = problem.A
        self.whole = capacity_nnz >= A.nnz
        self.zero_copy = self.whole and device.name == "cpu"
        cap = A.nnz if self.whole else int(capacity_nnz)
        xp = device.xp
        self.indptr = np.zeros(1, np.int64)  # host copy of the block's row pointers
        self.buf = (xp.zeros(1, np.int64), xp.empty(cap, A.indices.dtype), xp.empty(cap, A.data.dtype))
        self._spare = (xp.empty(cap, A.indices.dtype), xp.empty(cap, A.data.dtype))
        self.coords = np.empty(0, dtype=np.int64)
        self.capacity_bytes = cap * (A.data.itemsize + A.indices.itemsize)

    @property
    def bytes_h2d(self):
        return self.device.bytes_h2d

    def resident(self):
        return self.coords

    def assign(self, coords):
        coords = np.asarray(coords, dtype=np.int64)
        A, dev = self.problem.A, self.device
        kept = np.flatnonzero(np.isin(self.coords, coords))
        incoming = coords[~np.isin(coords, self.coords)]
        if self.zero_copy:
            self.buf = (A.indptr, A.indices, A.data)
            self.indptr = A.indptr
            self.coords = np.arange(A.shape[0], dtype=np.int64)
            dev.bytes_h2d += int(self.problem.coord_bytes[incoming].sum())
            return int(incoming.shape[0])
        # kept rows: a device-to-device gather of their entries, in order
        starts, stops = self.indptr[kept], self.indptr[kept + 1]
        lengths = stops - starts
        positions = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        n_kept = int(lengths.sum())
        new_indices, new_data = self._spare
        _, indices, data = self.buf
        if n_kept:
            pos = dev.xp.asarray(positions)
            new_indices[:n_kept] = indices[pos]
            new_data[:n_kept] = data[pos]
        # incoming rows: gathered on the host, copied host->device
        inc = A[incoming]
        dev.upload_into(new_indices, n_kept, inc.indices.astype(A.indices.dtype, copy=False))
        dev.upload_into(new_data, n_kept, inc.data)
        indptr = np.concatenate([[0], np.cumsum(lengths), n_kept + inc.indptr[1:]]).astype(np.int64)
        self._spare = (indices, data)
        self.indptr = indptr
        self.buf = (dev.xp.asarray(indptr), new_indices, new_data)
        self.coords = np.concatenate([self.coords[kept], incoming])
        return int(incoming.shape[0])

    def run_round(self, state, rng, local_epochs, with_gaps=True, active=None):
        p, dev = self.problem, self.device
        st = dev.begin_round(state)
        coords = dev.xp.asarray(self.coords)
        visit = (np.arange(self.coords.shape[0]) if active is None
                 else self._positions(active, self.coords))
        updates = 0
        for _ in range(_passes(local_epochs, self.coords.shape[0], visit.shape[0])):
            updates += dev.epoch_sparse(self.buf, coords, rng.permutation(visit), st, p)
        gaps = (dev.gaps_sparse(self.buf, np.arange(self.coords.shape[0]), coords, st, p)
                if with_gaps else None)
        dev.end_round(state, st)
        return updates, self.coords, gaps


def make_device(problem, device):
    if device not in DEVICES:
        raise ValueError(f"The 'device' parameter must be one of {DEVICES}. Got {device!r} instead.")
    if device == "cpu":
        return CPUDevice()
    return CUDADevice(problem, simulate=device == "cuda_sim")


def make_block(problem, budget_bytes, device="cpu"):
    """The device block of a problem for a budget in bytes (None: all data)."""
    dev = make_device(problem, device)
    total = int(problem.coord_bytes.sum())
    budget = total if budget_bytes is None else min(int(budget_bytes), total)
    free = free_device_bytes(device)
    if free is not None and budget > 0.9 * free:
        cut = int(0.9 * free)
        warnings.warn(f"memory_budget of {budget / 1e9:.2f} GB is more than fits on the GPU "
                      f"({free / 1e9:.2f} GB free); using {cut / 1e9:.2f} GB", RuntimeWarning,
                      stacklevel=3)
        budget = cut
    if sp.issparse(problem.A):
        per_entry = problem.A.data.itemsize + problem.A.indices.itemsize
        return SparseBlock(problem, budget // per_entry, dev)
    per_coord = problem.A.shape[1] * problem.A.itemsize
    return DenseBlock(problem, budget // per_coord, dev)
