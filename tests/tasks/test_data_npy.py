"""data=npy: a user's own .npy brought into the cache's layout in chunks (or used in place).

Oracles: the arrays the test wrote (np.save, before any of our code ran); scikit-learn's Lasso on
them; the problem built in RAM from them by make_problem; the process's peak RSS (VmHWM, reset
through /proc/self/clear_refs) against the file's size; the files' own bytes on disk."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import Lasso

from solvers.storage.reader import write_coordinate_major
from solvers.duhl.solver import DuHL
from tasks.data import DataError, NpyData, cache_key, load_dataset, validate_data_config
from tasks.data import npy
from tasks.problems import build_problem, build_problem_on_disk

ROOT = Path(__file__).resolve().parents[2]
N, P = 300, 40


def data(seed=0, n=N, p=P):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    w = np.zeros(p)
    w[:6] = rng.standard_normal(6)
    return X, X @ w + 0.1 * rng.standard_normal(n)


def save(folder, X, y=None, name="X.npy", fortran=False, dtype=None):
    folder.mkdir(parents=True, exist_ok=True)
    X = np.asarray(X, dtype=dtype)
    np.save(folder / name, np.asfortranarray(X) if fortran else np.ascontiguousarray(X))
    if y is not None:
        np.save(folder / "y.npy", y)
    return folder / name


# order, source dtype, configured dtype, target in a column (its index) or a file (None)
SOURCES = [("C", "float64", None, None), ("C", "float32", None, -1), ("C", "float16", None, 3),
           ("F", "float64", None, None), ("F", "float64", "float32", 0), ("F", "float32", None, None)]


@pytest.mark.parametrize("order,dtype,out,column", SOURCES)
def test_the_cached_matrix_is_the_users_in_fortran_order(tmp_path, order, dtype, out, column):
    X, y = data()
    X = X.astype(dtype)
    stored = X if column is None else np.insert(X, column % (P + 1), y.astype(dtype), axis=1)
    path = save(tmp_path / "src", stored, None if column is not None else y, fortran=order == "F")
    cfg = NpyData(path=str(path), **({"target": str(tmp_path / "src" / "y.npy")} if column is None
                                     else {"target_column": column}), dtype=out)
    ds = load_dataset(cfg, tmp_path / "cache")
    expect = np.dtype(out or (dtype if dtype != "float16" else "float64"))
    assert ds.X.dtype == expect and ds.X.shape == (N, P) and np.isfortran(ds.X)
    np.testing.assert_array_equal(ds.X, X.astype(expect))
    np.testing.assert_array_equal(ds.y, y if column is None else y.astype(dtype).astype(np.float64))
    # the disk tier's alignment: data at 4096 bytes, whether converted or the user's own file
    assert os.path.islink(ds.path / "X.npy") is False  # np.save's 128-byte header: a converted copy
    with open(ds.path / "X.npy", "rb") as f:
        f.seek(4096)
        assert f.read(expect.itemsize) == np.asarray(ds.X[:1, :1], dtype=expect).tobytes()


def test_an_aligned_fortran_file_is_used_in_place_and_checked(tmp_path):
    X, y = data()
    src = tmp_path / "src"
    src.mkdir()
    write_coordinate_major(src / "X.npy", P, N, (X[:, j:j + 16].T for j in range(0, P, 16)), fortran=True)
    np.save(src / "y.npy", y)
    before = (src / "X.npy").read_bytes()
    ds = load_dataset(NpyData(path=str(src / "X.npy"), target=str(src / "y.npy")), tmp_path / "cache")
    assert os.readlink(ds.path / "X.npy") == str(src / "X.npy")
    np.testing.assert_array_equal(ds.X, X)
    on_disk = build_problem_on_disk({"name": "lasso", "alpha": 0.1, "fit_intercept": False}, ds.path, ds.y)
    np.testing.assert_array_equal(on_disk.in_memory().A, X.T)  # read through the link, O_DIRECT-aligned
    # the cache's checksum of the link is the file's, computed in the one scan (not read again)
    assert npy.xxhash.xxh3_128(before).hexdigest() in (ds.path / "meta.json").read_text()
    X[5, 7] = np.nan
    write_coordinate_major(src / "X.npy", P, N, (X[:, j:j + 16].T for j in range(0, P, 16)), fortran=True)
    with pytest.raises(DataError, match=r"The 'path' parameter of data 'npy' must name finite values\. "
                                        r"Got nan at row 5, column 7 of .*X\.npy instead\."):
        load_dataset(NpyData(path=str(src / "X.npy"), target=str(src / "y.npy")), tmp_path / "cache")
    assert (src / "X.npy").exists()  # the failed entry never touches the user's file


@pytest.mark.parametrize("order,direct", [("C", None), ("F", None), ("C", False)])
def test_duhl_with_a_host_budget_on_the_users_file_reaches_scikit_learns_lasso(tmp_path, order, direct):
    X, y = data(seed=1)
    path = save(tmp_path / "src", X, y, fortran=order == "F")
    ds = load_dataset(NpyData(path=str(path), target=str(path.parent / "y.npy")), tmp_path / "cache")
    alpha = 0.05 * np.abs(X.T @ y).max() / N
    model = {"name": "lasso", "alpha": alpha, "fit_intercept": False}
    on_disk = build_problem_on_disk(model, ds.path, ds.y, direct=direct)
    assert direct is None or not on_disk.A.matrix.direct  # direct=False: buffered reads, pages dropped
    in_ram = build_problem(model, X, y)  # from the arrays the test wrote
    loaded = on_disk.in_memory()
    np.testing.assert_array_equal(loaded.A, in_ram.A)
    np.testing.assert_array_equal(loaded.b, in_ram.b)
    np.testing.assert_allclose(loaded.sqnorm, in_ram.sqnorm, rtol=1e-12)
    assert loaded.P0 == pytest.approx(in_ram.P0, rel=1e-12)
    r = DuHL(host_budget=0.25, tol=1e-10, random_state=0).solve(on_disk)
    assert r.status == "converged" and on_disk.A.bytes_read >= X.nbytes
    sk = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(r.a, sk.coef_, atol=1e-6)


@pytest.mark.parametrize("order", ["C", "F"])
def test_conversion_ram_is_bounded_by_its_buffer_not_the_file(tmp_path, order):
    """A 96 MB float32 file converted to float64 (192 MB) through an 8 MB buffer in a fresh
    process: its peak RSS above the point where conversion starts stays far below the file
    (a whole copy would be 96 MB, its cast 192 MB; with a 1 GB buffer the C-order file's
    conversion peaks at +270 MB, measured while writing this test)."""
    X = np.random.default_rng(2).standard_normal((24_000, 1000), dtype=np.float32)  # 96 MB
    path = save(tmp_path / "src", X, np.arange(24_000.0), fortran=order == "F")
    del X
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tasks.data import NpyData, load_dataset, npy
        npy.CONVERT_BYTES = 8 << 20
        cfg = NpyData(path={str(path)!r}, target={str(path.parent / 'y.npy')!r}, dtype="float64")
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
    assert shape.strip() == "(24000, 1000)"
    # the 8 MB buffer, its cast to float64 (8 MB), the transposes and bounce buffers, the 8 MB write stage
    assert int(peak) < 40e6, f"peak RSS +{int(peak) / 1e6:.1f} MB converting 96 MB"


def test_a_changed_file_is_made_again_and_its_old_entry_removed(tmp_path):
    X, y = data()
    path = save(tmp_path / "src", X, y)
    cfg = NpyData(path=str(path), target=str(path.parent / "y.npy"))
    first = load_dataset(cfg, tmp_path / "cache")
    assert load_dataset(cfg, tmp_path / "cache").path == first.path  # unchanged: the same entry
    X2 = X.copy()
    X2[0, 0] += 1.0
    save(tmp_path / "src", X2)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))  # a later mtime, same size
    second = load_dataset(cfg, tmp_path / "cache")
    assert second.path != first.path and not first.path.exists()
    np.testing.assert_array_equal(second.X, X2)
    # another target for the same features is another entry, and stays
    np.save(tmp_path / "src" / "y2.npy", -y)
    third = load_dataset(NpyData(path=str(path), target=str(tmp_path / "src" / "y2.npy")), tmp_path / "cache")
    assert second.path.exists() and third.path.exists()
    np.testing.assert_array_equal(third.y, -y)


def bad_files(folder):
    X, y = data()
    save(folder, X, y)
    np.save(folder / "short.npy", y[:-1])
    np.save(folder / "ints.npy", np.arange(12).reshape(3, 4))
    np.save(folder / "flat.npy", y)
    np.save(folder / "words.npy", np.array(["a"] * N))
    (folder / "text.npy").write_text("not an array")
    (folder / "store.zarr").mkdir()
    (folder / "store.zarr" / "zarr.json").write_text("{}")
    X[3, 2] = np.inf
    np.save(folder / "inf.npy", X)
    y = y.copy()
    y[9] = np.nan
    np.save(folder / "ynan.npy", y)


@pytest.mark.parametrize("cfg,message", [
    (dict(path=None, target="y.npy"),
     r"The 'path' parameter of data 'npy' must name a \.npy file .*Got None instead\."),
    (dict(path="X.npy"), r"The 'target' parameter of data 'npy' must name .* Got neither instead\."),
    (dict(path="X.npy", target="y.npy", target_column=0), r"The 'target' parameter .* Got both"),
    (dict(path="nope.npy", target="y.npy"), r"The 'path' parameter of data 'npy' names no file: nope\.npy"),
    (dict(path="store.zarr", target="y.npy"), r"must name a \.npy file\. Got a directory instead: store\.zarr "
                                              r"\(a zarr store: use data=zarr\)"),
    (dict(path="text.npy", target="y.npy"), r"must name a \.npy file\. Got text\.npy, which is not one"),
    (dict(path="flat.npy", target="y.npy"), r"must name a 2-D .* Got shape \(300,\) in flat\.npy instead\."),
    (dict(path="ints.npy", target_column=0), r"must name an array of floats .* Got int64 in ints\.npy instead\."),
    (dict(path="X.npy", target="short.npy"), r"The 'target' parameter of data 'npy' must name n_samples \(300\) "
                                             r"values, one per row of X\.npy\. Got shape \(299,\) in short\.npy"),
    (dict(path="X.npy", target="words.npy"), r"The 'target' parameter of data 'npy' must name numbers\. Got <U1"),
    (dict(path="X.npy", target_column=40), r"The 'target_column' parameter of data 'npy' must be a column of the "
                                           r"40 of X\.npy .* Got 40 instead\."),
    (dict(path="X.npy", target="y.npy", dtype="float16"), r"The 'dtype' parameter of data 'npy' must be"),
])
def test_bad_files_are_one_line_errors_before_anything_is_made(tmp_path, cfg, message):
    bad_files(tmp_path)
    with pytest.raises(ValueError, match=message) as error:
        cache_key(validate_data_config({"name": "npy", **cfg}), tmp_path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("cfg,message", [
    (dict(path="inf.npy", target="y.npy"), r"The 'path' parameter .* finite values\. Got inf at row 3, column 2 "
                                           r"of inf\.npy instead\."),
    (dict(path="X.npy", target="ynan.npy"), r"The 'target' parameter .* finite values\. Got nan at entry 9 of "
                                            r"ynan\.npy instead\."),
])
def test_values_that_are_not_finite_are_named_while_reading(tmp_path, cfg, message):
    bad_files(tmp_path)
    with pytest.raises(DataError, match=message):
        load_dataset(NpyData(**cfg), tmp_path / "cache", base_dir=tmp_path)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("npy-")]  # nothing half made
