"""tasks.data: deterministic datasets, an on-disk cache read memory-mapped, clear errors."""

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from tasks import data
from tasks.data import (DataError, LibsvmData, SklearnData, SyntheticDenseData, SyntheticSparseData, cache_key,
                        load_dataset, validate_data_config)

W8A = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "w8a"
SMALL = dict(n_samples=400, n_features=30, n_informative=4)


def dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


@pytest.mark.parametrize("cfg", [SyntheticDenseData(**SMALL), SyntheticDenseData(**SMALL, correlation_kind="ar1"),
                                 SyntheticSparseData(**SMALL, density=0.1)])
def test_same_config_same_data_in_separate_caches(tmp_path, cfg):
    a = load_dataset(cfg, tmp_path / "one")
    b = load_dataset(cfg, tmp_path / "two")
    assert a.path.name == b.path.name
    np.testing.assert_array_equal(dense(a.X), dense(b.X))
    np.testing.assert_array_equal(a.y, b.y)


def test_seed_and_sizes_change_the_data_and_the_key(tmp_path):
    base = SyntheticDenseData(**SMALL)
    other = SyntheticDenseData(**{**SMALL, "seed": 1})
    assert cache_key(base) != cache_key(other) != cache_key(SyntheticDenseData(**{**SMALL, "n_samples": 401}))
    assert not np.array_equal(load_dataset(base, tmp_path).X, load_dataset(other, tmp_path).X)


def test_second_load_reads_the_cache_memory_mapped(tmp_path, monkeypatch):
    cfg = SyntheticDenseData(**SMALL)
    first = load_dataset(cfg, tmp_path)
    monkeypatch.setitem(data.MAKERS, "synthetic_dense", lambda *a: pytest.fail("made twice"))
    again = load_dataset(cfg, tmp_path)
    assert isinstance(again.X, np.memmap) and again.X.flags["F_CONTIGUOUS"]  # feature columns contiguous
    np.testing.assert_array_equal(first.X, again.X)
    assert len(list(tmp_path.iterdir())) == 1  # no temporary folders left behind


def test_synthetic_dense_follows_its_model(tmp_path):
    ds = load_dataset(SyntheticDenseData(n_samples=4000, n_features=20, n_informative=5, correlation=0.6,
                                         noise=0.0), tmp_path)
    assert np.count_nonzero(ds.coef) == 5
    np.testing.assert_allclose(ds.y, np.asarray(ds.X) @ ds.coef, rtol=1e-10, atol=1e-10)  # noise=0
    corr = np.corrcoef(np.asarray(ds.X).T)
    off_diagonal = corr[~np.eye(20, dtype=bool)]
    assert abs(off_diagonal.mean() - 0.6) < 0.05  # equicorrelated: every pair ~rho


def test_ar1_correlation_decays_with_lag(tmp_path):
    X = np.asarray(load_dataset(SyntheticDenseData(n_samples=5000, n_features=300, n_informative=3,
                                                   correlation=0.7, correlation_kind="ar1"), tmp_path).X)
    corr = np.corrcoef(X.T)
    lag1 = np.mean(np.diag(corr, 1))  # includes a pair across the generator's column blocks
    lag2 = np.mean(np.diag(corr, 2))
    assert abs(lag1 - 0.7) < 0.03 and abs(lag2 - 0.49) < 0.03
    assert abs(corr[255, 256] - 0.7) < 0.06


def test_noise_is_relative_to_the_signal(tmp_path):
    ds = load_dataset(SyntheticDenseData(n_samples=5000, n_features=10, n_informative=3, noise=0.5), tmp_path)
    signal = np.asarray(ds.X) @ ds.coef
    assert np.std(ds.y - signal) / np.std(signal) == pytest.approx(0.5, rel=0.05)


def test_synthetic_sparse_density(tmp_path):
    ds = load_dataset(SyntheticSparseData(n_samples=2000, n_features=100, density=0.05, n_informative=5), tmp_path)
    assert sp.issparse(ds.X) and ds.X.shape == (2000, 100)
    assert ds.X.nnz / (2000 * 100) == pytest.approx(0.05, rel=0.02)
    # Views of the read-only memory maps, not copies.
    assert not ds.X.data.flags.owndata and not ds.X.data.flags.writeable


def test_libsvm_file_is_read_with_its_values(tmp_path):
    path = tmp_path / "tiny.svm"
    path.write_text("1 1:0.5 3:2\n-1 2:1.5\n# a comment line\n1 3:-1\n")
    ds = load_dataset(LibsvmData(path=str(path), n_features=4), tmp_path / "cache")
    # No index 0 in the file: scikit-learn reads the indices as 1-based.
    expected = np.array([[0.5, 0, 2, 0], [0, 1.5, 0, 0], [0, 0, -1, 0]])
    np.testing.assert_array_equal(dense(ds.X), expected)
    np.testing.assert_array_equal(ds.y, [1, -1, 1])


def test_relative_libsvm_path_starts_at_base_dir(tmp_path):
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "a.svm").write_text("1 1:1\n-1 2:1\n")
    ds = load_dataset(LibsvmData(path="sets/a.svm"), tmp_path / "cache", base_dir=tmp_path)
    assert ds.X.shape[0] == 2


def test_missing_libsvm_file_or_a_directory_names_the_path(tmp_path):
    with pytest.raises(DataError, match="'path' parameter of data 'libsvm' names no file: .*no-such-file.svm"):
        load_dataset(LibsvmData(path=str(tmp_path / "no-such-file.svm")), tmp_path)
    with pytest.raises(DataError, match="'path' parameter of data 'libsvm' must be a file. Got a directory"):
        load_dataset(LibsvmData(path=str(tmp_path)), tmp_path / "cache")


