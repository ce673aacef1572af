"""A Problem whose data are a sparse store on disk (solvers.storage.sparse_on_disk.SparseOnDisk)
computes what the same Problem in RAM computes, for every model, layout, kind of values and
index width, with a store larger than the reader's buffer and coordinates longer than its halves.

Oracle: make_problem on the same data held by scipy.sparse in RAM (whose own objectives are
checked against scikit-learn's in tests/solvers/glm), and scipy's row sums."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.glm.problems import make_problem, make_problem_on_disk
from solvers.storage.sparse_on_disk import SparseBlock, SparseOnDisk
from solvers.storage.sparse_store import write_sparse_store

N, D = 1500, 260
MODELS = [("lasso", {"alpha": 0.01}), ("lasso", {"alpha": 0.01, "fit_intercept": False}),
          ("elastic_net", {"alpha": 0.02, "l1_ratio": 0.3}), ("ridge", {"alpha": 2.0}),
          ("svm", {"C": 0.3}), ("svm", {"C": 0.3, "loss": "squared_hinge", "fit_intercept": False}),
          ("logistic", {"C": 0.3}), ("logistic", {"C": 0.3, "fit_intercept": False, "intercept_scaling": 2.0})]
KINDS = ["float64", "float32", "binary", "int64"]


def data(kind):
    rng = np.random.default_rng(0)
    X = sp.random(N, D, density=0.03, format="lil", random_state=0)
    X[:, 5] = 1.0  # a column (coordinate of the Lasso family) longer than a buffer half
    X[3, :] = 1.0  # a row longer than ... of the dual models, at int64 (512-entry blocks)
    X = X.tocsr()
    X.data = rng.standard_normal(X.nnz)
    if kind == "binary":
        X.data[:] = 1.0
    if kind == "float32":
        X = X.astype(np.float32)
    w = rng.standard_normal(D)
    y = np.asarray(X @ w).ravel() + 0.1 * rng.standard_normal(N)
    return X, y, np.where(y > np.median(y), 1.0, -1.0)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    out = {}
    for kind in KINDS:
        folder = tmp_path_factory.mktemp(kind)
        X, y, yc = data(kind)
        wide = np.int64 if kind == "int64" else None
        out[kind] = (write_sparse_store(folder, X, "csr", index_dtype=wide),
                     write_sparse_store(folder, X, "csc", index_dtype=wide), X, y, yc)
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model,params", MODELS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(MODELS)])
def test_problem_on_disk_equals_problem_in_ram(stores, kind, model, params):
    csr, csc, X, y, yc = stores[kind]
    classifier = model in ("svm", "logistic")
    target = yc if classifier else y
    P = make_problem(model, X, target, **params)
    A = SparseOnDisk(csr if classifier else csc, buffer_bytes=1 << 15)  # two halves of 4 blocks: many chunks
    assert A.buffer().capacity < A.store.nnz
    Q = make_problem_on_disk(model, A, target, **params)
    assert Q.on_disk and Q.n_coords == P.n_coords and Q.A.shape == P.A.shape and Q.P0 == pytest.approx(P.P0)
    np.testing.assert_allclose(Q.sqnorm, P.sqnorm, rtol=1e-12)
    np.testing.assert_allclose(Q.mu, P.mu, rtol=1e-12, atol=1e-15)
    rng = np.random.default_rng(1)
    a = rng.random(P.n_coords) * (0.25 if classifier else 0.05)
    a[rng.random(P.n_coords) < 0.6] = 0.0
    z, off = P.state_from(a)
    z2, off2 = Q.state_from(a)
    np.testing.assert_allclose(z2, z, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(off2, off, rtol=1e-12)
    coords = rng.permutation(P.n_coords)[: P.n_coords // 3]
    coords = np.concatenate([coords, coords[:4], [5, 3]])  # repeats, and the long coordinates
    g, s = P.coordinate_gaps(a, z, off, coords=coords, with_s=True)
    g2, s2 = Q.coordinate_gaps(a, z, off, coords=coords, with_s=True)
    np.testing.assert_allclose(s2, s, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g2, g, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(Q.certify(a, z, off)[:3], P.certify(a, z, off)[:3], rtol=1e-9)
    np.testing.assert_allclose(Q.objectives(a, z, off), P.objectives(a, z, off), rtol=1e-9)
    block = Q.A.read_block(coords)
    assert isinstance(block, SparseBlock) and list(block.coords) == list(coords)
    assert abs(block.csr(Q.A.shape[1]) - P.A[coords]).max() == 0  # the rows y_i x_i (+ intercept) exactly
    assert abs(Q.A.load() - P.A).max() == 0
    exact = P.A.astype(np.float64)  # scipy sums and multiplies float32 data in float32
    sums = np.asarray(exact.sum(axis=1)).ravel()
    np.testing.assert_allclose(Q.A.row_stats()[0], sums, rtol=1e-10, atol=1e-10)
    assert Q.coord_bytes.sum() == Q.A.nnz * (Q.A.store.index_dtype.itemsize + Q.A.dtype.itemsize)
    w = rng.standard_normal(Q.A.shape[1])
    np.testing.assert_allclose(Q.A @ w, exact @ w, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(Q.A.T @ a, exact.T @ a, rtol=1e-10, atol=1e-10)
    assert Q.A.bytes_read > 0 and Q.A.reader.useful_bytes <= Q.A.bytes_read
    Q.A.close()
    A.close()


def test_prefetched_block_into_a_given_block(stores):
    csr, _, X, _, yc = stores["float64"]
    A = SparseOnDisk(csr).scaled(np.where(yc > 0, 1.0, -1.0))
    rows = np.array([9, 3, 700, 9])
    block = A.new_block(10, 2000)
    assert A.prefetch_block(rows, block).result() is block
    expected = sp.diags(np.where(yc > 0, 1.0, -1.0)[rows]) @ X[rows]
    assert abs(block.csr(D) - expected).max() == 0 and block.n_rows == 4
    small = A.new_block(1, 10)
    with pytest.raises(ValueError, match="'block' parameter of SparseOnDisk.read_block must hold 4 rows"):
        A.read_block(rows, small)
    A.close()


def test_a_pickled_copy_reads_the_same(stores):
    import pickle

    csr, _, X, _, yc = stores["float64"]
    A = SparseOnDisk(csr).scaled(np.where(yc > 0, 1.0, -1.0), intercept=1.5)
    A.read_block(np.arange(5))
    B = pickle.loads(pickle.dumps(A))
    assert B.bytes_read == 0 and B.intercept == 1.5
    assert abs(B.read_block(np.arange(40)).csr(D + 1) - A.read_block(np.arange(40)).csr(D + 1)).max() == 0
    A.close()
    B.close()


def test_binary_row_stats_need_no_read(stores):
    csr, _, X, _, _ = stores["binary"]
    A = SparseOnDisk(csr)
    sums, sq = A.row_stats()
    assert A.bytes_read == 0
    np.testing.assert_array_equal(sums, np.diff(X.indptr))
    np.testing.assert_array_equal(sq, np.diff(X.indptr))
