"""Where "device" memory lives, and every byte that moves into it.

A backend holds the resident block of coordinates (their data only) and runs
the device side of a DuHL round on it: coordinate descent epochs and the gaps
of its own coordinates. The host keeps all data, the coefficients ``a`` and the
shared vector ``z``.

``cpu``: the device block is a separate contiguous buffer in RAM, so a swap is
a real copy, counted in ``bytes_h2d``. When the budget covers all data the
block is the host array itself (nothing to swap; the one logical load is still
counted). GPU backends ("cuda", "cuda_sim") come with the GPU issue and keep
this interface.
"""

import numpy as np
import scipy.sparse as sp

from solvers.kernels import cpu

DEVICES = ("cpu",)


class DenseBlock:
    """Fixed slots of equal size: a swap overwrites the outgoing slots in place."""

    def __init__(self, problem, n_slots):
        self.problem = problem
        A = problem.A
        self.whole = n_slots >= A.shape[0]
        if self.whole:
            self.data = A  # zero-copy: everything is resident
            self.slot_coord = np.arange(A.shape[0], dtype=np.int64)
        else:
            self.data = np.empty((n_slots, A.shape[1]), dtype=A.dtype)
            self.slot_coord = np.full(n_slots, -1, dtype=np.int64)
        self.bytes_h2d = 0

    def resident(self):
        return self.slot_coord[self.slot_coord >= 0]

    def assign(self, coords):
        """Make ``coords`` the resident set; copies only coordinates not already resident."""
        coords = np.asarray(coords, dtype=np.int64)
        if self.whole:
            if self.bytes_h2d == 0:
                self.bytes_h2d = int(self.problem.coord_bytes.sum())
            return 0
        keep = np.isin(self.slot_coord, coords)
        incoming = coords[~np.isin(coords, self.slot_coord)]
        free = np.flatnonzero(~keep)[: incoming.shape[0]]
        self.slot_coord[~keep] = -1
        if incoming.shape[0]:
            self.data[free] = self.problem.A[incoming]
            self.slot_coord[free] = incoming
            self.bytes_h2d += int(incoming.shape[0] * self.data.shape[1] * self.data.itemsize)
        return int(incoming.shape[0])

    def epoch(self, state, rng):
        p = self.problem
        slots = np.flatnonzero(self.slot_coord >= 0)
        order = rng.permutation(slots)
        a, z, off = state
        return cpu.scd_epoch_dense(self.data, self.slot_coord, order, a, z, off, p.mu, p.sqnorm,
                                   p.c, p.model, *p.params)

    def gaps(self, state):
        p = self.problem
        slots = np.flatnonzero(self.slot_coord >= 0)
        coords = self.slot_coord[slots]
        out = np.empty(slots.shape[0])
        a, z, off = state
        cpu.gaps_dense(self.data, slots, coords, a, z, off, p.mu, p.c, p.model, *p.params, out)
        return coords, out


class SparseBlock:
    """A CSR buffer of fixed capacity in entries; a swap compacts the kept rows
    (device-to-device) and appends the incoming ones (host-to-device, counted)."""

    def __init__(self, problem, capacity_nnz):
        self.problem = problem
        A = problem.A
        self.whole = capacity_nnz >= A.nnz
        if self.whole:
            self.buf = (A.indptr, A.indices, A.data)
            self.coords = np.arange(A.shape[0], dtype=np.int64)
        else:
            cap = int(capacity_nnz)
            self._spare = (np.empty(cap, A.indices.dtype), np.empty(cap, A.data.dtype))
            self.buf = (np.zeros(1, np.int64), np.empty(cap, A.indices.dtype),
                        np.empty(cap, A.data.dtype))
            self.coords = np.empty(0, dtype=np.int64)
        self.bytes_h2d = 0

    def resident(self):
        return self.coords

    def assign(self, coords):
        coords = np.asarray(coords, dtype=np.int64)
        A = self.problem.A
        if self.whole:
            if self.bytes_h2d == 0:
                self.bytes_h2d = int(self.problem.coord_bytes.sum())
            return 0
        kept_rows = np.flatnonzero(np.isin(self.coords, coords))
        incoming = coords[~np.isin(coords, self.coords)]
        indptr, indices, data = self.buf
        new_indices, new_data = self._spare
        new_indptr = np.zeros(kept_rows.shape[0] + incoming.shape[0] + 1, np.int64)
        pos = cpu.gather_rows_csr(indptr, indices, data, kept_rows, new_indptr, new_indices,
                                  new_data, 0)
        start = pos
        tail = new_indptr[kept_rows.shape[0]:]  # indptr entries of the incoming rows
        pos = cpu.gather_rows_csr(A.indptr, A.indices, A.data, incoming, tail, new_indices,
                                  new_data, pos)
        self.bytes_h2d += int((pos - start) * (A.data.itemsize + A.indices.itemsize))
        self._spare = (indices, data)
        self.buf = (new_indptr, new_indices, new_data)
        self.coords = np.concatenate([self.coords[kept_rows], incoming])
        return int(incoming.shape[0])

    def epoch(self, state, rng):
        p = self.problem
        order = rng.permutation(self.coords.shape[0])
        a, z, off = state
        return cpu.scd_epoch_sparse(*self.buf, self.coords, order, a, z, off, p.mu, p.sqnorm,
                                    p.c, p.model, *p.params)

    def gaps(self, state):
        p = self.problem
        rows = np.arange(self.coords.shape[0])
        out = np.empty(rows.shape[0])
        a, z, off = state
        cpu.gaps_sparse(*self.buf, rows, self.coords, a, z, off, p.mu, p.c, p.model, *p.params, out)
        return self.coords, out


def make_block(problem, budget_bytes, device="cpu"):
    """The device block of a problem for a budget in bytes (None: all data)."""
    if device not in DEVICES:
        raise ValueError(f"The 'device' parameter must be one of {DEVICES}. Got {device!r} instead.")
    total = int(problem.coord_bytes.sum())
    budget = total if budget_bytes is None else min(int(budget_bytes), total)
    if sp.issparse(problem.A):
        per_entry = problem.A.data.itemsize + problem.A.indices.itemsize
        return SparseBlock(problem, budget // per_entry)
    per_coord = problem.A.shape[1] * problem.A.itemsize
    return DenseBlock(problem, budget // per_coord)