@pytest.mark.parametrize("lines,message", [
    ("1 1:0.5\n-1 2:1.5\n1 3:oops\n", r"line 3: 'oops' is not a number"),
    ("1 1:0.5\nlabel 2:1\n", r"line 2: 'label' is not a number"),
    ("1 1:0.5\n1 4:1 2:3\n", r"line 2: feature index 2 comes after 4: indices must increase"),
    ("1 1:0.5 1:2\n", r"line 1: feature index 1 repeats 1"),
    ("1 1:0.5\n-1 -3:2\n", r"line 2: feature index -3 is negative"),
    ("1 1:0.5\n1 2:nan\n", r"line 2: the value of feature 2 is 'nan', not a finite number"),
    ("1 1:0.5\n1 2\n", r"line 2: '2' is not index:value"),
    ("", r"holds no sample"),
    ("# only a comment\n\n", r"holds no sample"),
])
def test_malformed_libsvm_file_names_the_file_the_line_and_the_problem(tmp_path, lines, message):
    path = tmp_path / "broken.svm"
    path.write_text(lines)
    with pytest.raises(DataError, match="broken\\.svm.*" + message) as error:
        load_dataset(LibsvmData(path=str(path)), tmp_path / "cache")
    assert "\n" not in str(error.value)
    assert not any((tmp_path / "cache").iterdir())  # nothing cached


def test_libsvm_n_features_is_a_lower_bound(tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("1 1:0.5 6:2\n-1 2:1.5\n")
    assert load_dataset(LibsvmData(path=str(path), n_features=3), tmp_path / "a").X.shape == (2, 6)
    assert load_dataset(LibsvmData(path=str(path), n_features=10), tmp_path / "b").X.shape == (2, 10)
    assert load_dataset(LibsvmData(path=str(path)), tmp_path / "c").X.shape == (2, 6)


def test_positive_class_makes_one_class_against_the_rest(tmp_path):
    ds = load_dataset(SklearnData(dataset="iris", positive_class=2), tmp_path)
    assert set(np.unique(ds.y)) == {-1.0, 1.0} and int((ds.y == 1).sum()) == 50
    with pytest.raises(DataError, match=r"'positive_class' parameter of data 'sklearn' must be one of the "
                                        r"target's classes \[0.0, 1.0, 2.0\]. Got 7"):
        load_dataset(SklearnData(dataset="iris", positive_class=7), tmp_path)


@pytest.mark.skipif(not W8A.exists(), reason=f"{W8A} is absent")
def test_w8a(tmp_path):
    ds = load_dataset(LibsvmData(path=str(W8A), n_features=300, max_samples=2000), tmp_path)
    assert ds.X.shape == (2000, 300) and set(np.unique(ds.y)) == {-1.0, 1.0}
    assert 0.02 < ds.X.nnz / (2000 * 300) < 0.06  # ~3.9% non-zero


def test_sklearn_shipped_set_standardized(tmp_path):
    ds = load_dataset(SklearnData(dataset="breast_cancer"), tmp_path)
    assert ds.X.shape == (569, 30) and set(np.unique(ds.y)) == {0.0, 1.0}
    np.testing.assert_allclose(np.asarray(ds.X).mean(axis=0), 0, atol=1e-10)


@pytest.mark.parametrize("cfg,message", [
    (dict(name="synthetic_dense", n_samples=-5), r"'n_samples'.*Got -5"),
    (dict(name="synthetic_dense", n_features=10, n_informative=20), r"'n_informative'.*<= n_features"),
    (dict(name="synthetic_dense", correlation=1.0), r"'correlation'.*\[0, 1\)"),
    (dict(name="synthetic_dense", correlation_kind="toeplitz"), r"'correlation_kind'"),
    (dict(name="synthetic_sparse", density=0), r"'density'"),
    (dict(name="synthetic_dense", colour="red"), r"Unknown key.*colour"),
    (dict(name="sklearn", dataset="mnist"), r"'dataset'.*mnist"),
    (dict(name="parquet"), r"Unknown data 'parquet'"),
])
def test_bad_config_is_refused_before_anything_is_made(tmp_path, cfg, message):
    with pytest.raises(ValueError, match=message):
        load_dataset(cfg, tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_groups_are_equicorrelated_within_and_independent_across(tmp_path):
    X = np.asarray(load_dataset(SyntheticDenseData(n_samples=6000, n_features=40, n_informative=4, correlation=0.6,
                                                   n_groups=4), tmp_path).X)
    corr = np.corrcoef(X.T)
    group = np.arange(40) // 10
    same = (group[:, None] == group[None, :]) & ~np.eye(40, dtype=bool)
    assert abs(corr[same].mean() - 0.6) < 0.03
    assert abs(corr[group[:, None] != group[None, :]]).max() < 0.06  # independent: sampling noise only


def test_n_groups_keeps_the_old_cache_keys_and_is_checked():
    before = {k: v for k, v in dataclasses.asdict(SyntheticDenseData(**SMALL)).items() if k != "n_groups"}
    # the key as it was computed before n_groups existed: caches made then stay valid
    old_key = "synthetic_dense-" + hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    assert cache_key(SyntheticDenseData(**SMALL, n_groups=1)) == old_key
    assert cache_key(SyntheticDenseData(**SMALL, n_groups=2)) != cache_key(SyntheticDenseData(**SMALL))
    with pytest.raises(ValueError, match="'n_groups' parameter of data 'synthetic_dense'"):
        validate_data_config({**before, "n_groups": 3, "correlation_kind": "ar1"})
