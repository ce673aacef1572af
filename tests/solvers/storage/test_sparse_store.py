"""The sparse store's files (solvers.storage.sparse_store): what is written is what scipy holds,
checksummed, aligned, written atomically; offsets past 2^31 entries.

Oracles: scipy.sparse (the matrix written), xxhash of the files' bytes, np.fromfile of the raw
files, the file system (what exists after a writer is killed)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import xxhash

from solvers.storage.sparse_store import (ALIGN, SparseStore, SparseStoreWriter, open_store,
                                          remove_stale_temporaries, write_sparse_store)

ROOT = Path(__file__).resolve().parents[3]


def matrix(seed=0, n=300, d=70, density=0.05, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=dtype)
    X.data = rng.standard_normal(X.nnz).astype(dtype)
    return X


@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("kind", ["float64", "float32", "binary", "int64"])
def test_roundtrip_equals_scipy(tmp_path, layout, kind):
    X = matrix(dtype=np.float32 if kind == "float32" else np.float64)
    if kind == "binary":
        X.data[:] = 1
    store = write_sparse_store(tmp_path, X, layout, index_dtype=np.int64 if kind == "int64" else None,
                               batch_entries=100)
    assert store.layout == layout and store.shape == X.shape and store.nnz == X.nnz
    assert store.binary == (kind == "binary")
    assert (tmp_path / f"X_{layout}.values").exists() == (kind != "binary")
    assert store.index_dtype == (np.int64 if kind == "int64" else np.int32)
    coordinate_major = (X if layout == "csr" else X.T).tocsr()
    M = store.load()
    assert M.shape == coordinate_major.shape and (M != coordinate_major).nnz == 0
    assert (store.matrix() != X).nnz == 0  # memory-mapped, as scipy sees X
    np.testing.assert_array_equal(store.indptr, coordinate_major.indptr)
    raw = np.fromfile(store.path("indices"), store.index_dtype)
    np.testing.assert_array_equal(raw[:X.nnz], coordinate_major.indices)
    assert not raw[X.nnz:].any()  # zero padding
    for path in store.files[:-1]:  # every data file: whole blocks, checksummed as written
        data = path.read_bytes()
        assert store.checksums[path.name] == xxhash.xxh3_128(data).hexdigest()
        if path.name.endswith(("indices", "values")):  # whole blocks of entries, each whole pages
            itemsize = (store.index_dtype if path.name.endswith("indices") else store.value_dtype).itemsize
            assert len(data) == -(-store.nnz // store.block_entries) * store.block_entries * itemsize
            assert store.block_entries * itemsize % ALIGN == 0
    assert store.verify() is None


def test_verify_and_open_find_damage(tmp_path):
    store = write_sparse_store(tmp_path, matrix())
    with open(store.path("values"), "r+b") as f:
        f.seek(100)
        f.write(b"\x01")
    assert "X_csr.values has changed" in store.verify()
    os.truncate(store.path("indices"), 4096)
    with pytest.raises(ValueError, match="X_csr.indices has 4096 bytes; the store's description says"):
        open_store(tmp_path, "X_csr")
    store.path("json").unlink()
    with pytest.raises(FileNotFoundError, match="No sparse store 'X_csr'"):
        open_store(tmp_path, "X_csr")


def test_writer_in_batches_widens_shifts_and_starts_values_late(tmp_path):
    """Indices past int32 widen the file once; a late index 0 shifts what was written; the first
    value that is not 1 writes the ones before it."""
    rows = [([3, 5, 9], None), ([0, 2], [1.0, 1.0]), ([1 << 31, (1 << 31) + 7], [2.0, -1.5]), ([], None)]
    with SparseStoreWriter(tmp_path, "W") as w:
        for k, (idx, val) in enumerate(rows):
            w.append([len(idx)], np.array(idx, np.int64), None if val is None else np.array(val))
            if k == 1:
                w.shift_indices(1)
        store = w.close()
    expected = [4, 6, 10, 1, 3, 1 << 31, (1 << 31) + 7]
    assert store.index_dtype == np.int64 and store.shape == (4, (1 << 31) + 8)
    indices, values = store.memmaps()
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(values, [1, 1, 1, 1, 1, 2.0, -1.5])
    np.testing.assert_array_equal(store.indptr, [0, 3, 5, 7, 7])


def test_writer_refuses_bad_input_in_one_line(tmp_path):
    with SparseStoreWriter(tmp_path, "B", length=10) as w:
        with pytest.raises(ValueError, match="'indices' parameter of SparseStoreWriter must hold indices below "
                                             "length 10. Got 12 instead"):
            w.append([1], np.array([12]))
        with pytest.raises(ValueError, match="'lengths' parameter of SparseStoreWriter.append must be"):
            w.append([-1], np.array([], np.int64))
    with pytest.raises(ValueError, match="'binary' parameter of SparseStoreWriter must be None, True or False"):
        SparseStoreWriter(tmp_path, "B", binary="yes")
    with SparseStoreWriter(tmp_path, "B", binary=True) as w:
        with pytest.raises(ValueError, match="must be None or all ones for a binary store"):
            w.append([1], np.array([1]), np.array([2.0]))


def test_abort_and_exception_leave_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with SparseStoreWriter(tmp_path, "A") as w:
            w.append([2], np.array([1, 2]), np.array([0.5, 2.0]))
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leaves_no_store_and_its_temporaries_are_removed(tmp_path):
    """SIGKILL mid-write: no file under a store's own name (no .json: no store), only .tmp-<pid>
    files, which remove_stale_temporaries clears once the process is gone."""
    code = textwrap.dedent(f"""
        import sys, numpy as np
        from solvers.storage.sparse_store import SparseStoreWriter
        w = SparseStoreWriter({str(tmp_path)!r}, "K")
        for _ in range(3):
            w.append(np.full(1000, 10), np.tile(np.arange(10), 1000), np.random.rand(10000))
        print("writing", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names and all(".tmp-" in n for n in names), names
    with pytest.raises(FileNotFoundError):
        SparseStore(tmp_path, "K")
    assert sorted(remove_stale_temporaries(tmp_path)) == names
    assert list(tmp_path.iterdir()) == []


# coordinates 1 and 2 of a store past 2^31 entries (its first coordinate is the rest): their indices
# and values
TAIL_IDX = np.array([1, 4, 5, 8, 9, 0, 2, 3, 4, 6, 7, 9], np.int32)
TAIL_VAL = np.arange(12, dtype=np.float32) + 0.5


def _store_past_2_to_the_31(folder):
    """A store of more than 2^31 entries (int32 indices, float32 values, 3 x 10), most of it a hole in
    a sparse file: coordinates 1 and 2 start past entry 2^31 (byte 8 GiB of the indices)."""
    big = (1 << 31) + 10
    indptr = np.array([0, big, big + 5, big + 12], np.int64)
    nnz = int(indptr[-1])
    block = 1024
    padded = -(-nnz // block) * block
    for name, dtype, tail in (("indices", np.int32, TAIL_IDX), ("values", np.float32, TAIL_VAL)):
        path = folder / f"S.{name}"
        with open(path, "wb") as f:
            f.truncate(padded * 4)
            f.seek(big * 4)
            f.write(tail.astype(dtype).tobytes())
    (folder / "S.indptr").write_bytes(indptr.tobytes())
    meta = {"format": "duhl-lab sparse store", "version": 1, "layout": "csr", "shape": [3, 10], "nnz": nnz,
            "indices": "int32", "values": "float32", "block_entries": block,
            "files": {f"S.{p}": {"bytes": 0, "xxh3_128": ""} for p in ("indptr", "indices", "values")}}
    (folder / "S.json").write_text(json.dumps(meta))
    return open_store(folder, "S")


def test_offsets_past_2_to_the_31(tmp_path):
    """Coordinates 1 and 2 of a store past 2^31 entries read exactly (int64 offsets throughout)."""
    from solvers.storage.sparse_on_disk import SparseOnDisk

    store = _store_past_2_to_the_31(tmp_path)
    assert store.nnz > np.iinfo(np.int32).max
    data = SparseOnDisk(store, buffer_bytes=1 << 16)
    block_read = data.read_block(np.array([2, 1]))
    dense = block_read.csr(10).toarray()
    expected = np.zeros((2, 10))
    expected[1, TAIL_IDX[:5]] = TAIL_VAL[:5]
    expected[0, TAIL_IDX[5:]] = TAIL_VAL[5:]
    np.testing.assert_array_equal(dense, expected)
    assert data.bytes_read == 2 * 4096  # the one block of both files that holds them


def test_the_matrix_of_a_store_past_2_to_the_31_entries_maps_its_int32_indices_without_a_copy(tmp_path):
    """``matrix()`` (what the dataset cache hands the pipeline) of a store past 2^31 entries: its int32
    indices and its values stay memory-mapped beside int64 row offsets, and its rows read exactly.
    In a process whose address space holds the two 8 GiB maps and 6 GiB more: an int64 copy of the
    indices (16 GiB, what scipy's one index dtype would take) fails there with a MemoryError, as it
    would on data larger than RAM."""
    store = _store_past_2_to_the_31(tmp_path)
    maps = sum(os.path.getsize(tmp_path / f"S.{p}") for p in ("indices", "values"))
    code = textwrap.dedent(f"""
        import resource
        import numpy as np
        from solvers.storage.sparse_store import open_store
        resource.setrlimit(resource.RLIMIT_AS, ({maps} + (6 << 30),) * 2)
        m = open_store({str(tmp_path)!r}, "S").matrix()
        lo, hi = int(m.indptr[1]), int(m.indptr[3])
        print(m.indptr.dtype, m.indices.dtype, m.data.dtype, isinstance(m.indices, np.memmap), m.nnz)
        print(*m.indices[lo:hi].tolist())
        print(*m.data[lo:hi].tolist())
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    kinds, indices, values = out.stdout.splitlines()
    assert kinds.split() == ["int64", "int32", "float32", "True", str(store.nnz)]
    np.testing.assert_array_equal(np.array(indices.split(), np.int32), TAIL_IDX)
    np.testing.assert_array_equal(np.array(values.split(), np.float32), TAIL_VAL)
