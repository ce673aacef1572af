"""The disk tier (solvers.storage.reader): every read equals np.load, every byte is counted as the
operating system counts it, and nothing is left in the page cache.

Oracles: np.load of the same file; /proc/self/io read_bytes (the kernel's count of bytes this
process asked of a block device); mincore(2) on a mapping of the file (the kernel's count of
its pages in the page cache; a mapping does not fault pages in); hashlib/xxhash of the array.
pytest's tmp_path must be on a disk file system (tmpfs is RAM: no O_DIRECT, no disk reads):
test_tmp_path_is_on_a_disk says which file system it is, by df, and fails on tmpfs.
"""

import ctypes
import hashlib
import mmap
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash

from solvers.storage import files as disk_files
from solvers.storage.reader import DiskMatrix, ReadStats, aligned_empty, write_coordinate_major

ROOT = Path(__file__).resolve().parents[3]
PAGE = mmap.PAGESIZE
SHM = Path("/dev/shm")


# ---------------------------------------------------------------- oracles ---
def os_read_bytes():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))


def df_fstype(path):
    """The file system type by coreutils' df: independent of the module's /proc/self/mounts."""
    out = subprocess.run(["df", "--output=fstype", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_bytes(path):
    """Bytes of ``path`` in the page cache, by mincore(2)."""
    size = os.path.getsize(path)
    pages = -(-size // PAGE)
    vec = (ctypes.c_ubyte * max(1, pages))()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vec[:pages]) * PAGE


def drop_cache(path):
    """Write ``path`` back and drop its pages, so the next read goes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert resident_bytes(path) == 0


def as_coordinates(path):
    """np.load's view of the file as (n_coords, length): a Fortran file's columns."""
    a = np.load(path)
    return a.T if np.isfortran(a) else a


# ----------------------------------------------------------------- stores ---
STORES = ["np.save Fortran", "np.save C odd", "np.save float32 odd", "writer Fortran", "writer C odd"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """{name: (path, coordinate-major matrix)}: np.save's 128-byte header (every read
    through the bounce buffer) and write_coordinate_major's 4096-byte one (rows of
    4096 * 8 bytes: straight into aligned rows; 1001 * 8: bounce again)."""
    d = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(0)
    A, B, C = rng.standard_normal((24, 4096)), rng.standard_normal((37, 1001)), rng.standard_normal((13, 333))
    out = {}
    np.save(d / "a.npy", np.asfortranarray(A.T))
    out["np.save Fortran"] = (d / "a.npy", A)
    np.save(d / "b.npy", B)
    out["np.save C odd"] = (d / "b.npy", B)
    np.save(d / "c.npy", C.astype(np.float32))
    out["np.save float32 odd"] = (d / "c.npy", C.astype(np.float32))
    write_coordinate_major(d / "wa.npy", 24, 4096, [A[:5], A[5:5], A[5:]], fortran=True)
    out["writer Fortran"] = (d / "wa.npy", A)
    write_coordinate_major(d / "wb.npy", 37, 1001, (B[i:i + 10] for i in range(0, 37, 10)))
    out["writer C odd"] = (d / "wb.npy", B)
    for path, M in out.values():
        assert np.array_equal(as_coordinates(path), M)  # the oracle reads what we meant to store
    return out


def selections(p, rng):
    """Empty, single, unsorted, everything, runs of adjacent coordinates, repeats."""
    starts = rng.choice(p - 4, 3, replace=False)
    return [np.zeros(0, np.int64), np.array([0]), np.array([p - 1]), np.array([p - 1, 0, 5]),
            np.arange(p), np.arange(p)[::-1], rng.permutation(p)[: p // 4],
            np.concatenate([np.arange(s, s + 4) for s in starts]), np.array([3, 3, 4])]


def test_tmp_path_is_on_a_disk(tmp_path):
    kind = df_fstype(tmp_path)
    assert kind not in ("tmpfs", "ramfs"), (
        f"tmp_path {tmp_path} is on {kind} (RAM): the O_DIRECT, /proc/self/io and page-cache tests need a disk; "
        "run pytest with --basetemp on one")
    np.save(tmp_path / "x.npy", np.zeros((2, 512)))
    with DiskMatrix(tmp_path / "x.npy") as m:
        assert m.fs_type == kind and m.direct, m


# --------------------------------------------------------------- exactness ---
@pytest.mark.parametrize("threads,max_request", [(1, 8 << 20), (4, 8 << 20), (3, 2 * PAGE), (16, 2 << 20)])
@pytest.mark.parametrize("store", STORES)
def test_reads_equal_np_load(stores, store, threads, max_request):
    """read_into, prefetch with scattered destination rows, and chunks; into aligned rows
    and into rows that are not (those go through the bounce buffer). max_request of two
    pages cuts a 32 KB coordinate into pieces."""
    path, M = stores[store]
    rng = np.random.default_rng(threads)
    with DiskMatrix(path, threads=threads, max_request=max_request) as m:
        assert m.shape == M.shape and m.dtype == M.dtype and m.ndim == 2 and m.direct
        assert m.nbytes == M.nbytes and m.row_bytes == M.shape[1] * M.itemsize
        k = M.shape[0] + 3
        unaligned = np.empty(k * M.shape[1] + 1, M.dtype)[1:].reshape(k, M.shape[1])
        for out in (aligned_empty((k, M.shape[1]), M.dtype), unaligned):
            for sel in selections(M.shape[0], rng):
                out[:] = np.nan
                st = m.read_into(sel, out)
                assert isinstance(st, ReadStats) and st.useful_bytes == sel.size * m.row_bytes
                np.testing.assert_array_equal(out[:sel.size], M[sel])
                assert np.isnan(out[sel.size:]).all()  # nothing written past the coordinates
                rows = rng.permutation(k)[:sel.size]
                out[:] = np.nan
                m.prefetch(sel, out, rows).result()
                np.testing.assert_array_equal(out[rows], M[sel])
        buffer = aligned_empty((6, M.shape[1]), M.dtype)
        for sel in selections(M.shape[0], rng):
            got = list(m.chunks(sel, buffer))
            assert all(c.size <= 3 for c, _ in got)  # half the buffer each
            assert np.array_equal(np.concatenate([c for c, _ in got] + [np.zeros(0, int)]), sel)
            for (c, view), (c2, view2) in zip(got, got[1:]):
                assert not np.shares_memory(view, view2)  # the two halves alternate
            for c, view in m.chunks(sel, buffer):
                np.testing.assert_array_equal(view, M[c])  # valid while it is the current chunk


def test_chunks_keep_the_next_read_in_flight_while_one_is_awaited(stores, monkeypatch):
    """The next chunk's read starts before the current one is awaited (the disk never waits for
    a read to be set up), into the half the caller is done with: every chunk still equals
    np.load's rows, and two reads are in flight at once."""
    path, M = stores["writer C odd"]
    m = DiskMatrix(path, threads=2)
    seen, slow = [], DiskMatrix._read

    def read(self, q):  # a slow disk: the current read is still going when the next one starts
        time.sleep(0.002)
        return slow(self, q)

    monkeypatch.setattr(DiskMatrix, "_read", read)
    start = m._start

    def counted(*args):
        future = start(*args)
        seen.append(m._in_flight)
        return future

    m._start = counted
    buffer = aligned_empty((4, M.shape[1]), M.dtype)
    for c, view in m.chunks(np.arange(M.shape[0]), buffer):
        np.testing.assert_array_equal(view, M[c])
        view[:] = np.nan  # the caller may scribble on its chunk: the next read goes elsewhere
    assert len(seen) == 19 and max(seen) == 2
    m.close()


