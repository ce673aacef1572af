"""The cache's sample-major copy (tasks.data.rows): what the dual models read from disk.

Oracles: np.load of the entry's Fortran-order X.npy (the copy equals it, in C order); the
cache's own checksum of the whole file; mincore(2) for the page cache; tracemalloc for the
RAM the transpose allocates; scikit-learn's LinearSVC (liblinear) for a problem built on it.
"""

import json
import os
import tracemalloc
import warnings

import numpy as np
import pytest
from sklearn.svm import LinearSVC

from solvers.storage.reader import DiskMatrix, aligned_empty, write_coordinate_major
from solvers.storage.files import read_npy_header
from solvers.duhl.solver import DuHL
from tasks.data import DataError, SphereData, SyntheticDenseData, cache, checksum, load_dataset, read_cached
from tasks.data.cache import describe_file
from tasks.data.rows import ROWS_FILE, features, sample_major, transpose
from tasks.problems import build_problem_on_disk, coordinate_stats, labels_for
from tests.solvers.storage.test_reader import resident_bytes

CFG = SyntheticDenseData(n_samples=1003, n_features=77, n_informative=5)
WIDE = SyntheticDenseData(n_samples=200, n_features=500, n_informative=5)  # rows of 4000 bytes: padded to 4096


def test_the_copy_equals_x_in_c_order_is_recorded_and_made_once(tmp_path):
    ds = load_dataset(CFG, tmp_path)
    X = np.array(ds.X)
    assert np.isfortran(ds.X)
    path = sample_major(ds.path)
    assert path == ds.path / ROWS_FILE
    shape, fortran, dtype, offset, _ = read_npy_header(path)
    assert (shape, fortran, dtype, offset) == ((1003, 77), False, np.dtype(np.float64), 4096)  # aligned rows
    assert resident_bytes(path) == 0  # written past the page cache (its source was just read by np.array)
    np.testing.assert_array_equal(np.load(path), X)
    stamp = path.stat().st_mtime_ns
    assert sample_major(ds.path) == path and path.stat().st_mtime_ns == stamp  # made once
    cache._CHECKED.clear()
    read_cached(ds.path)  # its checksum, recorded in meta.json, holds
    meta = (ds.path / "meta.json").read_text()
    assert checksum(path) in meta


def test_a_damaged_copy_is_found_by_the_cache(tmp_path):
    ds = load_dataset(CFG, tmp_path)
    path = sample_major(ds.path)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\0" * 512)
    cache._CHECKED.clear()
    with pytest.raises(DataError, match=f"{ROWS_FILE} has changed since it was written"):
        read_cached(ds.path)


def test_a_c_order_dataset_is_used_as_it_is(tmp_path):
    ds = load_dataset(SphereData(n_samples=500, n_features=8), tmp_path)
    assert not np.isfortran(ds.X)
    assert sample_major(ds.path) == ds.path / "X.npy"
    assert not (ds.path / ROWS_FILE).exists()


@pytest.mark.parametrize("tile_bytes", [1, 77 * 8 * 10, 1 << 20])
def test_transpose_in_blocks_of_any_size_with_bounded_ram(tmp_path, tile_bytes):
    """One row, ten rows, all rows a block: the same file; the RAM the transpose allocates is
    about two blocks and the writer's 8 MB staging buffer, however large the data."""
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.standard_normal((1003, 77)))
    np.save(tmp_path / "F.npy", X)
    shape, fortran, dtype, offset, _ = read_npy_header(tmp_path / "F.npy")
    tracemalloc.start()
    digest = transpose(tmp_path / "F.npy", tmp_path / "C.npy", shape, dtype, offset, tile_bytes=tile_bytes)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(np.load(tmp_path / "C.npy"), X)
    assert digest == checksum(tmp_path / "C.npy")
    assert peak <= 2 * max(tile_bytes, X.shape[1] * 8) + (1 << 20), peak  # numpy's allocations (not the mmap'd stage)


def test_a_truncated_source_is_an_error(tmp_path):
    X = np.asfortranarray(np.ones((100, 10)))
    np.save(tmp_path / "F.npy", X)
    shape, fortran, dtype, offset, _ = read_npy_header(tmp_path / "F.npy")
    os.truncate(tmp_path / "F.npy", offset + 100 * 8 * 5)
    with pytest.raises(DataError, match="ended before the data its header announces"):
        transpose(tmp_path / "F.npy", tmp_path / "C.npy", shape, dtype, offset)
    assert not (tmp_path / "C.npy").exists()


