"""The external transpose (solvers.storage.sparse_transpose): the other layout equals scipy's
transpose whatever the sort buffer (many buckets, a column longer than the buffer), and leaves no
temporary file.

Oracle: scipy.sparse's X.T of the matrix written."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.storage.sparse_store import write_sparse_store
from solvers.storage.sparse_transpose import transpose_store


def matrix(kind):
    rng = np.random.default_rng(2)
    X = sp.random(3000, 500, density=0.02, format="lil", random_state=2)
    X[:, 17] = 3.0  # a column of every row: longer than a small sort buffer, a bucket of its own
    X[9, :] = 1.5
    X = X.tocsr()
    X.data = rng.standard_normal(X.nnz)
    if kind == "binary":
        X.data[:] = 1.0
    return X.astype(np.float32) if kind == "float32" else X


@pytest.mark.parametrize("kind", ["float64", "float32", "binary"])
@pytest.mark.parametrize("buffer_bytes", [16 * 4096, 1 << 20, 64 << 20])
def test_transpose_equals_scipy_and_back(tmp_path, kind, buffer_bytes):
    X = matrix(kind)
    csr = write_sparse_store(tmp_path, X, "csr")
    seen = []
    csc = transpose_store(csr, buffer_bytes=buffer_bytes, progress=lambda done, total: seen.append((done, total)))
    assert csc.layout == "csc" and csc.shape == X.shape and csc.binary == (kind == "binary")
    assert csc.value_dtype == csr.value_dtype and csc.verify() is None
    assert abs(csc.load() - X.T.tocsr()).max() == 0
    back = transpose_store(csc, name="back", buffer_bytes=buffer_bytes)
    assert abs(back.load() - X).max() == 0
    indices = back.memmaps()[0]
    assert all(np.all(np.diff(indices[a:b]) > 0) for a, b in zip(back.indptr[:-1], back.indptr[1:]))  # sorted
    assert seen and seen[-1][0] == seen[-1][1] and all(b >= a for (a, _), (b, _) in zip(seen, seen[1:]))
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_refuses_a_tiny_buffer(tmp_path):
    csr = write_sparse_store(tmp_path, matrix("float64"), "csr")
    with pytest.raises(ValueError, match="'buffer_bytes' parameter of transpose_store must be at least 65536"):
        transpose_store(csr, buffer_bytes=1000)
