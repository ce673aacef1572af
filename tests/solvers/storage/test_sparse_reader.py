"""Scattered coordinates of a sparse store read past the page cache (solvers.storage.sparse_reader):
every chunk equals scipy's rows, every byte is counted as the operating system counts it, and
nothing is left in the page cache.

Oracles: scipy.sparse rows of the matrix written; /proc/self/io read_bytes (the kernel's count of
bytes this process asked of a block device); mincore(2) on a mapping of the files (their pages in
the page cache). tmp_path must be on a disk (see test_reader.py's test_tmp_path_is_on_a_disk)."""

import ctypes
import mmap
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.storage.sparse_reader import ChunkBuffer, SparseReader, plan_chunk
from solvers.storage.sparse_store import write_sparse_store

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def os_read_bytes():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def resident_bytes(path):
    """Bytes of ``path`` in the page cache, by mincore(2)."""
    size = os.path.getsize(path)
    pages = -(-size // PAGE)
    vec = (ctypes.c_ubyte * max(1, pages))()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        try:
            assert _libc.mincore(addr, size, vec) == 0
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec[:pages]) * PAGE


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def matrix(seed=0, n=2000, d=300):
    """Scattered small rows, a heavy row (longer than a buffer half) and empty rows."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.03, format="lil", random_state=seed)
    X[7, :] = 1.0
    X[11, :] = 0.0
    X = X.tocsr()
    X.data = rng.standard_normal(X.nnz)
    return sp.vstack([X, sp.csr_matrix((1, d)), sp.random(800, d, density=1.0, format="csr", random_state=1)],
                     format="csr")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse")
    X = matrix()
    B = X.copy()
    B.data[:] = 1
    return {"valued": (write_sparse_store(d, X, name="V"), X), "binary": (write_sparse_store(d, B, name="B"), B),
            "int64": (write_sparse_store(d, X, name="L", index_dtype=np.int64), X)}


def selections(n, rng):
    return [np.array([0]), np.array([n - 1]), np.array([7]), np.array([11]), np.arange(n),
            np.unique(rng.choice(n, n // 4, replace=False)), np.arange(5, 60), np.array([3, 7, 2500, 2700])]


@pytest.mark.parametrize("kind", ["valued", "binary", "int64"])
@pytest.mark.parametrize("threads,max_request,hole", [(1, 2 * PAGE, 0), (4, 1 << 20, 0), (16, 2 << 20, 1 << 16)])
def test_chunks_equal_scipy_rows(stores, kind, threads, max_request, hole):
    """Every piece of every chunk is the scipy row's run of entries it claims (a coordinate longer
    than a half comes in pieces that concatenate to it); the buffer is smaller than the store."""
    store, X = stores[kind]
    rng = np.random.default_rng(threads)
    buffer = ChunkBuffer(store, 4 * store.block_entries)
    assert buffer.capacity < store.nnz
    with SparseReader(store, threads=threads, max_request=max_request, max_hole=hole) as reader:
        for sel in selections(X.shape[0], rng):
            got = {}
            for ch in reader.chunks(sel, buffer):
                for j in range(ch.size):
                    c = int(ch.coords[j])
                    assert sel[ch.unique[j]] == c
                    lo = ch.starts[j] - X.indptr[c]
                    a, b = ch.indptr[ch.positions[j]], ch.indptr[ch.positions[j] + 1]
                    n = b - a
                    want = slice(X.indptr[c] + lo, X.indptr[c] + lo + n)
                    assert np.array_equal(ch.indices[a:b], X.indices[want])
                    assert np.array_equal(ch.values[a:b], X.data[want])
                    got[c] = got.get(c, 0) + n
                    assert ch.first[j] == (lo == 0) and ch.last[j] == (lo + n == X.indptr[c + 1] - X.indptr[c])
            assert sorted(got) == sorted(sel.tolist())
            assert all(got[c] == X.indptr[c + 1] - X.indptr[c] for c in got)


def test_plans_keep_rows_in_order_inside_a_half():
    """Chunk after chunk: buffer positions increase within a chunk, runs fit the half, pieces fit
    their runs and their coordinates, and together they cover every wanted entry once."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 3000, 500)
    lengths[::7] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    coords = np.unique(rng.choice(500, 200, replace=False))
    cap, block = 8192, 1024
    plan = tuple(np.empty(64, np.int64) for _ in range(8))
    k, lo, covered, chunks = 0, -1, np.zeros(coords.size, np.int64), 0
    while k < coords.size:
        n_p, n_r, k, lo = plan_chunk(indptr, coords, k, lo, block, cap, cap - 2 * block, 0, *plan)
        p_coord, p_lo, p_hi, p_start, p_end, r_lo, r_hi, r_pos = plan
        assert n_p > 0 and np.all(p_hi[:n_p] - p_lo[:n_p] == p_end[:n_p] - p_start[:n_p])
        assert np.all(p_start[1:n_p] >= p_end[:n_p - 1]) and np.all(p_hi[:n_p] - p_lo[:n_p] <= cap - 2 * block)
        assert np.all(r_pos[:n_r] + r_hi[:n_r] - r_lo[:n_r] <= cap) and np.all(r_lo[:n_r] % block == 0)
        owner = coords[p_coord[:n_p]]
        assert np.all(p_lo[:n_p] >= indptr[owner]) and np.all(p_hi[:n_p] <= indptr[owner + 1])
        np.add.at(covered, p_coord[:n_p], p_hi[:n_p] - p_lo[:n_p])
        chunks += 1
    assert chunks > 1 and np.array_equal(covered, indptr[coords + 1] - indptr[coords])


