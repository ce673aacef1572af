"""The other layout of a sparse store, by an external transpose: never the whole matrix in RAM.

A dataset's store arrives in one layout (a LIBSVM or Criteo file: rows, ``csr``); the Lasso
family reads columns (``csc``). :func:`transpose_store` writes the other layout from the store
on disk in bounded RAM, an external bucket sort in three passes over the data:

1. **count**: one pass over the indices counts the entries of each new coordinate (an
   old index), which gives the new ``indptr``; the new coordinates are cut into *buckets*,
   contiguous ranges whose entries fit the sort buffer (a coordinate longer than that is a
   bucket of its own);
2. **distribute**: one pass over indices and values: each batch of entries is sorted by bucket
   (a stable counting sort: within a bucket, entries stay in the old coordinates' order) and
   appended as one block to a temporary file (new index = old coordinate, the new coordinate
   within its bucket, value), past the page cache;
3. **sort**: bucket by bucket, in order, its segments of every block are read back, sorted by
   new coordinate (stable: each new coordinate's indices come out sorted) and appended to the
   output store; a bucket of one long coordinate is streamed through as it is, already sorted.

RAM: the counts and each new coordinate's bucket (12 bytes a new coordinate), the read
buffer and about 3 times ``buffer_bytes`` of batches and sort arrays, whatever the store's
size. The output is written like any store (temporary names, renamed when whole); the
temporary file is removed whatever happens.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np
from numba import njit

from solvers.storage.files import PAGE, AppendFile
from solvers.storage.sparse_reader import ChunkBuffer, SparseReader
from solvers.storage.sparse_store import INT32_MAX, SparseStore, SparseStoreWriter, store_name

__all__ = ["transpose_store"]

DEFAULT_BUFFER_BYTES = 256 << 20
OTHER = {"csr": "csc", "csc": "csr"}


@njit(cache=True, nogil=True)
def _count(indices, counts):
    for k in range(indices.shape[0]):
        counts[indices[k]] += 1


@njit(cache=True, nogil=True)
def _distribute(indptr, first_entry, indices, values, has_values, bucket_of, bucket_start, n_buckets,
                out_new_index, out_key, out_values, bucket_sizes):
    """Sort a batch of entries by bucket (stable). Entry k of the batch is entry first_entry + k
    of the store; its old coordinate (found in ``indptr``) becomes its new index, its old index
    c its new coordinate, kept as c - bucket_start[bucket]."""
    bucket_sizes[:] = 0
    n = indices.shape[0]
    for k in range(n):
        bucket_sizes[bucket_of[indices[k]]] += 1
    pos = np.empty(n_buckets, np.int64)
    total = 0
    for b in range(n_buckets):
        pos[b] = total
        total += bucket_sizes[b]
    # the old coordinate of the batch's first entry; then walk indptr along
    lo, hi = 0, indptr.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if indptr[mid] <= first_entry:
            lo = mid
        else:
            hi = mid
    row = lo
    for k in range(n):
        e = first_entry + k
        while indptr[row + 1] <= e:
            row += 1
        c = indices[k]
        b = bucket_of[c]
        p = pos[b]
        out_new_index[p] = row
        out_key[p] = c - bucket_start[b]
        if has_values:
            out_values[p] = values[k]
        pos[b] = p + 1


@njit(cache=True, nogil=True)
def _sort_bucket(keys, new_index, values, has_values, n_keys, out_index, out_values):
    """Stable counting sort of a bucket's entries by key (its new coordinates); returns each key's count."""
    counts = np.zeros(n_keys, np.int64)
    for k in range(keys.shape[0]):
        counts[keys[k]] += 1
    pos = np.empty(n_keys, np.int64)
    total = 0
    for j in range(n_keys):
        pos[j] = total
        total += counts[j]
    for k in range(keys.shape[0]):
        j = keys[k]
        p = pos[j]
        out_index[p] = new_index[k]
        if has_values:
            out_values[p] = values[k]
        pos[j] = p + 1
    return counts


def _buckets(counts, capacity):
    """Contiguous ranges of new coordinates of at most ``capacity`` entries each (a longer
    coordinate alone): (starts, stops)."""
    ends = np.cumsum(counts)
    starts, stops, lo = [], [], 0
    n = counts.shape[0]
    while lo < n:
        base = ends[lo - 1] if lo else 0
        hi = int(np.searchsorted(ends, base + capacity, side="right"))  # coordinates lo..hi-1 fit
        hi = min(n, max(hi, lo + 1))
        starts.append(lo)
        stops.append(hi)
        lo = hi
    return np.array(starts, np.int64), np.array(stops, np.int64)


def transpose_store(source: SparseStore, folder=None, name=None, buffer_bytes=DEFAULT_BUFFER_BYTES,
                    progress: Optional[Callable[[int, int], None]] = None, direct=None) -> SparseStore:
    """Write ``source`` in the other layout (see the module's docstring): a store named ``name``
    (default ``X_<layout>``) in ``folder`` (default the source's). ``buffer_bytes`` sizes the
    batches and the sort; ``progress(done, total)`` is called with bytes of the three passes.
    Returns the new store, opened."""
    if not isinstance(source, SparseStore):
        raise ValueError(f"The 'source' parameter of transpose_store must be a SparseStore. "
                         f"Got {type(source).__name__} instead.")
    if int(buffer_bytes) < 16 * PAGE:
        raise ValueError(f"The 'buffer_bytes' parameter of transpose_store must be at least {16 * PAGE}. "
                         f"Got {buffer_bytes!r} instead.")
    layout = OTHER[source.layout]
    folder = source.folder if folder is None else folder
    name = store_name(layout) if name is None else name
    report = progress or (lambda done, total: None)
    new_length = source.n_coords  # new indices: old coordinates
    new_index = np.dtype(np.int32 if new_length - 1 <= INT32_MAX else np.int64)
    has_values = not source.binary
    value = source.value_dtype if has_values else np.dtype(np.float64)
    v_size = value.itemsize if has_values else 0
    # per entry in a batch: the read (index, value; two halves), the sorted copy (new index, key, value)
    batch = max(4 * source.block_entries,
                int(buffer_bytes) // (2 * source.entry_bytes + new_index.itemsize + 4 + v_size))
    # the three passes' bytes: the indices, the entries, the temporary records read back
    total_bytes = source.nnz * (source.index_dtype.itemsize + source.entry_bytes + new_index.itemsize + 4 + v_size)
    done = 0
    reader = SparseReader(source, direct=direct, max_request=8 << 20, threads=4)
    buffer = ChunkBuffer(source, batch)
    try:
        # 1. count
        counts = np.zeros(source.length, np.int64)
        for _, indices, _ in reader.stream(buffer, values=False):
            _count(indices, counts)
            done += indices.shape[0] * source.index_dtype.itemsize
            report(done, total_bytes)
        # the sort holds a bucket's entries twice (read back, sorted): per entry
        per_entry = 2 * (new_index.itemsize + v_size) + 4
        starts, stops = _buckets(counts, max(1, int(buffer_bytes) // per_entry))
        n_buckets = starts.shape[0]
        bucket_of = np.repeat(np.arange(n_buckets, dtype=np.int32), stops - starts)
        tmp_path = os.path.join(os.fspath(folder), f"{name}.transpose.tmp-{os.getpid()}")
        blocks = []  # per block: its file offset and its buckets' sizes
        try:
            # 2. distribute
            tmp = AppendFile(tmp_path)
            try:
                sizes = np.zeros(n_buckets, np.int64)
                out_new = np.empty(buffer.capacity, new_index)
                out_key = np.empty(buffer.capacity, np.int32)
                out_val = np.empty(buffer.capacity if has_values else 0, value)
                for first, indices, values in reader.stream(buffer):
                    n = indices.shape[0]
                    _distribute(source.indptr, first, indices, values if has_values else out_val, has_values,
                                bucket_of, starts, n_buckets, out_new, out_key, out_val, sizes)
                    blocks.append((tmp.size, sizes.copy()))
                    tmp.write(out_new[:n])
                    tmp.write(out_key[:n])
                    if has_values:
                        tmp.write(out_val[:n])
                    done += n * source.entry_bytes
                    report(done, total_bytes)
            finally:
                tmp.close(pad_to=1)
            del out_new, out_key, out_val
            buffer = None  # the read buffer's RAM goes back before the sort's
            # 3. sort, bucket by bucket
            with SparseStoreWriter(folder, name, layout, length=new_length, dtype=value,
                                   binary=True if not has_values else False, index_dtype=new_index) as writer:
                fd = os.open(tmp_path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                    for b in range(n_buckets):
                        lo, hi = int(starts[b]), int(stops[b])
                        total = int(counts[lo:hi].sum())
                        if hi - lo == 1:  # one coordinate (perhaps longer than the buffer): in order already
                            for part in _segments(fd, blocks, b, new_index, value, has_values):
                                writer.append_entries(part[0], part[2] if has_values else None)
                            writer.append_lengths(counts[lo:hi])
                        else:
                            keys = np.empty(total, np.int32)
                            idx = np.empty(total, new_index)
                            val = np.empty(total if has_values else 0, value)
                            at = 0
                            for part in _segments(fd, blocks, b, new_index, value, has_values):
                                k = part[0].shape[0]
                                idx[at:at + k], keys[at:at + k] = part[0], part[1]
                                if has_values:
                                    val[at:at + k] = part[2]
                                at += k
                            out_idx = np.empty(total, new_index)
                            out_v = np.empty(total if has_values else 0, value)
                            lengths = _sort_bucket(keys, idx, val, has_values, hi - lo, out_idx, out_v)
                            del keys, idx, val
                            writer.append(lengths, out_idx, out_v if has_values else None)
                            del out_idx, out_v
                        done += total * (new_index.itemsize + 4 + v_size)
                        report(done, total_bytes)
                finally:
                    os.close(fd)
                return writer.close()
        finally:
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)
    finally:
        reader.close()


SEGMENT_READ = 32 << 20


def _segments(fd, blocks, b, new_index, value, has_values):
    """Bucket ``b``'s entries from every block of the temporary file: (new indices, keys, values)."""
    per = [new_index.itemsize, 4] + ([value.itemsize] if has_values else [])
    dtypes = [new_index, np.dtype(np.int32)] + ([value] if has_values else [])
    for offset, sizes in blocks:
        n_block = int(sizes.sum())
        k = int(sizes[b])
        if not k:
            continue
        before = int(sizes[:b].sum())
        # each array of the block: n_block entries, one after the other
        step = max(1, SEGMENT_READ // sum(per))
        for s in range(0, k, step):
            m = min(step, k - s)
            parts, base = [], offset
            for size, dtype in zip(per, dtypes):
                out = np.empty(m, dtype)
                pos = base + (before + s) * size
                got = os.preadv(fd, [memoryview(out.view(np.uint8))], pos)
                if got != m * size:
                    raise EOFError(f"the transpose's temporary file ended at byte {pos + got}")
                os.posix_fadvise(fd, pos - pos % PAGE, m * size + pos % PAGE, os.POSIX_FADV_DONTNEED)
                parts.append(out)
                base += n_block * size
            yield parts if has_values else parts + [None]