def test_a_classifier_on_disk_reads_the_copy_and_reaches_liblinears_optimum(tmp_path):
    ds = load_dataset(CFG, tmp_path)
    X, y = np.array(ds.X), labels_for("svm", ds.y)
    model = {"name": "svm", "C": 0.01, "fit_intercept": False}
    problem = build_problem_on_disk(model, ds.path, ds.y, coordinate_stats("svm", ds.path))
    assert problem.A.matrix.path == str(ds.path / ROWS_FILE)
    np.testing.assert_allclose(problem.sqnorm, (X * X).sum(1), rtol=1e-12)
    r = DuHL(host_budget=0.25, tol=1e-10, random_state=0).solve(problem)
    assert r.status == "converged"
    w = X.T @ (r.a * y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # liblinear may stop at max_iter: its objective is the bar, not the answer
        sk = LinearSVC(C=0.01, loss="hinge", dual=True, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)

    def primal(v):
        return 0.5 * v @ v + 0.01 * np.maximum(0.0, 1.0 - y * (X @ v)).sum()

    assert primal(w) <= primal(sk.coef_.ravel()) + 1e-9 * problem.P0


def test_wide_rows_are_padded_with_zeros_and_read_straight_into_place(tmp_path):
    ds = load_dataset(WIDE, tmp_path)
    X = np.array(ds.X)
    path = sample_major(ds.path)
    shape, fortran, dtype, offset, _ = read_npy_header(path)
    assert (shape, fortran, offset) == ((200, 512), False, 4096)  # 4096 bytes a row: every row aligned
    stored = np.load(path)
    np.testing.assert_array_equal(stored[:, :500], X)
    assert not stored[:, 500:].any()
    assert features(path) == 500 and features(ds.path / "X.npy") == 500
    m = DiskMatrix(path)
    if m.direct:  # O_DIRECT (tmp_path is on a disk: tests/solvers/duhl/test_disk.py checks it)
        m._bounce = None  # no request may go through a bounce buffer: each lands in place
    out = aligned_empty((3, 512))
    m.read_into(np.array([7, 150, 8]), out)
    np.testing.assert_array_equal(out[:, :500], X[[7, 150, 8]])
    m.close()


def test_an_unpadded_copy_from_before_is_written_again_once(tmp_path):
    ds = load_dataset(WIDE, tmp_path)
    X = np.array(ds.X)
    old = ds.path / ROWS_FILE  # as the cache wrote it before rows were padded, recorded in meta.json
    write_coordinate_major(old, 200, 500, [X])
    meta = json.loads((ds.path / "meta.json").read_text())
    meta["files"][ROWS_FILE] = describe_file(old, checksum(old))
    (ds.path / "meta.json").write_text(json.dumps(meta))
    path = sample_major(ds.path)
    assert read_npy_header(path)[0] == (200, 512)
    np.testing.assert_array_equal(np.load(path)[:, :500], X)
    stamp = path.stat().st_mtime_ns
    assert sample_major(ds.path) == path and path.stat().st_mtime_ns == stamp
    cache._CHECKED.clear()
    read_cached(ds.path)  # the new copy's checksum replaced the old one's
    assert checksum(path) in (ds.path / "meta.json").read_text()


def test_a_classifier_on_padded_rows_drops_the_padding_and_reaches_liblinears_optimum(tmp_path):
    ds = load_dataset(WIDE, tmp_path)
    X, y = np.array(ds.X), labels_for("svm", ds.y)
    problem = build_problem_on_disk({"name": "svm", "C": 0.001, "fit_intercept": False}, ds.path, ds.y,
                                    coordinate_stats("svm", ds.path))
    assert problem.A.shape == (200, 512) and problem.n_features == 500
    np.testing.assert_allclose(problem.sqnorm, (X * X).sum(1), rtol=1e-12)  # the zeros add nothing
    r = DuHL(host_budget=0.25, tol=1e-10, random_state=0).solve(problem)
    assert r.status == "converged" and r.v.shape == (512,) and not r.v[500:].any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (within 1e-13 of its tol=1e-12 objective here, 100x faster)
        sk = LinearSVC(C=0.001, loss="hinge", dual=True, fit_intercept=False, tol=1e-10, max_iter=5000).fit(X, y)

    def primal(v):
        return 0.5 * v @ v + 0.001 * np.maximum(0.0, 1.0 - y * (X @ v)).sum()

    assert primal(r.v[:500]) <= primal(sk.coef_.ravel()) + 1e-9 * problem.P0


@pytest.mark.parametrize("model", ["svm", "logistic"])
def test_an_intercept_lives_in_the_padding_and_reaches_liblinears_optimum(tmp_path, model):
    """fit_intercept on the padded copy: the first padding value of each row reads as
    intercept_scaling (liblinear's regularised extra feature); the objective of w and the intercept
    is liblinear's optimum with the same intercept_scaling (its fit is the oracle)."""
    from sklearn.linear_model import LogisticRegression
    ds = load_dataset(WIDE, tmp_path)
    X, y = np.array(ds.X), labels_for(model, ds.y)
    s, C = 2.0, 0.001
    problem = build_problem_on_disk({"name": model, "C": C, "fit_intercept": True, "intercept_scaling": s},
                                    ds.path, ds.y, coordinate_stats(model, ds.path))
    np.testing.assert_allclose(problem.sqnorm, (X * X).sum(1) + s * s, rtol=1e-12)
    r = DuHL(host_budget=0.5, tol=1e-9, random_state=0).solve(problem)
    assert r.status == "converged" and not r.v[501:].any()
    w, b = r.v[:500], r.v[500] * s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model == "svm":
            sk = LinearSVC(C=C, loss="hinge", dual=True, intercept_scaling=s, tol=1e-10, max_iter=5000).fit(X, y)
        else:
            sk = LogisticRegression(C=C, solver="liblinear", dual=True, intercept_scaling=s, tol=1e-10,
                                    max_iter=5000).fit(X, y)

    def primal(v, c):
        m = y * (X @ v + c)
        loss = np.maximum(0.0, 1.0 - m) if model == "svm" else np.logaddexp(0.0, -m)
        return 0.5 * (v @ v + (c / s) ** 2) + C * loss.sum()

    assert abs(b) > 1e-3  # an intercept the data wants (the oracle's too)
    assert primal(w, b) <= primal(sk.coef_.ravel(), sk.intercept_[0]) + 1e-9 * problem.P0
