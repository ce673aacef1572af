"""A problem's coordinate data on disk: what a Problem and a resident set ask of it.

:class:`OnDisk` wraps a :class:`solvers.storage.reader.DiskMatrix` (row i = coordinate
i, read past the page cache) and gives :class:`solvers.glm.problems.Problem` the
few operations it needs without the data in RAM: coordinate gaps of a set of
coordinates (read in chunks through a buffer, the next chunk read while the
kernel runs on this one), A^T a (only the coordinates with a_i != 0 are read),
row statistics in one pass, and reads of chosen coordinates into a resident
block. Every byte it reads is counted by the matrix (``bytes_read``, ``read_s``).
The dual models' coordinates y_i x_i come from the plain sample-major X with the
labels' signs applied as the rows land (:meth:`OnDisk.scaled`); the classifiers in the primal
read features of the feature-major X with each sample's sign applied value by value
(:meth:`OnDisk.signed`: coordinate j reads as y_k x_kj).
"""

import time

import numpy as np

from solvers.storage.reader import DiskMatrix, aligned_empty
from solvers.storage.files import read_npy_header
from solvers.kernels import cpu

DEFAULT_BUFFER_BYTES = 64 << 20
# The solver's reader for small coordinates (under SMALL_COORD_BYTES: the dual models' sample
# rows): 16 threads of 2 MB requests (the same 32 MB of bounce buffers at most as
# DiskMatrix's 4 of 8 MB). Scattered 40 KB rows read 1.2-2x faster with 16 requests in
# flight than with 4 (benchmarks.disk_reads); 32 threads gain nothing more, 64 lose.
# Larger coordinates (the Lasso's columns) keep DiskMatrix's 4 threads of 8 MB: its arm on
# the 4 GB store ran 1.1-1.4x slower on 16 threads (two interleaved pairs, load 8-13).
READ_THREADS = 16
READ_REQUEST_BYTES = 2 << 20
SMALL_COORD_BYTES = 128 << 10


