"""Resident sets: the coordinates whose data a device holds, and a round on them.

A resident set holds the chosen coordinates' data on a device (DuHL's "block") and runs the device
side of a round there: epochs of coordinate descent over its coordinates, then their gaps. The host
keeps all data, ``a`` and ``z``. Two layouts: dense rows of equal size, and a CSR buffer of entries.
A share of the memory may be staging: coordinates prefetched for a coming swap.
"""

import warnings

import numpy as np
import scipy.sparse as sp

import types

from solvers.duhl.block.devices import free_device_bytes, make_device
from solvers.duhl.budget import is_sparse_on_disk, split_budget, unit_bytes
from solvers.kernels import cpu
from solvers.kernels.cache import compiled
from solvers.storage.reader import aligned_empty
from solvers.storage.sparse_on_disk import SparseBlock


def _in_order(coords):
    """``coords`` in increasing order: as given when they are (a block usually is, and the check
    costs a small part of a sort)."""
    coords = np.asarray(coords, dtype=np.int64)
    return coords if coords.shape[0] < 2 or bool((coords[1:] > coords[:-1]).all()) else np.sort(coords)


def _members(values, of, n):
    """np.isin(values, of) for coordinates in [0, n), by a mask (np.isin sorts or hashes, however few
    the values)."""
    mask = np.zeros(n, dtype=bool)
    mask[of] = True
    return mask[values]


def _by_coordinate(rows, row_coord):
    """``rows`` ordered by the coordinate they hold: epochs and gap sums then depend on which
    coordinates are resident, never on where they sit (so prefetching changes no iterate)."""
    return rows[np.argsort(row_coord[rows], kind="stable")]


class ResidentSet:
    """What both layouts share: counters, and a round's shape.

    A round runs ``local_epochs`` epochs on the block, then (when asked) prefetches the next
    round's likely newcomers into staging memory while the epochs run, then returns the block's
    gaps. ``prefetch_hits`` counts swapped-in coordinates found already on the device (no copy on
    the critical path); ``bytes_prefetched`` the bytes copied ahead of need (in ``bytes_h2d``
    too, used or not).
    """

    staging_bytes = 0

    def __init__(self):
        self.prefetch_hits = 0
        self.bytes_prefetched = 0

    @property
    def bytes_h2d(self):
        return self.device.bytes_h2d

    def close(self):
        """Wait for the copies still in flight (a solve returns with none: no read lands in
        its buffers, or on its byte counts, after it)."""

    def run_round(self, state, orders, passes, with_gaps=True, active=None, prefetch=None, limit=None):
        """``passes`` epochs over the resident set (only its ``active`` coordinates,
        when given), then the gaps of all of it; meanwhile the coordinates ``prefetch``
        are staged for the next swap, each pass in an order shuffled from ``orders`` (a state of
        solvers.kernels.cpu.shuffle); at most ``limit`` updates in all (the epoch budget: a last
        pass cut short). Returns (updates, coords, gaps, s), the last two None without
        ``with_gaps``; s_i = <A_i, u> feeds the tight certificate.

        A GPU updates several coordinates at once: on correlated data their steps add up and
        overshoot. Coordinate descent never raises the objective it minimizes, so a round that
        raised it is undone and run again with half the updates in flight (down to one at a
        time, when every step is exact); the undone round's updates still count."""
        if not getattr(self.device, "parallel", False):
            return self._round(state, orders, passes, with_gaps, active, prefetch, limit)
        start = tuple(x.copy() for x in state)
        before = self.problem.form_primal(*start)
        done = 0
        while True:
            out = self._round(state, orders, passes, with_gaps, active, prefetch, limit)
            done += out[0]
            after = self.problem.form_primal(*state)
            if after <= before + 1e-12 * abs(before) or not self.device.fewer_in_flight():
                return (done, *out[1:])
            for x, x0 in zip(state, start):
                x[...] = x0
            prefetch = None  # staged already

    def _round(self, state, orders, passes, with_gaps, active, prefetch, limit=None):
        dev = self.device
        with dev.context():
            st = dev.begin_round(state)
            if prefetch is not None and self.staging_bytes:  # issued first: it travels while we compute
                before = dev.bytes_h2d
                self.prefetch(np.asarray(prefetch, dtype=np.int64))
                self.bytes_prefetched += dev.bytes_h2d - before
            visit = self._visit(active)
            updates = 0
            for _ in range(passes):
                left = visit.shape[0] if limit is None else min(visit.shape[0], int(limit - updates))
                if left <= 0:
                    break
                order = np.array(visit, dtype=np.int64)
                cpu.shuffle(order, orders)
                updates += self._epoch(order[:left], st)
            coords, gaps, s = self._gaps(st) if with_gaps else (self.resident(), None, None)
            dev.end_round(state, st)
            if gaps is None:
                return updates, coords, None, None
            return updates, coords, dev.to_host(gaps), dev.to_host(s)


