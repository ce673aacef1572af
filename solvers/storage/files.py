"""The files of the disk tier: the aligned coordinate-major .npy, written without holding it in RAM.

:func:`write_coordinate_major` writes a plain .npy whose header is padded to 4096 bytes, so
every coordinate starts at an offset O_DIRECT can read from (``np.save``'s 128-byte header
puts them all off the 512-byte alignment, which costs :class:`solvers.storage.reader.DiskMatrix`
a copy through a bounce buffer). Also the small pieces the reader shares: page-aligned
buffers, the file-system type, an .npy header read without dragging data into the page cache,
the request type and the preadv loop.

NumPy and the standard library only; Linux (O_DIRECT, posix_fadvise, /proc/self/mounts).
"""

import io
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field

import numpy as np

__all__ = ["AppendFile", "Request", "aligned_empty", "aligned_width", "fs_type", "fsync_dir", "open_direct",
           "preadv_all", "read_npy_header", "release", "write_coordinate_major"]

PAGE = mmap.PAGESIZE
RAM_FILE_SYSTEMS = {"tmpfs", "ramfs", "hugetlbfs"}  # O_DIRECT "works" there, but the data is RAM
HEADER_BYTES = 4096  # write_coordinate_major's data offset: aligned for any O_DIRECT block size
STAGE_BYTES = 8 << 20  # write_coordinate_major's staging buffer: one write per 8 MB
MAX_IOV = 512  # buffers per preadv, well under Linux's IOV_MAX of 1024
MAX_PAD = 1 / 8  # aligned_width pads a coordinate by at most this share of its bytes


