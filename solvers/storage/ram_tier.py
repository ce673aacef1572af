"""The RAM tier between the disk and a GPU: disk -> RAM (host_budget) -> GPU (memory_budget).

With the data on disk and device="cuda", :class:`RamTier` holds ``n_rows`` coordinates
in RAM: each round the GPU block's coordinates and, with the room left, those of largest
gap (:func:`ram_choice`), so the device block is always a subset of the RAM set and
both are chosen by the gaps. It stands in for :class:`solvers.storage.on_disk.OnDisk` as
a problem's ``A``: gaps and A^T a of coordinates held in RAM are computed from RAM
(no disk read), the others are read from disk past the page cache as before, and
every disk byte is counted by the disk matrix (``bytes_read``, ``read_s``).
"""

import numpy as np

from solvers.storage.reader import aligned_empty
from solvers.kernels import cpu


def ram_choice(chosen, gaps, n_rows):
    """The RAM set: the device block ``chosen`` first, then the largest gaps (ties to the
    lower index) until ``n_rows`` coordinates."""
    room = n_rows - chosen.shape[0]
    if room <= 0:
        return chosen[:n_rows]
    rest = np.ones(gaps.shape[0], dtype=bool)
    rest[chosen] = False
    others = np.flatnonzero(rest)
    if others.shape[0] > room:
        # a stable sort of -gap keeps ties in index order (argpartition would not)
        others = others[np.argsort(-gaps[others], kind="stable")[:room]]
    return np.concatenate([chosen, others])


class RamTier:
    on_disk = True
    ndim = 2

    def __init__(self, disk, n_rows):
        self.disk = disk
        self.shape, self.dtype, self.itemsize, self.nbytes = disk.shape, disk.dtype, disk.itemsize, disk.nbytes
        n_rows = int(min(n_rows, disk.shape[0]))
        if n_rows < 1:
            raise ValueError(f"RamTier needs room for at least one coordinate; got n_rows={n_rows}")
        self.data = aligned_empty((n_rows, disk.shape[1]), disk.dtype)  # page-aligned: O_DIRECT reads land here
        self.row_coord = np.full(n_rows, -1, dtype=np.int64)
        self.where = np.full(disk.shape[0], -1, dtype=np.int64)         # each coordinate's row, -1: disk only
        self.capacity_bytes = self.data.nbytes

    def __repr__(self):
        return f"RamTier({self.data.shape[0]} of {self.shape[0]} coordinates in RAM, {self.disk!r})"

    def __getattr__(self, name):  # the rest of OnDisk's counters (bytes_read, read_s, compute_s, matrix)
        if name == "disk":
            raise AttributeError(name)
        return getattr(self.disk, name)

    @property
    def buffer_bytes(self):
        return self.disk.buffer_bytes

    @buffer_bytes.setter
    def buffer_bytes(self, value):
        self.disk.buffer_bytes = value

    def held(self):
        """The coordinates in RAM now."""
        return self.row_coord[self.row_coord >= 0]

    def hold(self, coords):
        """Make ``coords`` (at most n_rows of them) the RAM set: reads from disk only the
        coordinates not yet in RAM, into the rows of coordinates that leave. Returns the
        number read."""
        coords = np.asarray(coords, dtype=np.int64)
        if coords.shape[0] > self.data.shape[0]:
            raise ValueError(f"RamTier.hold: {coords.shape[0]} coordinates for {self.data.shape[0]} rows")
        keep = np.zeros(self.shape[0], dtype=bool)
        keep[coords] = True
        leaving = self.row_coord[(self.row_coord >= 0) & ~keep[np.maximum(self.row_coord, 0)]]
        self.where[leaving] = -1
        free = np.flatnonzero((self.row_coord < 0) | np.isin(self.row_coord, leaving))
        missing = coords[self.where[coords] < 0]
        rows = free[: missing.shape[0]]
        self.row_coord[free] = -1
        if missing.shape[0]:
            self.disk.read_rows(missing, self.data, rows)
            self.row_coord[rows] = missing
            self.where[missing] = rows
        return int(missing.shape[0])

    def take(self, coords):
        """A host array of the coordinates' data (page-aligned rows): from RAM where held,
        read from disk for the others."""
        coords = np.asarray(coords, dtype=np.int64)
        out = aligned_empty((coords.shape[0], self.shape[1]), self.dtype)
        rows = self.where[coords]
        inram = rows >= 0
        out[inram] = self.data[rows[inram]]
        if not inram.all():
            self.disk.read_rows(coords[~inram], out, np.flatnonzero(~inram))
        return out

    def gaps(self, coords, a, z, off, mu, c, theta, out, out_s):
        """out[k], out_s[k] = gap and s of coordinate coords[k]: from RAM where held."""
        rows = self.where[coords]
        inram = rows >= 0
        if inram.any():
            k = np.flatnonzero(inram)
            g, s = np.empty(k.shape[0]), np.empty(k.shape[0])
            cpu.gaps_dense(self.data, rows[k], coords[k], a, z, off, mu, c, theta, g, s)
            out[k], out_s[k] = g, s
        if not inram.all():
            k = np.flatnonzero(~inram)
            g, s = np.empty(k.shape[0]), np.empty(k.shape[0])
            self.disk.gaps(coords[k], a, z, off, mu, c, theta, g, s)
            out[k], out_s[k] = g, s

    def dot_t(self, a):
        """A^T a in float64: the support's coordinates in RAM from RAM, the rest from disk."""
        support = np.flatnonzero(a)
        rows = self.where[support]
        inram = rows >= 0
        v = a[support[inram]] @ self.data[rows[inram]].astype(np.float64, copy=False)
        if not inram.all():
            b = np.zeros_like(a)
            b[support[~inram]] = a[support[~inram]]
            v = v + self.disk.dot_t(b)
        return v

    def row_stats(self):
        return self.disk.row_stats()

    def load(self):
        return self.disk.load()