class DenseResidentSet(ResidentSet):
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
        # each coordinate's row, -1 none: swaps look rows up (np.isin's sorts were a tenth of
        # the dense SVM's round at memory_budget 0.25); and the block's rows in coordinate order
        self.slot = np.full(A.shape[0], -1, dtype=np.int64)
        self._rows = np.empty(0, dtype=np.int64)
        self._pending = []  # reads from disk into staging rows still in flight
        if self.whole and device.name == "cpu":
            self.data = A  # zero-copy: everything is resident
        elif problem.on_disk and device.name == "cpu":  # page-aligned rows: the disk reads straight into them
            self.data = aligned_empty((n_slots + n_stage, A.shape[1]), A.dtype)
        else:
            with device.context():
                self.data = device.xp.empty((n_slots + n_stage, A.shape[1]), dtype=A.dtype)
        self._coords_dev = None
        self.capacity_bytes = n_slots * unit_bytes(A)
        self.staging_bytes = n_stage * unit_bytes(A)

    def resident(self):
        return self.row_coord[self.in_block]

    def _set_rows(self, rows, coords, prefetch=False):
        """Copy the coordinates' data host->device into ``rows`` (from disk when the data is there)."""
        if self.data is self.problem.A:  # zero-copy whole block: a logical load, counted
            self.device.bytes_h2d += int(self.problem.coord_bytes[coords].sum())
        elif self.problem.on_disk and self.device.name != "cpu":  # a GPU under a RAM tier
            self.device.upload_rows(self.data, rows, self.problem.A.take(coords), prefetch=prefetch)
        elif self.problem.on_disk:
            A = self.problem.A
            if prefetch:
                self._pending.append(A.prefetch_rows(coords, self.data, rows))
            else:
                A.read_rows(coords, self.data, rows)
            self.device.bytes_h2d += int(self.problem.coord_bytes[coords].sum())
        else:
            self.device.upload_rows(self.data, rows, self.problem.A, coords, prefetch=prefetch)
        evicted = self.row_coord[rows]
        self.slot[evicted[evicted >= 0]] = -1
        self.slot[coords] = rows
        self.row_coord[rows] = coords
        self._coords_dev = None

    def reindex(self):
        """Rebuilds the lookups from ``row_coord`` and ``in_block`` (after the compiled loop moved rows)."""
        self.slot[:] = -1
        held = np.flatnonzero(self.row_coord >= 0)
        self.slot[self.row_coord[held]] = held
        self._rows = _by_coordinate(np.flatnonzero(self.in_block), self.row_coord)

    def assign(self, coords):
        """Make ``coords`` the block; copies only coordinates no row holds. Returns
        how many coordinates joined the block."""
        coords = _in_order(coords)
        self._settle_reads()
        with self.device.context():
            self.device.settle()
            rows = self.slot[coords]
            have = rows >= 0
            kept = rows[have]  # rows that already hold a chosen coordinate
            joined = coords.shape[0] - int(np.count_nonzero(self.in_block[kept]))
            self.prefetch_hits += int(np.count_nonzero(~self.in_block[kept]))
            held = np.zeros(self.row_coord.shape[0], dtype=bool)
            held[kept] = True
            missing = coords[~have]
            if missing.shape[0]:  # (zero-copy whole block: row i is coordinate i)
                free = missing if self.data is self.problem.A else self._free_rows(~held)[: missing.shape[0]]
                self._set_rows(free, missing)
                held[free] = True
            self.in_block = held
            self._rows = self.slot[coords]
        return joined

    def _free_rows(self, usable):
        """The rows of the mask ``usable``, empty ones first (each part in row order)."""
        empty = self.row_coord < 0
        return np.concatenate([np.flatnonzero(usable & empty), np.flatnonzero(usable & ~empty)])

    def _settle_reads(self):
        """Wait for the disk reads into staging rows (before those rows are used or reused)."""
        for read in self._pending:
            read.result()
        self._pending = []

    def close(self):
        for read in self._pending:  # waits; a failed read already failed the round that needed it, or no one
            read.exception()
        self._pending = []

    def prefetch(self, coords):
        """Copy ``coords`` not yet on the device into rows outside the block (empty
        rows first), on the copy stream: the next assign finds them there."""
        self._settle_reads()
        where = self.slot[coords]
        wanted = coords[where < 0]
        usable = ~self.in_block
        usable[where[where >= 0]] = False  # rows holding one of coords stay
        rows = self._free_rows(usable)
        n = min(rows.shape[0], wanted.shape[0])
        if n:
            self._set_rows(rows[:n], wanted[:n], prefetch=True)
        return n

    def _coords(self):
        if self._coords_dev is None:
            self._coords_dev = self.device.xp.asarray(self.row_coord)
        return self._coords_dev

    def _block_rows(self):
        return self._rows

    def _visit(self, active):
        return self._rows if active is None else self.slot[_in_order(active)]

    def _epoch(self, order, st):
        return self.device.epoch_dense(self.data, self._coords(), order, st, self.problem)

    def _gaps(self, st):
        rows = self._block_rows()
        coords = self.row_coord[rows]
        return (coords, *self.device.gaps_dense(self.data, rows, self.device.xp.asarray(coords), st,
                                                self.problem))


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

    def rebuild(self, device, parts, A, incoming, prefetch=False, incoming_coords=None):
        """The rows become: ``rows`` of each (source, rows) in ``parts`` (device-to-device),
        then A's rows ``incoming`` (host->device), the coordinates ``incoming_coords`` (None: the
        rows' numbers in A)."""
        new_indices, new_data = self._spare
        filled, lengths, coords = 0, [], []
        for source, rows in parts:
            part = device.copy_rows((new_indices, new_data), filled, (source.indptr, source.indices, source.data),
                                    rows, from_host=False, prefetch=prefetch)
            filled += int(part.sum())
            lengths.append(part)
            coords.append(source.coords[rows])
        part = device.copy_rows((new_indices, new_data), filled, (A.indptr, A.indices, A.data), incoming,
                                from_host=True, prefetch=prefetch)
        lengths.append(part)
        coords.append(incoming if incoming_coords is None else incoming_coords)
        self._spare = (self.indices, self.data)
        self.indices, self.data = new_indices, new_data
        self.indptr = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
        self.coords = np.concatenate(coords).astype(np.int64)