class OnDisk:
    on_disk = True
    ndim = 2

    def __init__(self, matrix, buffer_bytes=DEFAULT_BUFFER_BYTES, n_features=None, scale=None, intercept=None,
                 direct=None, entry_scale=None):
        self.matrix = matrix if isinstance(matrix, DiskMatrix) else reader(matrix, direct)
        self.shape = self.matrix.shape
        # each coordinate's factor, applied by the thread that uses the rows once they are read
        # (not in the reader's threads, which then only issue reads: beside two compute threads
        # on 2 cores a multiply there cost 14% of the rate, each thread waiting for a core)
        self._factors = None if scale is None else DiskMatrix._check_scale(self.matrix, scale, self.matrix.dtype)
        # each value's factor, the same for every coordinate (a primal classifier's sample signs)
        self._entries = None
        if entry_scale is not None:
            self._entries = np.asarray(entry_scale, dtype=self.matrix.dtype)
            if self._entries.shape != (self.shape[1],):
                raise ValueError(f"entry_scale has shape {self._entries.shape}; {self.matrix.path} holds "
                                 f"{self.shape[1]} values per coordinate")
        # the leading values of each coordinate that are data (a dual model's sample row may be
        # padded with zeros to an aligned size: tasks.data.rows); None: all of them
        self.n_features = self.shape[1] if n_features is None else int(n_features)
        if not 0 < self.n_features <= self.shape[1]:
            raise ValueError(f"The 'n_features' parameter of OnDisk must be in [1, {self.shape[1]}] (the values "
                             f"per coordinate of {self.matrix.path}). Got {n_features!r} instead.")
        # liblinear's intercept: the first padding value of each row reads as this constant (times
        # the factor); the file holds 0 there
        self.intercept = None if intercept is None else float(intercept)
        if self.intercept is not None and self.n_features >= self.shape[1]:
            raise ValueError(f"{self.matrix.path} has no padding after its {self.n_features} features to hold "
                             "an intercept")
        self.dtype = self.matrix.dtype
        self.itemsize = self.dtype.itemsize
        self.nbytes = self.matrix.nbytes
        self.compute_s = 0.0  # seconds of gap kernels on data read from disk (the host's compute rate)
        self.compute_bytes = 0
        self._buffer = None
        self.buffer_bytes = int(buffer_bytes)

    def __repr__(self):
        return f"OnDisk({self.matrix!r}{'' if self.scale is None else ', scaled'})"

    @property
    def scale(self):
        """Each coordinate's factor applied on read (None: the file's values)."""
        return self._factors if self.matrix.scale is None else self.matrix.scale

    def scaled(self, scale, intercept=None):
        """A fresh reader of the same file whose coordinate i reads as scale[i] times the file's
        (its own counters at 0): the dual models' signed rows y_i x_i from the plain X."""
        m = self.matrix
        return OnDisk(DiskMatrix(m.path, threads=m.threads, max_request=m.max_request, direct=m._direct_asked,
                                 max_hole=m.max_hole), buffer_bytes=self.buffer_bytes,
                      n_features=self.n_features, scale=scale, intercept=intercept)

    def signed(self, signs):
        """A fresh reader of the same file whose coordinate j reads as signs * (the file's row j):
        the primal classifiers' y_k x_kj from the plain feature-major X."""
        m = self.matrix
        return OnDisk(DiskMatrix(m.path, threads=m.threads, max_request=m.max_request, direct=m._direct_asked,
                                 max_hole=m.max_hole), buffer_bytes=self.buffer_bytes,
                      n_features=self.n_features, entry_scale=signs)

    def _apply(self, coords, rows):
        """rows *= each coordinate's factor and each value's (in place; nothing without factors)."""
        if self._factors is not None:
            np.multiply(rows, self._factors[coords, None], out=rows)
        if self._entries is not None:
            np.multiply(rows, self._entries[None, :], out=rows)
        if self.intercept is not None:
            rows[:, self.n_features] = self._constant(coords)

    def _constant(self, coords):
        return self.intercept if self._factors is None else self.intercept * self._factors[coords]

    @property
    def bytes_read(self):
        return self.matrix.bytes_read

    @property
    def read_s(self):
        return self.matrix.read_s

    def buffer(self):
        """The read buffer (two halves: one read while the other computes), allocated on
        first use; at least two coordinates."""
        rows = max(2, self.buffer_bytes // max(1, self.matrix.row_bytes))
        rows = min(rows, 2 * max(1, self.shape[0]))
        if self._buffer is None or self._buffer.shape[0] != rows:
            self._buffer = aligned_empty((rows, self.shape[1]), self.dtype)
        return self._buffer

    def chunks(self, coords):
        """(coordinates, their rows, factors applied) a buffer half at a time; the next half is read
        meanwhile."""
        for part, rows in self.matrix.chunks(np.asarray(coords, dtype=np.int64), self.buffer()):
            self._apply(part, rows)
            yield part, rows

    def gaps(self, coords, a, z, off, mu, c, theta, out, out_s):
        """out[k], out_s[k] = gap and s of coordinate coords[k] at (a, z, off)."""
        done = 0
        for part, rows in self.matrix.chunks(np.asarray(coords, dtype=np.int64), self.buffer()):
            k = part.shape[0]
            start = time.perf_counter()  # the factors' multiply is the host's work too: timed with the kernel
            self._apply(part, rows)
            cpu.gaps_dense(rows, np.arange(k), part, a, z, off, mu, c, theta, out[done:done + k],
                           out_s[done:done + k])
            self.compute_s += time.perf_counter() - start
            self.compute_bytes += rows.nbytes
            done += k

    def dot_t(self, a):
        """A^T a in float64, reading only the coordinates with a_i != 0."""
        v = np.zeros(self.shape[1])
        support = np.flatnonzero(a)
        b = a if self._factors is None else a * self._factors  # (a_i s_i) x_i: exact for signs
        for part, rows in self.matrix.chunks(support, self.buffer()):
            v += b[part] @ rows.astype(np.float64, copy=False)
        if self.intercept is not None:  # the file's 0 there: the constant's column
            v[self.n_features] = self.intercept * float(b[support].sum())
        if self._entries is not None:  # (sum_j a_j x_j) * signs: exact for signs
            v *= self._entries
        return v

    def row_stats(self):
        """(sum, sum of squares) of every coordinate's data, in float64: one pass."""
        sums, sq = np.empty(self.shape[0]), np.empty(self.shape[0])
        for part, rows in self.chunks(np.arange(self.shape[0])):
            sums[part], sq[part] = cpu.dense_row_stats(rows)
        return sums, sq

    def read_rows(self, coords, out, rows):
        """out[rows[k]] = coordinate coords[k], now."""
        coords, rows = np.asarray(coords, np.int64), np.asarray(rows, np.int64)
        self.matrix.read_into(coords, out, rows)
        if self._factors is not None or self.intercept is not None or self._entries is not None:
            self._scale_rows(out, coords, rows)

    def prefetch_rows(self, coords, out, rows):
        """The same in the background: a future (the factors applied by its first result())."""
        coords, rows = np.asarray(coords, np.int64), np.asarray(rows, np.int64)
        read = self.matrix.prefetch(coords, out, rows)
        if self._factors is None and self.intercept is None and self._entries is None:
            return read
        return _Scaled(read, lambda: self._scale_rows(out, coords, rows))

    def _scale_rows(self, out, coords, rows):
        # in place, a row (or a run of consecutive rows) at a time: ``out[rows] *= f`` would copy
        # the rows read first, memory outside the host budget that holds the block
        if self._factors is not None:
            for r, factor in zip(rows.tolist(), self._factors[coords].tolist()):
                if factor != 1.0:  # (the labels' signs: half the rows need nothing)
                    row = out[r]
                    np.multiply(row, factor, out=row)
        if self._entries is not None and rows.size:
            cuts = np.flatnonzero(np.diff(rows) != 1) + 1
            for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, rows.size].tolist()):
                run = out[rows[lo]: rows[lo] + hi - lo]
                np.multiply(run, self._entries[None, :], out=run)
        if self.intercept is not None:
            out[rows, self.n_features] = self._constant(coords)

    def load(self):
        """All the data in RAM (a C-contiguous array): when a budget holds it all."""
        out = aligned_empty(self.shape, self.dtype)
        self.matrix.read_into(np.arange(self.shape[0]), out)
        self._apply(np.arange(self.shape[0]), out)
        return out


