"""Shards on disk (tasks/data/shards.py): the bytes and statistics of the dataset's range, made from the
driver's file, from the synthetic maker by block seeds, or streamed in chunks; keyed, checksummed, reused,
a damaged one made again, a dead writer's folder removed; the synthetic maker's ranges are the dataset."""

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks.data import SyntheticRowsData, cache_key, load_dataset
from tasks.data.makers import synthetic_rows_range
from tasks.data.rows import sample_major
from tasks.data.shards import (FromFile, FromMaker, ShardSpec, ensure_shard, held_shard, list_shards, open_shard,
                               read_chunks)

DATA = SyntheticRowsData(n_samples=3000, n_features=70, n_informative=6, block_rows=400, seed=3)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load_dataset(DATA, tmp_path_factory.mktemp("cache"))


def spec(axis, lo, hi, data=DATA):
    return ShardSpec(cache_key(data), axis, lo, hi, data.n_samples, data.n_features)


def source(ds, axis):
    path = sample_major(ds.path) if axis == "rows" else ds.path / "X.npy"
    return FromFile(str(path), str(ds.path / "y.npy"))


def test_synthetic_rows_ranges_are_the_dataset(ds):
    X = np.asarray(ds.X)
    for lo, hi in ((0, 3000), (399, 401), (1234, 2987)):
        parts = list(synthetic_rows_range(DATA, lo, hi))
        assert np.array_equal(np.concatenate([x for x, _ in parts]), X[lo:hi])
        assert np.array_equal(np.concatenate([y for _, y in parts]), np.asarray(ds.y)[lo:hi])
    assert np.isfortran(X) and abs(np.corrcoef(X[:, 0], X[:, 1])[0, 1] - DATA.correlation) < 0.06


@pytest.mark.parametrize("axis,lo,hi", [("rows", 700, 2100), ("columns", 9, 33)])
def test_a_shard_holds_its_range_and_its_statistics(ds, tmp_path, axis, lo, hi):
    row = ensure_shard(spec(axis, lo, hi), source(ds, axis), str(tmp_path))
    folder = Path(row["path"])
    X = np.load(folder / "X.npy", mmap_mode="r")
    stats = np.load(folder / "stats.npy")
    whole = np.asarray(ds.X)
    if axis == "rows":  # C order, each row padded with zeros to an aligned width
        want, y = whole[lo:hi], np.asarray(ds.y)[lo:hi]
        assert not np.isfortran(X) and X.shape[1] >= DATA.n_features and not np.any(X[:, DATA.n_features:])
        assert np.array_equal(X[:, :DATA.n_features], want)
        coords = want
    else:  # Fortran order: a feature a contiguous run
        want, y = whole[:, lo:hi], np.asarray(ds.y)
        assert np.isfortran(X) and np.array_equal(X, want)
        coords = want.T
    assert np.array_equal(np.load(folder / "y.npy"), y)
    np.testing.assert_allclose(stats[0], coords.sum(axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats[1], (coords ** 2).sum(axis=1), rtol=1e-12)
    with open(folder / "X.npy", "rb") as f:  # every coordinate aligned for O_DIRECT
        assert f.read(4096)[-1:] == b"\n"
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta["files"]) == {"X.npy", "y.npy", "stats.npy"}
    assert meta["config"]["shard"] == dataclasses.asdict(spec(axis, lo, hi))
    assert row["made"] and row["host"] == socket.gethostname()


@pytest.mark.parametrize("axis,lo,hi", [("rows", 401, 1999), ("columns", 0, 70)])
def test_the_maker_makes_the_same_bytes_as_the_file(ds, tmp_path, axis, lo, hi):
    a = ensure_shard(spec(axis, lo, hi), source(ds, axis), str(tmp_path / "a"))
    b = ensure_shard(spec(axis, lo, hi), FromMaker(dataclasses.asdict(DATA)), str(tmp_path / "b"))
    assert a["xxh3_128"] == b["xxh3_128"] and a["bytes"] == b["bytes"]
    for name in ("y.npy", "stats.npy"):
        assert np.array_equal(np.load(Path(a["path"]) / name), np.load(Path(b["path"]) / name))