class SparseResidentSet(ResidentSet):
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
        self._cached = (None, None)
        self.capacity_bytes = cap * unit_bytes(A)
        self.staging_bytes = stage * unit_bytes(A)

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
        A, dev, n = self.problem.A, self.device, self.problem.n_coords
        joined = ~_members(coords, self.rows.coords, n)
        incoming = coords[joined]
        if self.zero_copy:
            self.rows.coords = np.arange(A.shape[0], dtype=np.int64)
            self.rows.indptr = A.indptr
            dev.bytes_h2d += int(self.problem.coord_bytes[incoming].sum())
            return int(incoming.shape[0])
        with dev.context():
            dev.settle()
            kept = np.flatnonzero(_members(self.rows.coords, coords, n))
            hits = np.flatnonzero(_members(self.stage.coords, incoming, n))
            self.prefetch_hits += int(hits.shape[0])
            missing = incoming[~_members(incoming, self.stage.coords[hits], n)]
            self.rows.rebuild(dev, [(self.rows, kept), (self.stage, hits)], A, missing)
            self._indptr_dev = dev.xp.asarray(self.rows.indptr)
        return int(incoming.shape[0])

    def prefetch(self, coords):
        """Stage ``coords`` not in the block (as many as fit, in order); staged rows
        still wanted stay, the others make room."""
        A, n = self.problem.A, self.problem.n_coords
        wanted = coords[~_members(coords, self.rows.coords, n)]
        keep = np.flatnonzero(_members(self.stage.coords, wanted, n))
        new = wanted[~_members(wanted, self.stage.coords, n)]
        room = self.stage.capacity - int(np.diff(self.stage.indptr)[keep].sum())
        fits = np.cumsum(np.diff(A.indptr)[new]) <= room
        new = new[: int(np.argmin(fits)) if not fits.all() else new.shape[0]]
        if new.shape[0] == 0 and keep.shape[0] == self.stage.coords.shape[0]:
            return 0  # nothing to change
        self.stage.rebuild(self.device, [(self.stage, keep)], A, new, prefetch=True)
        return int(new.shape[0])

    def _visit(self, active):
        """Where the coordinates ``active`` (all when None) sit in the block, in coordinate order;
        cached while the same array is passed."""
        coords = self.rows.coords
        if active is None:
            return _by_coordinate(np.arange(coords.shape[0]), coords)
        if self._cached[0] is not active:
            rows = np.flatnonzero(_members(coords, active, self.problem.n_coords))
            self._cached = (active, _by_coordinate(rows, coords))
        return self._cached[1]

    def _epoch(self, order, st):
        return self.device.epoch_sparse(self.buf, self._coords_dev, order, st, self.problem)

    def run_round(self, state, orders, passes, with_gaps=True, active=None, prefetch=None, limit=None):
        with self.device.context():
            self._coords_dev = self.device.xp.asarray(self.rows.coords)
        return super().run_round(state, orders, passes, with_gaps, active, prefetch, limit)

    def _gaps(self, st):
        coords = self.rows.coords
        rows = _by_coordinate(np.arange(coords.shape[0]), coords)
        coords = coords[rows]
        return (coords, *self.device.gaps_sparse(self.buf, rows, self.device.xp.asarray(coords), st,
                                                 self.problem))


