"""A problem's sparse coordinate data on disk: what a Problem and a resident set ask of it.

:class:`SparseOnDisk` is to a :class:`solvers.storage.sparse_store.SparseStore` what
:class:`solvers.storage.on_disk.OnDisk` is to a dense ``.npy``: ``A`` of a
:class:`solvers.glm.problems.Problem` whose coordinates stay on disk, read past the page cache
a buffer at a time by a :class:`solvers.storage.sparse_reader.SparseReader`:

- coordinate gaps of a set of coordinates: each chunk of coordinates goes, as read, to the
  compiled gap kernel (``solvers.kernels.cpu.gaps_sparse``) as a local CSR over the buffer (no
  copy); then one more call of the same kernel on one-entry rows turns each coordinate's
  <A_i, u> into its gap, so that a coordinate cut in pieces, a label's sign and an intercept
  column (which are not in the file) enter exactly as they do in RAM;
- A^T a, reading only the coordinates with a_i != 0;
- each coordinate's sum and sum of squares (a binary store's from ``indptr`` alone: no read);
- reads of chosen coordinates into a :class:`SparseBlock` (a compact CSR in RAM, rows in the
  order asked, signs and intercept applied: what the epoch kernels take), now or in the
  background.

The dual models' coordinates are samples y_i x_i (+ the intercept's constant): the store holds
X's rows; ``scale`` (the labels' signs) and ``intercept`` are applied as the data are used, so
one store serves every classifier and labelling. Every byte read is counted by the reader
(``bytes_read``, ``read_s``, ``useful_bytes``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from numba import njit

from solvers.kernels import cpu
from solvers.storage.sparse_reader import ChunkBuffer, SparseReader
from solvers.storage.sparse_store import SparseStore

__all__ = ["SparseBlock", "SparseOnDisk"]

DEFAULT_BUFFER_BYTES = 64 << 20  # the gap / A^T a buffer (two halves), as OnDisk's
GAP_SCRATCH = 128  # about the bytes a coordinate a gap pass allocates (dots, signs, outputs, indexes)
MIN_GAP_CHUNK = 4096  # coordinates: a small buffer still takes a gap pass in few calls
INT32_MAX = np.iinfo(np.int32).max
_ONE = np.ones(1)
_NO_OFF = np.zeros(1)


@njit(cache=True, nogil=True)
def _axpy_pieces(indptr, positions, indices, values, weights, v):
    """v[indices of row positions[j]] += weights[j] * its values."""
    for j in range(positions.shape[0]):
        r = positions[j]
        w = weights[j]
        for k in range(indptr[r], indptr[r + 1]):
            v[np.uint64(indices[k])] += w * values[k]


@njit(cache=True, nogil=True)
def _piece_dots(indptr, positions, indices, values, z, out):
    """out[j] = <row positions[j], z>."""
    for j in range(positions.shape[0]):
        r = positions[j]
        t = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            t += values[k] * z[np.uint64(indices[k])]
        out[j] = t


@njit(cache=True, nogil=True)
def _piece_stats(indptr, positions, values, sums, sq):
    """sums[j], sq[j] = sum and sum of squares of row positions[j]'s values (float64)."""
    for j in range(positions.shape[0]):
        r = positions[j]
        s = 0.0
        q = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            x = np.float64(values[k])  # float() of a float32 stays float32 in Numba: its square would round
            s += x
            q += x * x
        sums[j] = s
        sq[j] = q


@njit(cache=True, nogil=True)
def _gather_pieces(indptr, positions, indices, values, binary, dest, factors, out_indices, out_data):
    """Row positions[j] to out_*[dest[j]:], its values times factors[j] (a binary store: factors[j])."""
    for j in range(positions.shape[0]):
        r = positions[j]
        lo = indptr[r]
        n = indptr[r + 1] - lo
        d = dest[j]
        f = factors[j]
        for k in range(n):
            out_indices[d + k] = indices[lo + k]
            out_data[d + k] = f if binary else values[lo + k] * f


