"""data=zarr: a user's own zarr array brought into the cache's layout a tile of its chunks at a time.

Oracles: the arrays the test wrote, read back by zarr itself (np.asarray of the zarr array);
scikit-learn's Lasso on them; the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
against the store's size."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from sklearn.linear_model import Lasso
from zarr.codecs import BloscCodec

from solvers.duhl.solver import DuHL
from tasks.data import DataError, ZarrData, cache_key, load_dataset, validate_data_config
from tasks.data import npy, zarr_store
from tasks.problems import build_problem_on_disk

ROOT = Path(__file__).resolve().parents[2]
N, P = 240, 30
CODECS = {"blosc": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")], "none": None, "zstd": "auto"}


def data(seed=0, n=N, p=P):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    w = np.zeros(p)
    w[:5] = rng.standard_normal(5)
    return X, X @ w + 0.1 * rng.standard_normal(n)


def store(path, X, y=None, chunks=(N, 4), codec="blosc", zarr_format=3):
    """A group at ``path`` holding X (and y), written by zarr."""
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    kwargs = {} if CODECS[codec] == "auto" else {"compressors": CODECS[codec]}
    group.create_array("X", shape=X.shape, chunks=chunks, dtype=X.dtype, **kwargs)[:] = X
    if y is not None:
        group.create_array("y", shape=y.shape, chunks=(64,), dtype=y.dtype)[:] = y
    return path


# chunks (column bands, row bands, tiles), codec, source dtype, configured dtype, target column (None: the y array)
CASES = [((N, 4), "blosc", "float64", None, None), ((N, 4), "none", "float32", None, -1),
         ((32, P), "blosc", "float32", "float64", 0), ((50, 7), "zstd", "int16", None, None),
         ((50, 7), "none", "float64", "float32", 9)]


@pytest.mark.parametrize("chunks,codec,dtype,out,column", CASES)
def test_the_cached_matrix_is_the_zarr_array_bitwise(tmp_path, monkeypatch, chunks, codec, dtype, out, column):
    monkeypatch.setattr(npy, "CONVERT_BYTES", 2 * 3 * 8 * max(chunks) * 7)  # several tiles, whichever kind
    X, y = data()
    X = (X * 100).astype(dtype)
    stored = X if column is None else np.insert(X, column % (P + 1), y.astype(dtype), axis=1)
    root = store(tmp_path / "my.zarr", stored, None if column is not None else y, chunks=chunks, codec=codec)
    written = np.asarray(zarr.open_array(str(root / "X"), mode="r"))  # what zarr itself reads back
    cfg = ZarrData(path=str(root / "X"), dtype=out,
                   **({"target": str(root / "y")} if column is None else {"target_column": column}))
    ds = load_dataset(cfg, tmp_path / "cache")
    expect = np.dtype(out or (dtype if dtype != "int16" else "float64"))
    features = written if column is None else np.delete(written, column % (P + 1), axis=1)
    assert ds.X.dtype == expect and ds.X.shape == (N, P) and np.isfortran(ds.X)
    np.testing.assert_array_equal(ds.X, features.astype(expect))
    target = y if column is None else written[:, column % (P + 1)].astype(np.float64)
    np.testing.assert_array_equal(ds.y, target)
    with open(ds.path / "X.npy", "rb") as f:  # the disk tier's alignment: data at 4096 bytes
        f.seek(4096)
        assert f.read(expect.itemsize) == features[:1, :1].astype(expect).tobytes()


def test_tiles_are_whole_chunks_within_the_budget():
    # full-height bands of whole column chunks (5 columns of 1000 rows: 40 kB a chunk)
    assert zarr_store.tile_shape((1000, 100), (1000, 5), 8, 200_000) == (1000, 25)
    # a chunk column band is too tall: bands of chunk rows, as wide as the budget allows
    assert zarr_store.tile_shape((10**6, 100), (1000, 5), 8, 200_000) == (1000, 25)
    # row chunks spanning every column: as many chunk rows as fit
    assert zarr_store.tile_shape((10**6, 100), (100, 100), 8, 200_000) == (200, 100)
    # one chunk above the budget: one chunk (zarr decodes a chunk whole anyway)
    assert zarr_store.tile_shape((10**6, 100), (1000, 100), 8, 200_000) == (1000, 100)


def test_zarr_v2_and_a_npy_target(tmp_path):
    X, y = data(seed=3)
    root = store(tmp_path / "v2.zarr", X, chunks=(100, 8), codec="none", zarr_format=2)
    np.save(tmp_path / "y.npy", y)
    ds = load_dataset(ZarrData(path=str(root / "X"), target=str(tmp_path / "y.npy")), tmp_path / "cache")
    np.testing.assert_array_equal(ds.X, X)
    np.testing.assert_array_equal(ds.y, y)


def test_duhl_with_a_host_budget_on_the_store_reaches_scikit_learns_lasso(tmp_path):
    X, y = data(seed=1)
    root = store(tmp_path / "my.zarr", X, y, chunks=(64, 8))
    ds = load_dataset(ZarrData(path=str(root / "X"), target=str(root / "y")), tmp_path / "cache")
    alpha = 0.05 * np.abs(X.T @ y).max() / N
    on_disk = build_problem_on_disk({"name": "lasso", "alpha": alpha, "fit_intercept": False}, ds.path, ds.y)
    r = DuHL(host_budget=0.25, tol=1e-10, random_state=0).solve(on_disk)
    assert r.status == "converged" and on_disk.A.bytes_read >= X.nbytes
    sk = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(r.a, sk.coef_, atol=1e-6)


def test_conversion_ram_is_bounded_by_its_buffer_not_the_store(tmp_path):
    """A 48 MB float32 store in chunks of 2000 x 100 (tiles of chunk rows, not full height)
    converted to float64 (96 MB) through a 4 MB buffer in a fresh process: the peak RSS above
    the start of the conversion stays well below the store (a whole read would be 48 MB, its
    cast 96 MB). Measured while writing this test: +20-24 MB with a 4 or an 8 MB buffer and
    chunks of 24000 x 25, 500 x 500 or these (12 MB of it traced by tracemalloc: the tile, its
    cast, zarr's decoded chunks; the rest the allocators' arenas of zarr's threads)."""
    X = np.random.default_rng(2).standard_normal((24_000, 500), dtype=np.float32)
    root = store(tmp_path / "big.zarr", X, np.arange(24_000.0), chunks=(2000, 100), codec="none")
    del X
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import zarr
        from tasks.data import ZarrData, load_dataset, npy
        npy.CONVERT_BYTES = 4 << 20
        cfg = ZarrData(path={str(root / 'X')!r}, target={str(root / 'y')!r}, dtype="float64")
        zarr.open_array({str(root / 'y')!r}, mode="r")[:10]  # zarr's first read: its codecs imported
        def rss(key):
            return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) * 1024
        open("/proc/self/clear_refs", "w").write("5")  # the peak so far: forgotten
        start = rss("VmRSS:")
        ds = load_dataset(cfg, {str(tmp_path / 'cache')!r})
        print(rss("VmHWM:") - start, ds.X.shape)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    peak, shape = out.stdout.split(maxsplit=1)
    assert shape.strip() == "(24000, 500)"
    assert int(peak) < 32e6, f"peak RSS +{int(peak) / 1e6:.1f} MB converting 48 MB"