@compiled
def _compact_rows(indptr, indices, data, keep, out_indptr):
    """The CSR rows with ``keep`` set moved to the front in their order, in place (a row never
    moves right); their row pointers into ``out_indptr``. Returns (rows kept, entries kept)."""
    rows, fill = 0, 0
    out_indptr[0] = 0
    for r in range(keep.shape[0]):
        lo, hi = indptr[r], indptr[r + 1]
        if not keep[r]:
            continue
        if fill < lo:
            for e in range(lo, hi):
                indices[fill + e - lo] = indices[e]
                data[fill + e - lo] = data[e]
        fill += hi - lo
        rows += 1
        out_indptr[rows] = fill
    return rows, fill


class DiskSparseResidentSet(SparseResidentSet):
    """The CPU's block of a sparse store on disk (solvers.storage.sparse_on_disk): a CSR buffer in
    RAM of fixed capacity in entries. A swap moves the rows that stay forward in place, in their
    order, and reads the joined ones from disk straight into the tail, so RAM holds the block once
    (a GPU's sparse block keeps a spare copy to compact into). No staging: a read cannot overlap
    the epochs on the CPU's two cores without slowing them."""

    def __init__(self, problem, capacity_nnz, device):
        cap = self._store_block(problem, capacity_nnz, device)
        A = problem.A
        self.rows = types.SimpleNamespace(coords=np.empty(0, np.int64), indptr=np.zeros(1, np.int64),
                                          indices=np.empty(cap, A.store.index_dtype), data=np.empty(cap, A.dtype))
        self._indptr_dev = self.rows.indptr

    def _store_block(self, problem, capacity_nnz, device):
        """What a block read from a sparse store sets up on any device (no staging); returns its
        capacity in entries."""
        ResidentSet.__init__(self)
        self.problem, self.device = problem, device
        A = problem.A
        cap = int(min(int(capacity_nnz), A.nnz))
        self.whole, self.zero_copy = cap >= A.nnz, False
        self.stage = None
        self._cached = (None, None)
        self.capacity_bytes = cap * unit_bytes(A)
        self.staging_bytes = 0
        return cap

    def assign(self, coords):
        coords = _in_order(coords)
        n, rows = self.problem.n_coords, self.rows
        keep = _members(rows.coords, coords, n)
        joined = coords[~_members(coords, rows.coords, n)]
        kept_ptr = np.empty(keep.shape[0] + 1, np.int64)
        kept, fill = _compact_rows(rows.indptr, rows.indices, rows.data, keep, kept_ptr)
        block = self.problem.A.read_block(joined, SparseBlock.over(rows.indices[fill:], rows.data[fill:],
                                                                   joined.shape[0]))
        rows.indptr = np.concatenate([kept_ptr[: kept + 1], fill + block.indptr[1:]])
        rows.coords = np.concatenate([rows.coords[keep], joined])
        self._indptr_dev = rows.indptr
        self.device.bytes_h2d += int(self.problem.coord_bytes[joined].sum())
        return int(joined.shape[0])

    def prefetch(self, coords):
        return 0