class SparseBlock:
    """Coordinates in RAM as a compact CSR: row k is coordinate ``coords[k]`` (the order asked),
    ``indptr`` int64 (k + 1), ``indices`` of the store's index dtype, ``data`` of the block's
    dtype. Arrays of a fixed capacity (``max_rows``, ``max_nnz``), filled by
    :meth:`SparseOnDisk.read_block`; the first ``n_rows`` rows and ``nnz`` entries are valid."""

    def __init__(self, max_rows, max_nnz, index_dtype=np.int32, dtype=np.float64):
        self.max_rows, self.max_nnz = int(max_rows), int(max_nnz)
        self._indptr = np.zeros(self.max_rows + 1, np.int64)
        self._indices = np.empty(self.max_nnz, index_dtype)
        self._data = np.empty(self.max_nnz, dtype)
        self._coords = np.empty(self.max_rows, np.int64)
        self.n_rows, self.nnz = 0, 0

    @classmethod
    def over(cls, indices, data, max_rows):
        """A block whose entries go into the caller's arrays ``indices`` and ``data`` (views of a
        larger buffer: a resident block reads its new rows straight into its tail)."""
        block = cls.__new__(cls)
        block.max_rows, block.max_nnz = int(max_rows), int(min(indices.shape[0], data.shape[0]))
        block._indptr = np.zeros(block.max_rows + 1, np.int64)
        block._indices, block._data = indices, data
        block._coords = np.empty(block.max_rows, np.int64)
        block.n_rows, block.nnz = 0, 0
        return block

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._indptr, self._indices, self._data, self._coords))

    @property
    def indptr(self):
        return self._indptr[:self.n_rows + 1]

    @property
    def indices(self):
        return self._indices[:self.nnz]

    @property
    def data(self):
        return self._data[:self.nnz]

    @property
    def coords(self):
        return self._coords[:self.n_rows]

    def csr(self, n_cols):
        """The block as a scipy csr_matrix (n_rows, n_cols) sharing its arrays (int32 offsets when
        they fit: the kernels' signature in RAM)."""
        indptr = self.indptr.astype(np.int32) if self.nnz <= INT32_MAX and self._indices.dtype == np.int32 \
            else self.indptr
        indices = self.indices if indptr.dtype == self._indices.dtype else self.indices.astype(indptr.dtype)
        m = sp.csr_matrix((self.n_rows, int(n_cols)), dtype=self._data.dtype)
        m.indptr, m.indices, m.data = indptr, indices, self.data
        m.has_sorted_indices = True
        return m