def test_a_changed_store_is_made_again_and_its_old_entry_removed(tmp_path):
    X, y = data()
    root = store(tmp_path / "my.zarr", X, y, chunks=(N, 8))
    cfg = ZarrData(path=str(root / "X"), target=str(root / "y"))
    first = load_dataset(cfg, tmp_path / "cache")
    assert load_dataset(cfg, tmp_path / "cache").path == first.path  # unchanged: the same entry
    X2 = X.copy()
    X2[3, 9] += 1.0  # one chunk rewritten
    zarr.open_array(str(root / "X"), mode="r+")[:, 8:16] = X2[:, 8:16]
    second = load_dataset(cfg, tmp_path / "cache")
    assert second.path != first.path and not first.path.exists()
    np.testing.assert_array_equal(second.X, X2)
    chunk = root / "X" / "c" / "0" / "1"  # the same bytes written again: a new time, made again
    os.utime(chunk, ns=(chunk.stat().st_atime_ns, chunk.stat().st_mtime_ns + 10**9))
    assert cache_key(cfg) != second.path.name


def bad_stores(folder):
    X, y = data()
    store(folder / "g.zarr", X, y)
    np.save(folder / "X.npy", X)
    zarr.create_array(str(folder / "flat.zarr"), shape=(N,), dtype="f8")
    zarr.create_array(str(folder / "short.zarr"), shape=(N - 1,), dtype="f8")
    zarr.create_array(str(folder / "words.zarr"), shape=(N,), dtype="<U2", zarr_format=2)  # v3: no spec for it
    (folder / "empty").mkdir()
    X[3, 2] = np.inf
    zarr.create_array(str(folder / "inf.zarr"), shape=X.shape, chunks=(N, 4), dtype="f8")[:] = X
    y = y.copy()
    y[9] = np.nan
    zarr.create_array(str(folder / "ynan.zarr"), shape=y.shape, dtype="f8")[:] = y