def test_concurrent_prefetches_and_counters(stores):
    path, M = stores["writer C odd"]
    with DiskMatrix(path, threads=3) as m:
        sels = [np.arange(i, M.shape[0], 4) for i in range(4)]
        outs = [aligned_empty((s.size, M.shape[1])) for s in sels]
        start = time.perf_counter()
        stats = [f.result() for f in [m.prefetch(s, o) for s, o in zip(sels, outs)]]
        wall = time.perf_counter() - start
        for s, o in zip(sels, outs):
            np.testing.assert_array_equal(o, M[s])
        assert m.bytes_read == sum(s.bytes_read for s in stats)
        assert m.useful_bytes == M.nbytes
        # the calls overlap: read_s is the time any of them was in flight, once (not their sum)
        assert max(s.seconds for s in stats) <= m.read_s <= min(wall, sum(s.seconds for s in stats)) + 1e-9
        m.read_into(sels[0], outs[0])  # one call alone: its own seconds
        before = m.read_s
        one = m.read_into(sels[1], outs[1])
        assert m.read_s - before == pytest.approx(one.seconds)



class _SlowInWorkers:
    """A lock that makes the reader's threads wait before taking it (a busy machine's GIL)."""

    def __init__(self, wait):
        self.wait, self.lock, self.main = wait, threading.Lock(), threading.main_thread()

    def __enter__(self):
        if threading.current_thread() is not self.main:
            time.sleep(self.wait)
        self.lock.acquire()

    def __exit__(self, *exc):
        self.lock.release()