def linear_scores(matrix, coef, buffer_bytes=DEFAULT_BUFFER_BYTES):
    """X @ coef.T for X the (n_samples, n_features) .npy that ``matrix`` (a DiskMatrix) reads, a
    buffer at a time (at most ``buffer_bytes`` of X in RAM, past the page cache): a C-order file
    a block of samples at a time, a Fortran-order one a block of features at a time (their
    products summed). ``coef``: (n_outputs, n_features); returns (n_samples, n_outputs) float64."""
    coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
    rows = max(2, min(2 * matrix.shape[0], int(buffer_bytes) // max(1, matrix.row_bytes)))
    buffer = aligned_empty((rows, matrix.shape[1]), matrix.dtype)
    everything = np.arange(matrix.shape[0])
    if not matrix.fortran:  # a coordinate is a sample
        out = np.empty((matrix.shape[0], coef.shape[0]))
        for part, block in matrix.chunks(everything, buffer):
            out[part] = block @ coef.T
        return out
    out = np.zeros((matrix.shape[1], coef.shape[0]))  # a coordinate is a feature
    for part, block in matrix.chunks(everything, buffer):
        out += block.T @ coef[:, part].T
    return out


class _Scaled:
    """A read's future whose first result() applies the factors to the rows read (in the waiting
    thread, once)."""

    def __init__(self, future, apply):
        self._future, self._apply = future, apply

    def result(self):
        stats = self._future.result()
        if self._apply is not None:
            apply, self._apply = self._apply, None
            apply()
        return stats

    def exception(self):
        return self._future.exception()


def available_ram():
    """Bytes of RAM available to a new allocation (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reader(path, direct=None) -> DiskMatrix:
    """The disk matrix the solver reads ``path`` with: more requests in flight for small coordinates.
    ``direct``: DiskMatrix's (None: O_DIRECT where the file system has it; False: buffered reads whose
    pages are dropped after, faster on some virtual disks: "Disk -> GPU reads" in
    docs/explanation/design-decisions/out-of-core.md)."""
    shape, fortran, dtype, _, _ = read_npy_header(path)
    length = shape[0] if fortran else (shape[1] if len(shape) > 1 else 0)
    if length * dtype.itemsize < SMALL_COORD_BYTES:
        return DiskMatrix(path, threads=READ_THREADS, max_request=READ_REQUEST_BYTES, direct=direct)
    return DiskMatrix(path, direct=direct)