def aligned_width(length, itemsize=8) -> int:
    """The values per coordinate to store so that every coordinate starts on an O_DIRECT boundary:
    ``length`` rounded up to a multiple of 4096 bytes (any disk's block), else of 512 bytes (a
    disk with 512-byte blocks), whichever adds at most MAX_PAD of the coordinate; else
    ``length`` (a short coordinate is not worth padding). With aligned coordinates DiskMatrix
    reads straight into the caller's rows, with no bounce copy: a 40,000-byte sample stored in
    40,960 read 1.16x faster alone, 1.3-1.5x beside two compute threads
    (benchmarks.disk_reads; the copy is CPU the 2-core machine lacks)."""
    length, itemsize = int(length), int(itemsize)
    for block in (4096, 512):
        if block % itemsize:
            continue
        padded = -(-length * itemsize // block) * block // itemsize
        if (padded - length) <= MAX_PAD * length:
            return padded
    return length

def aligned_empty(shape, dtype=np.float64, align=4096) -> np.ndarray:
    """``np.empty`` whose data starts at a multiple of ``align`` (an anonymous mmap is page
    aligned), so O_DIRECT reads straight into it."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if align <= 0 or align & (align - 1) or align > PAGE:
        raise ValueError(f"The 'align' parameter of aligned_empty must be a power of 2 up to {PAGE}. "
                         f"Got {align} instead.")
    buf = mmap.mmap(-1, max(PAGE, -(-nbytes // PAGE) * PAGE))
    return np.frombuffer(buf, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape)


def open_direct(path):
    """(fd, alignment) for O_DIRECT reads of ``path``, or (None, None) where refused. The
    alignment is probed (512 bytes on a disk with 512-byte logical blocks, 4096 on others)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return None, None
    probe = mmap.mmap(-1, 2 * PAGE)
    for align in (512, 1024, 2048, 4096):
        try:
            os.preadv(fd, [memoryview(probe)[align:2 * align]], align)
            return fd, align
        except OSError:
            continue
    os.close(fd)
    return None, None


def fs_type(path) -> str:
    """The type of the file system holding ``path``: the longest mount point that prefixes it."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, mnt, typ = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


def read_npy_header(path):
    """(shape, fortran_order, dtype, data offset, file size) of an .npy. Read with readahead off and
    the pages dropped after: a plain read of the header makes the kernel read ahead
    megabytes of data into the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a file")
        head, size = os.pread(fd, 1 << 16, 0), st.st_size
        os.posix_fadvise(fd, 0, 1 << 16, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f, max_header_size=1 << 16)
    except ValueError as e:
        raise ValueError(f"{path} is not an .npy file ({e})") from None
    return tuple(shape), bool(fortran), np.dtype(dtype), f.tell(), size


def npy_header(shape, dtype, fortran=False, size=HEADER_BYTES) -> bytes:
    """An .npy (version 1.0) header padded with spaces to ``size`` bytes: still a valid .npy
    (np.load reads headers up to 10000 bytes), its data aligned for O_DIRECT."""
    d = repr({"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": bool(fortran),
              "shape": tuple(int(s) for s in shape)}).encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", size - 10) + d.ljust(size - 11) + b"\n"


def write_coordinate_major(path, n_coords, length, blocks, dtype=np.float64, *, hasher=None, fortran=False) -> int:
    """Write a C-order (n_coords, length) .npy (``fortran=True``: the same bytes as a
    Fortran-order (length, n_coords) one) from an iterable of (k, length) blocks, in order,
    never holding the whole array: the header padded to 4096 bytes, then O_DIRECT writes
    from an aligned staging buffer (buffered writes + fdatasync + DONTNEED where O_DIRECT is
    refused, so the page cache keeps nothing either way). ``hasher`` (hashlib-like) gets
    every data byte. Written to ``path + '.tmp-<pid>'`` and renamed at the end, so a crash
    never leaves a file at ``path`` that looks complete. Returns the bytes written."""
    dtype = np.dtype(dtype)
    n_coords, length = int(n_coords), int(length)
    header = npy_header((length, n_coords) if fortran else (n_coords, length), dtype, fortran)
    data_bytes = n_coords * length * dtype.itemsize
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    direct = fs_type(os.path.dirname(os.path.abspath(path))) not in RAM_FILE_SYSTEMS
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    except OSError:
        direct, fd = False, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stage = aligned_empty((STAGE_BYTES,), np.uint8)
    stage[:HEADER_BYTES] = np.frombuffer(header, np.uint8)
    fill, written, done = HEADER_BYTES, 0, 0

    def flush():
        nonlocal fill, written
        n = -(-fill // PAGE) * PAGE if direct else fill  # O_DIRECT writes whole pages; truncated at the end
        if os.pwrite(fd, memoryview(stage)[:n], written) != n:
            raise OSError(f"short write to {tmp}")
        if not direct:
            os.fdatasync(fd)
            os.posix_fadvise(fd, written, fill, os.POSIX_FADV_DONTNEED)
        written, fill = written + fill, 0

    try:
        for block in blocks:
            b = np.asarray(block)
            if b.ndim != 2 or b.shape[1] != length:
                raise ValueError(f"The 'blocks' parameter of write_coordinate_major must yield (k, {length}) "
                                 f"arrays. Got shape {b.shape} instead.")
            b = np.ascontiguousarray(b, dtype=dtype).reshape(-1).view(np.uint8)
            if done + b.size > data_bytes:
                raise ValueError(f"The 'blocks' parameter of write_coordinate_major must hold {n_coords} "
                                 f"coordinates. Got at least {(done + b.size) // (length * dtype.itemsize)} instead.")
            if hasher is not None:
                hasher.update(b)
            done += b.size
            pos = 0
            while pos < b.size:
                take = min(stage.size - fill, b.size - pos)
                stage[fill:fill + take] = b[pos:pos + take]
                fill, pos = fill + take, pos + take
                if fill == stage.size:
                    flush()
        if done != data_bytes:
            raise ValueError(f"The 'blocks' parameter of write_coordinate_major must hold {n_coords} "
                             f"coordinates. Got {done // max(1, length * dtype.itemsize)} instead.")
        if fill:
            flush()
        os.ftruncate(fd, HEADER_BYTES + data_bytes)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        fd = None
        os.replace(tmp, path)
    finally:
        if fd is not None:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
    dirfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:  # the rename itself survives a power cut
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
    return HEADER_BYTES + data_bytes


def fsync_dir(path):
    """Make a rename in the folder ``path`` survive a power cut."""
    dirfd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


class AppendFile:
    """A raw file written front to back, of a length not known in advance, past the page cache:
    O_DIRECT writes of whole pages from an aligned staging buffer (buffered writes + fdatasync +
    DONTNEED where O_DIRECT is refused or the file system is RAM). :meth:`close` pads the file
    with zeros to a multiple of ``pad_to`` bytes (so that aligned reads of its last block stay
    inside it) and returns its size. ``hasher`` (hashlib-like) gets every byte of the file,
    padding included, in order: the checksum of the whole file. Written at ``path`` itself: the
    caller names a temporary path and renames it once everything it writes is whole."""

    def __init__(self, path, stage_bytes=STAGE_BYTES, hasher=None):
        self.path, self.hasher = os.fspath(path), hasher
        stage_bytes = max(PAGE, -(-int(stage_bytes) // PAGE) * PAGE)
        self.direct = fs_type(os.path.dirname(os.path.abspath(self.path))) not in RAM_FILE_SYSTEMS
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            self._fd = os.open(self.path, flags | (os.O_DIRECT if self.direct else 0), 0o644)
        except OSError:
            self.direct, self._fd = False, os.open(self.path, flags, 0o644)
        self._stage = aligned_empty((stage_bytes,), np.uint8)
        self._fill, self._written = 0, 0  # bytes in the stage, bytes on disk (whole pages)

    @property
    def size(self) -> int:
        """Bytes appended so far."""
        return self._written + self._fill

    def write(self, data):
        """Append the bytes of ``data`` (a buffer, or an array: its raw bytes in C order)."""
        b = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if self.hasher is not None:
            self.hasher.update(b)
        pos = 0
        while pos < b.size:
            take = min(self._stage.size - self._fill, b.size - pos)
            self._stage[self._fill:self._fill + take] = b[pos:pos + take]
            self._fill, pos = self._fill + take, pos + take
            if self._fill == self._stage.size:
                self._flush(self._fill)

    def _flush(self, n):
        """Write the stage's first ``n`` bytes (whole pages) at the end of the file."""
        if os.pwrite(self._fd, memoryview(self._stage)[:n], self._written) != n:
            raise OSError(f"short write to {self.path}")
        if not self.direct:
            os.fdatasync(self._fd)
            os.posix_fadvise(self._fd, self._written, n, os.POSIX_FADV_DONTNEED)
        self._written += n
        self._fill = max(0, self._fill - n)
        if self._fill:  # a partial page stays staged
            self._stage[:self._fill] = self._stage[n:n + self._fill]

    def close(self, pad_to=PAGE) -> int:
        """Pad with zeros to a multiple of ``pad_to`` bytes, write out, fsync; the file's size."""
        if self._fd is None:
            return self._written
        pad_to = int(pad_to)
        total = -(-self.size // pad_to) * pad_to
        zeros = total - self.size
        while zeros:  # the padding: through the stage, so it is hashed and written like data
            take = min(zeros, self._stage.size - self._fill)
            self._stage[self._fill:self._fill + take] = 0
            if self.hasher is not None:
                self.hasher.update(self._stage[self._fill:self._fill + take])
            self._fill += take
            zeros -= take
            if self._fill == self._stage.size:
                self._flush(self._fill)
        if self._fill:
            self._flush(-(-self._fill // PAGE) * PAGE if self.direct else self._fill)
        self._written = total
        os.ftruncate(self._fd, total)  # O_DIRECT wrote whole pages past a size that is not one
        os.fsync(self._fd)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(self._fd)
        self._fd, self._written, self._fill = None, total, 0
        return total

    def abort(self):
        """Close without finishing (the caller removes the file)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# ------------------------------------------------------- the reader's requests ---
@dataclass
class Request:
    """One disk read of ``length`` bytes at ``offset``: straight into ``iov`` (a list of
    memoryviews: the destinations, and a scratch buffer for each hole), or into a bounce
    buffer. ``pieces``: (start in the request, destination) of the wanted bytes, copied out
    of the bounce buffer after (``iov`` empty), or already in place."""
    offset: int
    length: int
    iov: list = field(default_factory=list)
    pieces: list = field(default_factory=list)
    scales: object = None  # each destination's factors (scale[coords]): applied after the read


def release(pool, fd):
    """Close the file (at close(), or when the matrix is collected: then no read is in
    flight, and this may run in one of the pool's own threads, which cannot wait for itself)."""
    pool.shutdown(wait=False)
    os.close(fd)


def preadv_all(fd, bufs, offset, to_eof=False) -> int:
    """``os.preadv`` until ``bufs`` are full (a read may come back short); at the end of the
    file an error unless ``to_eof`` (an aligned bounce read may reach past the end)."""
    want = sum(b.nbytes for b in bufs)
    got = os.preadv(fd, bufs, offset)
    while got < want:
        rest, skip = [], got
        for b in bufs:
            if skip >= b.nbytes:
                skip -= b.nbytes
            else:
                rest.append(b[skip:])
                skip = 0
        n = os.preadv(fd, rest[:MAX_IOV], offset + got)
        if n == 0:
            if to_eof:
                return got
            raise EOFError(f"end of file at byte {offset + got}, {want - got} bytes short")
        got += n
    return got