def test_read_s_counts_no_idle_stretch_between_calls(stores):
    """A call that ends while the next one starts: its end is read under the lock, so the
    stretch between a call's last read and the next call's start is not counted as busy
    (a CI run counted it: read_s exceeded the calls' summed seconds by 40 us)."""
    path, M = stores["writer C odd"]
    with DiskMatrix(path, threads=1) as m:
        m._lock = _SlowInWorkers(0.05)
        outs = [aligned_empty((1, M.shape[1])) for _ in range(2)]
        start = time.perf_counter()
        first = m.prefetch([0], outs[0])
        time.sleep(0.02)  # the first call has read its row and waits for the lock
        second = m.prefetch([1], outs[1])
        stats = [first.result(), second.result()]
        wall = time.perf_counter() - start
        assert max(s.seconds for s in stats) <= m.read_s <= min(wall, sum(s.seconds for s in stats)) + 1e-9

# ------------------------------------------------------ accounting, cache ---
@pytest.mark.parametrize("direct,threads", [(None, 4), (None, 16), (False, 1), (False, 4)])
@pytest.mark.parametrize("store", STORES)
def test_bytes_read_is_what_the_os_counts(stores, store, direct, threads):
    """O_DIRECT: the OS counts exactly bytes_read; it exceeds the coordinates' bytes only by
    the alignment padding (at most one block at each end of a request; none for aligned
    rows). Buffered: whole pages, exact with one thread (each request reads its pages,
    then drops them). With several threads, requests that share a page race: the OS may
    read it once for both (counting less), or one request's drop may evict it between
    another's read-in and its copy, which then reads it again (counting more). So each
    page is read at least once, and at most once more for every pair of coordinates that
    share it (pages_read_bounds: counted from the file's layout, not from the reader)."""
    path, M = stores[store]
    rng = np.random.default_rng(7)
    with DiskMatrix(path, threads=threads, direct=direct) as m:
        assert m.direct == (direct is None)
        out = aligned_empty((M.shape[0], M.shape[1]), M.dtype)
        total = 0
        for sel in selections(M.shape[0], rng)[1:]:
            drop_cache(path)
            before = os_read_bytes()
            st = m.read_into(sel, out)
            counted = os_read_bytes() - before
            total += st.bytes_read
            if m.direct or threads == 1:
                assert counted == st.bytes_read, (sel, counted, st)
            else:
                least, extra = pages_read_bounds(sel, m.offset, m.row_bytes)
                assert least <= counted <= st.bytes_read + extra, (sel, counted, least, extra, st)
            assert st.bytes_read <= st.useful_bytes + st.requests * 2 * PAGE
            if m.direct and m.offset % PAGE == 0 and m.row_bytes % 512 == 0:
                assert st.bytes_read == st.useful_bytes  # zero copy: no padding at all
        assert m.bytes_read == total