def test_bytes_counted_as_the_os_counts_them_and_no_page_left(stores):
    """O_DIRECT: the reader's bytes_read equals /proc/self/io's read_bytes, and mincore finds none
    of the files' pages in the page cache after."""
    store, X = stores["valued"]
    files = [store.path("indices"), store.path("values")]
    for f in files:
        drop_cache(f)
    rng = np.random.default_rng(0)
    buffer = ChunkBuffer(store, 4 * store.block_entries)
    with SparseReader(store) as reader:
        assert reader.direct, reader
        before = os_read_bytes()
        for sel in selections(X.shape[0], rng):
            for _ in reader.chunks(sel, buffer):
                pass
        assert reader.bytes_read > 0 and os_read_bytes() - before == reader.bytes_read
        assert reader.useful_bytes <= reader.bytes_read and reader.read_s > 0 and reader.requests > 0
    assert all(resident_bytes(f) == 0 for f in files)


def test_buffered_reads_leave_no_page_behind(stores):
    """Buffered (direct=False), four threads, chunks read ahead: requests that share a page run
    at once, and still mincore finds none of the files' pages in the page cache after."""
    store, X = stores["valued"]
    files = [store.path("indices"), store.path("values")]
    rng = np.random.default_rng(0)
    buffer = ChunkBuffer(store, 4 * store.block_entries)
    for _ in range(20):
        for f in files:
            drop_cache(f)
        with SparseReader(store, direct=False, threads=4) as reader:
            assert not reader.direct, reader
            for sel in selections(X.shape[0], rng):
                for _ in reader.chunks(sel, buffer):
                    pass
            assert reader.bytes_read > 0
        assert [resident_bytes(f) for f in files] == [0, 0]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm (tmpfs)")
def test_buffered_reads_on_tmpfs_drop_their_pages():
    """tmpfs is RAM: read buffered (no O_DIRECT), the same chunks; pickled copies reopen the store."""
    import tempfile

    X = matrix(n=300)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        store = write_sparse_store(d, X)
        with SparseReader(store) as reader:
            assert not reader.direct
            copy = pickle.loads(pickle.dumps(reader))
            buffer = ChunkBuffer(store, 4 * store.block_entries)
            total = sum(int(ch.indptr[ch.positions + 1].sum() - ch.indptr[ch.positions].sum())
                        for ch in copy.chunks(np.arange(X.shape[0]), buffer))
            assert total == X.nnz and copy.bytes_read >= X.nnz * 12
            copy.close()


def test_stream_reads_everything_in_order(stores):
    store, X = stores["valued"]
    buffer = ChunkBuffer(store, 4 * store.block_entries)
    with SparseReader(store) as reader:
        parts = [(first, idx.copy(), val.copy()) for first, idx, val in reader.stream(buffer, 5, X.nnz - 3)]
    assert parts[0][0] == 5
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), X.indices[5:X.nnz - 3])
    np.testing.assert_array_equal(np.concatenate([p[2] for p in parts]), X.data[5:X.nnz - 3])


def test_bad_coordinates_in_one_line(stores):
    store, X = stores["valued"]
    reader = SparseReader(store)
    with pytest.raises(IndexError, match=r"'coords' parameter of here must hold coordinates in \[0, 2801\)"):
        reader.check_coords([0, 5000], "here")
    with pytest.raises(ValueError, match="sorted and distinct"):
        list(reader.chunks(np.array([3, 1]), ChunkBuffer(store, 4096)))
    with pytest.raises(ValueError, match="'threads' parameter of SparseReader must be an int >= 1. Got 0"):
        SparseReader(store, threads=0)
    reader.close()
    with pytest.raises(ValueError, match="is closed"):
        reader.check_coords([0], "here")