class SparseOnDisk:
    """A problem's coordinate data in a sparse store (see the module's docstring).

    Parameters
    ----------
    store : SparseStore (or its reader: a SparseReader, whose counters it then shares).
    buffer_bytes : the read buffer of gaps, A^T a and row stats (two halves); a block read has
        one of its own of the same size (a read-ahead may overlap a gap refresh).
    scale : None, or one factor per coordinate (the dual models' labels' signs): coordinate i
        is scale[i] times the store's.
    intercept : None, or liblinear's intercept constant: each coordinate gets one more entry,
        at index ``n_features`` (the store's width), of value intercept * scale[i].
    direct : the reader's (None: O_DIRECT where the file system allows it).
    dtype : the values' dtype in RAM for a binary store (blocks and the kernels' ones).
    """

    on_disk = True
    ndim = 2

    def __init__(self, store, buffer_bytes=DEFAULT_BUFFER_BYTES, scale=None, intercept=None, direct=None,
                 dtype=np.float64):
        if isinstance(store, SparseReader):
            self.reader = store
        elif isinstance(store, SparseStore):
            self.reader = SparseReader(store, direct=direct)
        else:
            raise ValueError(f"The 'store' parameter of SparseOnDisk must be a SparseStore or a SparseReader. "
                             f"Got {type(store).__name__} instead.")
        self.store = self.reader.store
        self.n_features = self.store.length  # the store's own width; an intercept comes after it
        self.intercept = None if intercept is None else float(intercept)
        self.shape = (self.store.n_coords, self.n_features + (self.intercept is not None))
        self.dtype = self.store.value_dtype or np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.nbytes = self.store.nbytes
        self.scale = None
        if scale is not None:
            s = np.asarray(scale)
            if s.shape != (self.shape[0],) or s.dtype.kind not in "iuf" or not np.isfinite(s).all():
                raise ValueError(f"The 'scale' parameter of SparseOnDisk must be None or {self.shape[0]} finite "
                                 f"numbers, one per coordinate. Got a {s.shape} {s.dtype} array instead.")
            self.scale = s.astype(np.float64)
        self.buffer_bytes = int(buffer_bytes)
        self.compute_s, self.compute_bytes = 0.0, 0
        self._buffer = None
        self._block_buffer = None
        self._background = None

    def __repr__(self):
        extra = ("" if self.scale is None else ", scaled") + ("" if self.intercept is None else
                                                               f", intercept {self.intercept:g}")
        return f"SparseOnDisk({self.reader!r}{extra})"

    def __getstate__(self):
        """Pickled (shipped to a worker): the reader reopens the store by path; buffers and the
        background thread are made again there, counters at 0."""
        state = dict(self.__dict__)
        state.update(_buffer=None, _block_buffer=None, _background=None, compute_s=0.0, compute_bytes=0)
        return state

    # -------------------------------------------------------------- as OnDisk ---
    @property
    def matrix(self):
        """The reader (what DuHL closes, and whose ``useful_bytes`` it rates)."""
        return self.reader

    @property
    def bytes_read(self):
        return self.reader.bytes_read

    @property
    def read_s(self):
        return self.reader.read_s

    @property
    def nnz(self) -> int:
        return self.store.nnz + (self.shape[0] if self.intercept is not None else 0)

    def coord_nnz(self, coords=None) -> np.ndarray:
        """Entries of each coordinate (of ``coords``; default all) as delivered, the intercept's included."""
        indptr = self.store.indptr
        counts = np.diff(indptr) if coords is None else indptr[coords + 1] - indptr[coords]
        counts += self.intercept is not None  # in place: one array of a coordinate's size
        return counts

    def coordinate_bytes(self) -> np.ndarray:
        """Bytes each coordinate takes in a block in RAM (indices and values)."""
        counts = self.coord_nnz()
        counts *= self.store.index_dtype.itemsize + self.dtype.itemsize
        return counts

    def disk_bytes(self) -> np.ndarray:
        """Bytes of each coordinate's entries in the store's files (unaligned)."""
        return self.store.coord_nnz() * self.store.entry_bytes

    def scaled(self, scale, intercept=None):
        """A fresh reader of the same store whose coordinate i reads as scale[i] times the
        store's, with liblinear's ``intercept`` (its own counters at 0)."""
        r = self.reader
        reader = SparseReader(self.store, threads=r.threads, max_request=r.max_request, direct=r._direct_asked,
                              max_hole=r.max_hole)
        return SparseOnDisk(reader, buffer_bytes=self.buffer_bytes, scale=scale, intercept=intercept,
                            dtype=self.dtype)

    def close(self):
        """Close the reader and any background read. Idempotent."""
        if self._background is not None:
            self._background.shutdown(wait=True)
        self.reader.close()

    def buffer(self) -> ChunkBuffer:
        """The read buffer of gaps, A^T a and row stats, allocated on first use."""
        if self._buffer is None:
            self._buffer = ChunkBuffer.of_bytes(self.store, self.buffer_bytes, self.dtype)
        return self._buffer

    def _factors(self, coords):
        return None if self.scale is None else self.scale[coords]

    # ------------------------------------------------------------------ gaps ---
    @property
    def gap_chunk(self) -> int:
        """Coordinates a gap pass takes at once: its scratch (about GAP_SCRATCH bytes a coordinate)
        within one read buffer, whatever the number of coordinates asked."""
        return max(MIN_GAP_CHUNK, self.buffer_bytes // GAP_SCRATCH)

    def gaps(self, coords, a, z, off, mu, c, theta, out, out_s):
        """out[k], out_s[k] = gap and s = <A_i, u> of coordinate coords[k] at (a, z, off), a
        ``gap_chunk`` of coordinates at a time (each coordinate's gap is its own: the same values)."""
        coords = self.reader.check_coords(coords, "SparseOnDisk.gaps")
        step = self.gap_chunk
        for lo in range(0, coords.shape[0], step):
            self._gaps(coords[lo:lo + step], a, z, off, mu, c, theta, out[lo:lo + step], out_s[lo:lo + step])

    def _gaps(self, coords, a, z, off, mu, c, theta, out, out_s):
        if coords.shape[0] < 2 or bool((coords[1:] > coords[:-1]).all()):  # sorted, distinct: as DuHL asks
            u, inv = coords, None
        else:
            u, inv = np.unique(coords, return_inverse=True)
        raw = self._dots(u, a, z, mu, c, theta)
        s = raw if self.scale is None else raw * self.scale[u]  # exact for signs: y_i <x_i, z> = <y_i x_i, z>
        if self.intercept is not None:  # the constant's entry, last in the row as in RAM
            f = self.intercept if self.scale is None else self.intercept * self.scale[u]
            s = s + f * z[self.n_features]
        shift = c * off[0] * z.shape[0]
        if shift != 0.0:
            s = s - shift * mu[u]
        # the gap of each s by the same compiled kernel: rows of one entry s against z = [1], off = 0
        gap_u, s_u = (out, out_s) if inv is None else (np.empty(u.size), np.empty(u.size))
        start = time.perf_counter()
        cpu.gaps_sparse(np.arange(u.size + 1, dtype=np.int64), np.zeros(u.size, self.store.index_dtype), s,
                        np.arange(u.size, dtype=np.int64), u, a, _ONE, _NO_OFF, mu, c, theta, gap_u, s_u)
        self.compute_s += time.perf_counter() - start
        if inv is not None:
            out[:] = gap_u[inv]
            out_s[:] = s_u[inv]

    def _dots(self, u, a, z, mu, c, theta):
        """<x_i, z> of the store's coordinates ``u`` (sorted, distinct; no factor, no intercept),
        by the gap kernel at off = 0 chunk by chunk, summed over a coordinate's pieces."""
        s = np.zeros(u.shape[0])
        for ch in self.reader.chunks(u, self.buffer()):
            k = ch.size
            tmp_gap, tmp_s = np.empty(k), np.empty(k)
            start = time.perf_counter()
            cpu.gaps_sparse(ch.indptr, ch.indices, ch.values, ch.positions, ch.coords, a, z, _NO_OFF, mu, c, theta,
                            tmp_gap, tmp_s)
            whole = ch.first & ch.last
            if whole.all():
                s[ch.unique] = tmp_s
            else:  # a coordinate cut in pieces: its pieces' dots summed
                s[ch.unique[whole]] = tmp_s[whole]
                np.add.at(s, ch.unique[~whole], tmp_s[~whole])
            self.compute_s += time.perf_counter() - start
            self.compute_bytes += int((ch.indptr[ch.positions + 1] - ch.indptr[ch.positions]).sum()) \
                * self.store.entry_bytes
        return s

    # --------------------------------------------------------------- A^T a ---
    def dot_t(self, a):
        """A^T a in float64, reading only the coordinates with a_i != 0."""
        v = np.zeros(self.shape[1])
        support = np.flatnonzero(a)
        if not support.size:
            return v
        b = a[support] if self.scale is None else a[support] * self.scale[support]  # (a_i s_i) x_i
        for ch in self.reader.chunks(support, self.buffer()):
            start = time.perf_counter()
            _axpy_pieces(ch.indptr, ch.positions, ch.indices, ch.values, b[ch.unique], v)
            self.compute_s += time.perf_counter() - start
        if self.intercept is not None:
            v[self.n_features] = self.intercept * float(b.sum())
        return v

    def __matmul__(self, w):
        """A w: each coordinate's <A_i, w> (factors and intercept included), in float64, reading
        every coordinate once (a peer's margins, scored by our objective)."""
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (self.shape[1],):
            raise ValueError(f"SparseOnDisk @ w needs w of shape ({self.shape[1]},). Got {w.shape} instead.")
        n = self.shape[0]
        out = np.zeros(n)
        everything = np.arange(n)
        for ch in self.reader.chunks(everything, self.buffer()):
            part = np.empty(ch.size)
            _piece_dots(ch.indptr, ch.positions, ch.indices, ch.values, w, part)
            np.add.at(out, ch.unique, part)
        if self.scale is not None:
            out *= self.scale
        if self.intercept is not None:
            out += (self.intercept if self.scale is None else self.intercept * self.scale) * w[self.n_features]
        return out

    @property
    def T(self):
        """A^T as an operand of ``@``: ``A.T @ a`` is :meth:`dot_t` (reads the coordinates with a_i != 0)."""
        return _Transposed(self)

    def __getitem__(self, coords):
        """Coordinates ``coords`` (integers) in RAM, as a scipy csr_matrix (a small set: a peer's
        margin points)."""
        coords = np.atleast_1d(np.asarray(coords))
        if coords.dtype == bool:
            coords = np.flatnonzero(coords)
        return self.read_block(coords).csr(self.shape[1])

    # ---------------------------------------------------------- row stats ---
    def row_stats(self):
        """(sum, sum of squares) of every coordinate as delivered (factors and intercept
        included), in float64: a binary store's from its offsets (no read), else one pass."""
        n = self.shape[0]
        if self.store.binary:
            sums = self.store.coord_nnz().astype(np.float64)
            sq = sums.copy()
        else:
            sums, sq = np.zeros(n), np.zeros(n)
            everything = np.arange(n)
            for ch in self.reader.chunks(everything, self.buffer()):
                k = ch.size
                ps, pq = np.empty(k), np.empty(k)
                _piece_stats(ch.indptr, ch.positions, ch.values, ps, pq)
                np.add.at(sums, ch.unique, ps)
                np.add.at(sq, ch.unique, pq)
        if self.scale is not None:
            sums *= self.scale
            sq *= self.scale * self.scale
        if self.intercept is not None:
            f = self.intercept if self.scale is None else self.intercept * self.scale
            sums += f
            sq += f * f
        return sums, sq

    # -------------------------------------------------------------- blocks ---
    def new_block(self, max_rows, max_nnz) -> SparseBlock:
        """An empty block of this data's dtypes."""
        return SparseBlock(max_rows, max_nnz, self.store.index_dtype, self.dtype)

    def read_block(self, coords, block=None) -> SparseBlock:
        """Coordinates ``coords`` (in that order, repeats allowed) into ``block`` (a new one of
        just the size needed when None), factors and intercept applied; returns the block."""
        coords = self.reader.check_coords(coords, "SparseOnDisk.read_block")
        lengths = self.coord_nnz(coords)
        nnz = int(lengths.sum())
        if block is None:
            block = self.new_block(coords.size, nnz)
        elif not isinstance(block, SparseBlock) or block.max_rows < coords.size or block.max_nnz < nnz \
                or block._indices.dtype != self.store.index_dtype or block._data.dtype != self.dtype:
            got = (f"a block of {block.max_rows} rows, {block.max_nnz} entries, {block._indices.dtype} indices, "
                   f"{block._data.dtype} values" if isinstance(block, SparseBlock) else type(block).__name__)
            raise ValueError(f"The 'block' parameter of SparseOnDisk.read_block must hold {coords.size} rows and "
                             f"{nnz} entries of {self.store.index_dtype} indices and {self.dtype} values. "
                             f"Got {got} instead.")
        block.n_rows, block.nnz = coords.size, nnz
        block._indptr[0] = 0
        np.cumsum(lengths, out=block._indptr[1:coords.size + 1])
        block._coords[:coords.size] = coords
        if not coords.size:
            return block
        u, first_row, inv = np.unique(coords, return_index=True, return_inverse=True)
        dest_u = block._indptr[first_row]  # each distinct coordinate goes to its first row
        if self._block_buffer is None:
            self._block_buffer = ChunkBuffer.of_bytes(self.store, self.buffer_bytes, self.dtype)
        indptr = self.store.indptr
        for ch in self.reader.chunks(u, self._block_buffer):
            within = ch.starts - indptr[ch.coords]  # a piece's first entry within its coordinate
            f = np.ones(ch.size) if self.scale is None else self.scale[ch.coords]
            _gather_pieces(ch.indptr, ch.positions, ch.indices, ch.values, self.store.binary,
                           dest_u[ch.unique] + within, f, block._indices, block._data)
        if self.intercept is not None:  # the last entry of each row
            ends = block._indptr[first_row + 1] - 1
            block._indices[ends] = self.n_features
            block._data[ends] = self.intercept if self.scale is None else self.intercept * self.scale[u]
        repeats = np.flatnonzero(np.arange(coords.size) != first_row[inv])
        for r in repeats.tolist():  # a coordinate asked twice: copied from its first row
            f = first_row[inv[r]]
            src, dst = slice(block._indptr[f], block._indptr[f + 1]), slice(block._indptr[r], block._indptr[r + 1])
            block._indices[dst] = block._indices[src]
            block._data[dst] = block._data[src]
        return block

    def prefetch_block(self, coords, block=None) -> Future:
        """:meth:`read_block` in a background thread: a Future of the block (not to be touched,
        nor another block read, until it is done)."""
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="sparseblock")
        coords = np.array(coords, dtype=np.int64)
        return self._background.submit(self.read_block, coords, block)

    def load(self):
        """Every coordinate in RAM: a scipy csr_matrix (n_coords, n_cols) of the coordinates as
        delivered (factors and intercept applied)."""
        return self.read_block(np.arange(self.shape[0])).csr(self.shape[1])


class _Transposed:
    """``A.T`` of a SparseOnDisk: only ``@`` a vector."""

    def __init__(self, A):
        self.A = A
        self.shape = A.shape[::-1]

    def __matmul__(self, a):
        return self.A.dot_t(np.asarray(a, dtype=np.float64))