def pages_read_bounds(sel, offset, row_bytes):
    """(bytes of the distinct pages the coordinates ``sel`` lie on, bytes of the re-reads that
    concurrent requests can cause): a page that k coordinates share can be read again at most
    k(k-1)/2 times, once per pair (of two requests, only the one that finishes second can find
    it evicted by the other's drop)."""
    first = (offset + np.asarray(sel, np.int64) * row_bytes) // PAGE
    last = (offset + (np.asarray(sel, np.int64) + 1) * row_bytes - 1) // PAGE
    pages = np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last)]) if len(sel) else np.zeros(0, np.int64)
    _, k = np.unique(pages, return_counts=True)
    return k.size * PAGE, int((k * (k - 1) // 2).sum()) * PAGE


def spans(sel, hole_rows):
    """Rows of the file a reader through holes of up to ``hole_rows`` rows reads for ``sel``:
    the sorted distinct coordinates, merged where at most hole_rows lie between two, and a
    repeated coordinate once more (each request reads a row once)."""
    c = np.unique(sel)
    cuts = np.flatnonzero(np.diff(c) > hole_rows + 1) + 1
    return sum(int(run[-1] - run[0] + 1) for run in np.split(c, cuts)) + sel.size - c.size if c.size else 0


@pytest.mark.parametrize("direct,threads", [(None, 4), (False, 1)])
@pytest.mark.parametrize("store", STORES)
def test_reading_through_holes(stores, store, direct, threads):
    """max_hole: the rows equal np.load's (scaled too), nothing written outside them; the OS
    counts exactly bytes_read (one thread when buffered), which is the merged spans' rows
    (np.unique and a split: an independent count) plus alignment padding only, holes
    included; fewer requests than without holes; no page left in the cache."""
    path, M = stores[store]
    rng = np.random.default_rng(3)
    row = M.shape[1] * M.itemsize
    scale = np.where(rng.random(M.shape[0]) < 0.5, -1.0, 1.0).astype(M.dtype)
    for hole_rows, max_request in ((1, 8 << 20), (3, 8 << 20), (3, 4 * row)):
        kw = dict(threads=threads, direct=direct, max_request=max(PAGE, max_request))
        with DiskMatrix(path, max_hole=hole_rows * row + row - 1, **kw) as m, \
                DiskMatrix(path, max_hole=0, **kw) as plain, DiskMatrix(path, max_hole=hole_rows * row, scale=scale,
                                                                        **kw) as scaled:
            assert "holes up to" in repr(m) and m.max_hole == hole_rows * row + row - 1
            k = M.shape[0]
            out = aligned_empty((k + 2, M.shape[1]), M.dtype)
            sels = selections(M.shape[0], rng)[1:] + [np.arange(0, M.shape[0], 2), np.arange(1, M.shape[0], 4),
                                                      rng.choice(M.shape[0], M.shape[0] // 2, replace=False)]
            for sel in sels:
                drop_cache(path)
                out[:] = np.nan
                rows = rng.permutation(k + 2)[:sel.size]
                before = os_read_bytes()
                st = m.read_into(sel, out, rows)
                counted = os_read_bytes() - before
                np.testing.assert_array_equal(out[rows], M[sel])
                rest = np.ones(k + 2, bool)
                rest[rows] = False
                assert np.isnan(out[rest]).all()  # the holes went elsewhere
                assert counted == st.bytes_read, (sel, counted, st)
                wanted = spans(sel, hole_rows) * row  # a short max_request cuts some holes: fewer
                least = wanted if max_request == 8 << 20 else st.useful_bytes
                assert least <= st.bytes_read <= wanted + st.requests * 2 * (m.align or PAGE)
                if m.direct and m.offset % PAGE == 0 and row % 512 == 0 and max_request == 8 << 20:
                    assert st.bytes_read == wanted  # aligned rows: the spans exactly
                assert st.useful_bytes == sel.size * row
                assert st.requests <= plain.read_into(sel, out).requests
                out[:] = np.nan
                scaled.prefetch(sel, out, rows).result()
                np.testing.assert_array_equal(out[rows], M[sel] * scale[sel, None])
            assert resident_bytes(path) == 0


@pytest.mark.parametrize("direct", [None, False])
def test_no_page_cache_left_behind(stores, direct):
    for path, M in stores.values():
        drop_cache(path)
        with DiskMatrix(path, direct=direct, threads=4) as m:
            out = aligned_empty((6, M.shape[1]), M.dtype)
            for sel in selections(M.shape[0], np.random.default_rng(1)):
                m.read_into(sel[:6], out)
                for _ in m.chunks(sel, out):
                    pass
        assert resident_bytes(path) == 0, (path, direct)
    with open(path, "rb") as f:  # the oracle sees pages when there are some
        f.read()
    assert resident_bytes(path) >= os.path.getsize(path) - PAGE


def test_tmpfs_falls_back_to_buffered():
    assert df_fstype(SHM) == "tmpfs", f"{SHM} is where this test expects a tmpfs"
    A = np.random.default_rng(5).standard_normal((20, 515))
    path = SHM / f"test_disk_{os.getpid()}.npy"
    try:
        np.save(path, np.asfortranarray(A.T))
        with DiskMatrix(path) as m:
            assert not m.direct and m.fs_type == "tmpfs" and "buffered" in repr(m) and "tmpfs" in repr(m)
            out = aligned_empty((3, 515))
            m.read_into([3, 1, 19], out)
            np.testing.assert_array_equal(out, A[[3, 1, 19]])
        with pytest.raises(OSError, match="O_DIRECT is not available.*tmpfs"):
            DiskMatrix(path, direct=True)
        write_coordinate_major(path, 20, 515, [A], fortran=True)  # buffered writes there too
        np.testing.assert_array_equal(np.load(path), A.T)
    finally:
        path.unlink(missing_ok=True)


def test_pickle_round_trip(stores):
    path, M = stores["np.save C odd"]
    with DiskMatrix(path, threads=2, max_request=1 << 16, direct=None, max_hole=3 * PAGE) as m:
        m.read_into([1, 2], aligned_empty((2, M.shape[1])))
        assert m.bytes_read > 0
        m2 = pickle.loads(pickle.dumps(m))
    with m2:
        assert (m2.path, m2.threads, m2.max_request, m2.direct, m2.shape, m2.max_hole) == \
            (str(path), 2, 1 << 16, True, M.shape, 3 * PAGE)
        assert (m2.bytes_read, m2.useful_bytes, m2.read_s) == (0, 0, 0.0)
        out = aligned_empty((3, M.shape[1]))
        m2.read_into([36, 0, 17], out)
        np.testing.assert_array_equal(out, M[[36, 0, 17]])
        assert str(path) in repr(m2) and "O_DIRECT" in repr(m2) and "(37, 1001)" in repr(m2)


# ------------------------------------------------------------------ writer ---
@pytest.mark.parametrize("buffered", [False, True])
@pytest.mark.parametrize("fortran", [False, True])
def test_writer_equals_blocks_and_hashes_data(tmp_path, monkeypatch, fortran, buffered):
    """Staging buffer of three pages: the data crosses many flushes. ``buffered``: the
    writer is told tmp_path's file system is RAM, so it takes the path for file systems
    that refuse O_DIRECT (fdatasync + DONTNEED), here on a disk where the cache shows."""
    monkeypatch.setattr(disk_files, "STAGE_BYTES", 3 * PAGE)
    if buffered:
        monkeypatch.setattr(disk_files, "RAM_FILE_SYSTEMS", {df_fstype(tmp_path)})
    A = np.random.default_rng(2).standard_normal((29, 777)).astype(np.float32)
    path = tmp_path / "w.npy"
    h, x = hashlib.sha256(), xxhash.xxh3_128()

    class Both:
        def update(self, b):
            h.update(b)
            x.update(b)

    def blocks():  # while writing, the page cache holds no more than the staging buffer's worth
        for i in range(0, 29, 4):
            tmp = tmp_path / f"w.npy.tmp-{os.getpid()}"
            assert i == 0 or resident_bytes(tmp) <= 3 * PAGE
            yield A[i:i + 4].astype(np.float64)

    n = write_coordinate_major(path, 29, 777, blocks(), np.float32, hasher=Both(), fortran=fortran)
    assert n == os.path.getsize(path) == 4096 + A.nbytes
    assert resident_bytes(path) == 0  # written past the page cache (before np.load reads it in)
    got = np.load(path)
    assert got.dtype == np.float32 and np.isfortran(got) == fortran
    np.testing.assert_array_equal(got, A.T if fortran else A)
    assert h.digest() == hashlib.sha256(A.tobytes()).digest()
    assert x.digest() == xxhash.xxh3_128(A.tobytes()).digest()
    assert np.load(path, mmap_mode="r").offset == 4096  # the data is aligned
    assert [p.name for p in tmp_path.iterdir()] == ["w.npy"]  # no temporary file left


@pytest.mark.parametrize("blocks,message", [
    (lambda A: [A[:3]], "must hold 5 coordinates. Got 3"),
    (lambda A: [A, A[:1]], "must hold 5 coordinates. Got at least 6"),
    (lambda A: [A[:, :7]], r"must yield \(k, 8\) arrays. Got shape \(5, 7\)"),
])
def test_writer_refuses_a_wrong_total(tmp_path, blocks, message):
    path = tmp_path / "w.npy"
    A = np.ones((5, 8))
    with pytest.raises(ValueError, match=message):
        write_coordinate_major(path, 5, 8, blocks(A))
    assert list(tmp_path.iterdir()) == []


def test_a_killed_writer_leaves_no_file(tmp_path):
    path = tmp_path / "x.npy"
    code = textwrap.dedent(f"""
        import sys, time, numpy as np
        from solvers.storage.reader import write_coordinate_major
        def blocks():
            for i in range(4):
                yield np.full((16, 4096), float(i))
            print("half", flush=True)
            time.sleep(60)
            yield from (np.zeros((16, 4096)) for _ in range(4))
        write_coordinate_major({str(path)!r}, 128, 4096, blocks())
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "half"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == [f"x.npy.tmp-{proc.pid}"]  # the leftover says what it is


# ------------------------------------------------------------------ errors ---
def test_errors_name_the_problem(tmp_path, stores):
    np.save(tmp_path / "v.npy", np.zeros(5))
    with pytest.raises(ValueError, match=r"v.npy holds a float64 array of shape \(5,\)"):
        DiskMatrix(tmp_path / "v.npy")
    (tmp_path / "t.npy").write_text("not an array")
    with pytest.raises(ValueError, match="t.npy is not an .npy file"):
        DiskMatrix(tmp_path / "t.npy")
    np.save(tmp_path / "cut.npy", np.zeros((4, 512)))
    os.truncate(tmp_path / "cut.npy", 128 + 3 * 4096)
    with pytest.raises(ValueError, match="cut.npy is truncated"):
        DiskMatrix(tmp_path / "cut.npy")
    with pytest.raises(ValueError, match="'threads' parameter of DiskMatrix"):
        DiskMatrix(stores["np.save C odd"][0], threads=0)
    with pytest.raises(ValueError, match=r"'max_hole' parameter of DiskMatrix must be an int >= 0 \(bytes\). Got -1"):
        DiskMatrix(stores["np.save C odd"][0], max_hole=-1)
    m = DiskMatrix(stores["np.save C odd"][0])
    ok = aligned_empty((4, 1001))
    with pytest.raises(IndexError, match=r"coordinates in \[0, 37\). Got 37 instead"):
        m.read_into([0, 37], ok)
    with pytest.raises(IndexError, match=r"in \[0, 37\). Got -1"):
        m.prefetch([-1], ok)
    with pytest.raises(ValueError, match="'coords' parameter .* 1-D array of integers. Got a 1-D float64"):
        m.read_into([1.0], ok)
    with pytest.raises(ValueError, match=r"C-contiguous \(k, 1001\) float64 array. Got a \(4, 1000\) float64"):
        m.read_into([1], np.zeros((4, 1000)))
    with pytest.raises(ValueError, match=r"Got a \(4, 1001\) float32 array"):
        m.read_into([1], np.zeros((4, 1001), np.float32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        m.read_into([1], np.zeros((1001, 4)).T)
    with pytest.raises(ValueError, match="has 4 rows; 5 coordinates"):
        m.read_into([1, 2, 3, 4, 5], ok)
    with pytest.raises(IndexError, match="'rows' parameter .* distinct rows of out"):
        m.read_into([1, 2], ok, rows=[0, 0])
    with pytest.raises(ValueError, match="'buffer' parameter of DiskMatrix.chunks .* k >= 2"):
        m.chunks([1], ok[:1])
    m.close()
    m.close()
    with pytest.raises(ValueError, match="is closed"):
        m.read_into([1], ok)


def test_the_solvers_reader_puts_more_requests_in_flight_for_small_coordinates(tmp_path, stores):
    """OnDisk's reader: 16 threads of 2 MB requests for coordinates under 128 KB (rows of 8008
    bytes), DiskMatrix's 4 of 8 MB for longer ones (Fortran columns of 16,400 float64: 131,200
    bytes); both read what np.load reads."""
    from solvers.storage.on_disk import OnDisk
    path, M = stores["np.save C odd"]
    small = OnDisk(path).matrix
    assert (small.threads, small.max_request, small.row_bytes) == (16, 2 << 20, 8008)
    X = np.random.default_rng(2).standard_normal((16400, 2))
    np.save(tmp_path / "long.npy", np.asfortranarray(X))
    long = OnDisk(tmp_path / "long.npy")
    assert (long.matrix.threads, long.matrix.max_request, long.matrix.row_bytes) == (4, 8 << 20, 131200)
    np.testing.assert_array_equal(long.load(), X.T)
    out = aligned_empty((3, M.shape[1]))
    small.read_into([36, 0, 17], out)
    np.testing.assert_array_equal(out, M[[36, 0, 17]])
    small.close()
    long.matrix.close()