@pytest.mark.parametrize("cfg,message", [
    (dict(path=None, target="g.zarr/y"), r"The 'path' parameter of data 'zarr' must name a zarr array .*Got None"),
    (dict(path="g.zarr/X"), r"The 'target' parameter of data 'zarr' must name .* Got neither instead\."),
    (dict(path="nope.zarr", target="g.zarr/y"), r"The 'path' parameter of data 'zarr' names nothing: nope\.zarr"),
    (dict(path="X.npy", target="g.zarr/y"), r"must name a zarr array .* Got a file instead: X\.npy \(a \.npy: use "
                                            r"data=npy\)\."),
    (dict(path="empty", target="g.zarr/y"), r"must name a zarr array .* Got empty, which is not one"),
    (dict(path="g.zarr", target="g.zarr/y"), r"must name a zarr array, not a group: g\.zarr is a group holding the "
                                             r"arrays \['X', 'y'\]; name one \(e\.g\. data\.path=g\.zarr/X\)\."),
    (dict(path="flat.zarr", target="g.zarr/y"), r"must name a 2-D .* Got shape \(240,\) in flat\.zarr instead\."),
    (dict(path="words.zarr", target="g.zarr/y"), r"must name a 2-D"),
    (dict(path="g.zarr/X", target="short.zarr"), r"The 'target' parameter of data 'zarr' must name n_samples "
                                                 r"\(240\) values, one per row of g\.zarr/X\. Got shape \(239,\)"),
    (dict(path="g.zarr/X", target="words.zarr"), r"The 'target' parameter of data 'zarr' must name numbers\. "
                                                 r"Got <U2 in words\.zarr instead\."),
    (dict(path="g.zarr/X", target="missing.zarr"), r"The 'target' parameter of data 'zarr' names nothing"),
    (dict(path="g.zarr/X", target_column=30), r"The 'target_column' parameter of data 'zarr' must be a column of "
                                              r"the 30 of g\.zarr/X .* Got 30 instead\."),
])
def test_bad_stores_are_one_line_errors_before_anything_is_made(tmp_path, cfg, message):
    bad_stores(tmp_path)
    with pytest.raises(ValueError, match=message) as error:
        cache_key(validate_data_config({"name": "zarr", **cfg}), tmp_path)
    assert "\n" not in str(error.value)


def test_an_array_of_strings_is_refused(tmp_path):
    zarr.create_array(str(tmp_path / "w.zarr"), shape=(4, 3), dtype="<U2", zarr_format=2)
    with pytest.raises(DataError, match=r"The 'path' parameter of data 'zarr' must name an array of numbers "
                                        r"\(bool, int, uint, float\)\. Got <U2 in w\.zarr instead\."):
        cache_key(ZarrData(path="w.zarr", target_column=0), tmp_path)


@pytest.mark.parametrize("cfg,message", [
    (dict(path="inf.zarr", target="g.zarr/y"), r"The 'path' parameter .* finite values\. Got inf at row 3, "
                                               r"column 2 of inf\.zarr instead\."),
    (dict(path="g.zarr/X", target="ynan.zarr"), r"The 'target' parameter .* finite values\. Got nan at entry 9 "
                                                r"of ynan\.zarr instead\."),
])
def test_values_that_are_not_finite_are_named_while_reading(tmp_path, cfg, message):
    bad_stores(tmp_path)
    with pytest.raises(DataError, match=message):
        load_dataset(ZarrData(**cfg), tmp_path / "cache", base_dir=tmp_path)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("zarr-")]  # nothing half made