def test_a_shard_is_reused_and_a_damaged_one_made_again(ds, tmp_path):
    s = spec("rows", 0, 1000)
    first = ensure_shard(s, source(ds, "rows"), str(tmp_path))
    assert first["made"] and not ensure_shard(s, source(ds, "rows"), str(tmp_path))["made"]
    assert held_shard(s, str(tmp_path))["xxh3_128"] == first["xxh3_128"]
    assert [r["lo"] for r in list_shards(str(tmp_path))] == [0]
    # a flipped byte is found by the checksum in a process that has not checked this shard yet
    path = Path(first["path"]) / "X.npy"
    with open(path, "r+b") as f:
        f.seek(5000)
        byte = f.read(1)
        f.seek(5000)
        f.write(bytes([byte[0] ^ 1]))
    code = ("import sys; from tasks.data.shards import open_shard, ShardSpec; "
            f"print(open_shard(ShardSpec(*{tuple(dataclasses.astuple(s))!r}), {str(tmp_path)!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert done.stdout.strip() == "None", done.stderr
    assert not Path(first["path"]).exists()  # removed: made again on the next ensure
    again = ensure_shard(s, source(ds, "rows"), str(tmp_path))
    assert again["made"] and again["xxh3_128"] == first["xxh3_128"]
    # a truncated file: found by its size, in this process too
    os.truncate(path, path.stat().st_size - 8)
    assert open_shard(s, str(tmp_path)) is None


def test_a_dead_writers_folder_is_removed_and_nothing_half_written_is_used(ds, tmp_path):
    s = spec("columns", 10, 20)
    parent = s.folder(tmp_path).parent
    parent.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = parent / f"{s.name}.tmp-{socket.gethostname()}-{dead.pid}-abcdef"
    left.mkdir()
    (left / "X.npy").write_bytes(b"half")
    assert open_shard(s, str(tmp_path)) is None  # a temporary folder is not the shard
    ensure_shard(s, source(ds, "columns"), str(tmp_path))
    assert not left.exists() and [p.name for p in parent.iterdir()] == [s.name]


def test_read_chunks_are_whole_coordinates_of_the_range(ds):
    s = spec("columns", 5, 25)
    chunks = list(read_chunks(ds.path / "X.npy", s, chunk_bytes=3 * s.coord_bytes + 1))
    assert [c.shape[0] for _, c in chunks] == [3, 3, 3, 3, 3, 3, 2]
    assert np.array_equal(np.concatenate([c for _, c in chunks]), np.asarray(ds.X)[:, 5:25].T)


def test_bad_specs_and_sources_say_so(ds, tmp_path):
    with pytest.raises(ValueError, match=r"The 'axis' parameter of ShardSpec must be one of \('rows', 'columns'\)"):
        spec("diagonal", 0, 1)
    with pytest.raises(ValueError, match=r"0 <= lo < hi <= 70 \(columns\). Got \[5, 71\)"):
        spec("columns", 5, 71)
    with pytest.raises(Exception, match=r"a rows shard is cut from"):  # X.npy is Fortran: not a rows shard's source
        ensure_shard(spec("rows", 0, 10), FromFile(str(ds.path / "X.npy"), str(ds.path / "y.npy")), str(tmp_path))
    other = dataclasses.replace(DATA, name="synthetic_rows", n_samples=10)
    with pytest.raises(Exception, match=r"the shard asks for float64\[3000, 70\]"):
        ensure_shard(spec("rows", 0, 10), FromMaker(dataclasses.asdict(other)), str(tmp_path))
    assert not list(Path(tmp_path).rglob("*.tmp-*"))  # a failed writer leaves nothing