class StoreGPUResidentSet(DiskSparseResidentSet):
    """A GPU's block of a sparse store on disk: a swap reads the joined rows from the store into a
    CSR landing buffer in RAM (the block's capacity, counted in host_budget, as the CPU's block is),
    then the device compacts the kept rows and appends the joined ones (host->device), as a sparse
    block from RAM does. No staging: the rows come from the disk at the swap, as on the CPU."""

    def __init__(self, problem, capacity_nnz, device):
        cap = self._store_block(problem, capacity_nnz, device)
        A = problem.A
        self.rows = _CSRRows(device, cap, A.store.index_dtype, A.dtype)
        self._landing = (np.empty(cap, A.store.index_dtype), np.empty(cap, A.dtype))
        self._indptr_dev = None

    def assign(self, coords):
        coords = _in_order(coords)
        A, dev, n = self.problem.A, self.device, self.problem.n_coords
        joined = coords[~_members(coords, self.rows.coords, n)]
        block = A.read_block(joined, SparseBlock.over(*self._landing, joined.shape[0]))
        with dev.context():
            dev.settle()
            kept = np.flatnonzero(_members(self.rows.coords, coords, n))
            self.rows.rebuild(dev, [(self.rows, kept)], block, np.arange(joined.shape[0]),
                              incoming_coords=joined)
            self._indptr_dev = dev.xp.asarray(self.rows.indptr)
        return int(joined.shape[0])


def _device_budget(budget, free, copies):
    """``budget`` bytes, cut (with a warning) to what fits in 90% of the GPU's ``free`` bytes when
    the device keeps ``copies`` of the block."""
    if free is not None and budget * copies > 0.9 * free:
        cut = int(0.9 * free) // copies
        warnings.warn(f"memory_budget of {budget / 1e9:.2f} GB is more than fits on the GPU "
                      f"({free / 1e9:.2f} GB free{', twice the budget for sparse data' if copies == 2 else ''}); "
                      f"using {cut / 1e9:.2f} GB", RuntimeWarning, stacklevel=4)
        return cut
    return budget


def make_resident_set(problem, budget_bytes, device="cpu", prefetch=0.0, gap_kernel="tpa", concurrency="auto"):
    """The device's resident set of a problem for a budget in bytes (None: all data), of which a
    ``prefetch`` share is staging memory for coordinates copied ahead of their swap (none when the
    budget holds all data); ``gap_kernel`` computes the block's gaps on a GPU device ("tpa": a thread
    block per coordinate; "blas": one cuBLAS matrix-vector product, then a thread per coordinate);
    ``concurrency`` caps the coordinates a GPU epoch updates at once ("auto": sqrt of the epoch's)."""
    dev = make_device(problem, device, gap_kernel, concurrency)
    free = free_device_bytes(device)
    if is_sparse_on_disk(problem.A):  # the block read from the store (the solver sized it)
        if device == "cpu":
            return DiskSparseResidentSet(problem, int(budget_bytes) // unit_bytes(problem.A), dev)
        budget = _device_budget(int(budget_bytes), free, 2)
        return StoreGPUResidentSet(problem, budget // unit_bytes(problem.A), dev)
    total = int(problem.coord_bytes.sum())
    budget = total if budget_bytes is None else min(int(budget_bytes), total)
    # a sparse block also keeps a spare buffer of its size to compact into on swaps
    budget = _device_budget(budget, free, 2 if sp.issparse(problem.A) else 1)
    block, staging = split_budget(problem, budget, prefetch)
    unit = unit_bytes(problem.A)
    kind = SparseResidentSet if sp.issparse(problem.A) else DenseResidentSet
    return kind(problem, block // unit, dev, staging // unit)
