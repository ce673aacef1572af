"""The dataset cache checks itself: a damaged entry is named and rebuilt, temporaries of
dead processes are removed, a dataset larger than the free disk is refused up front."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks.data import DataError, SyntheticDenseData, cache, load_dataset, read_cached

CFG = SyntheticDenseData(n_samples=300, n_features=50, n_informative=4)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def entry(tmp_path):
    """A made entry, and the data it holds (a copy), with the process's memory of it cleared."""
    ds = load_dataset(CFG, tmp_path)
    expected = (np.array(ds.X), np.array(ds.y))
    del ds
    cache._CHECKED.clear()
    return tmp_path, expected


def _rebuilt_equal(tmp_path, expected, caplog, problem):
    with caplog.at_level("WARNING"):
        ds = load_dataset(CFG, tmp_path)
    assert any("damaged" in r.message and problem in r.message for r in caplog.records), caplog.text
    np.testing.assert_array_equal(np.asarray(ds.X), expected[0])
    np.testing.assert_array_equal(ds.y, expected[1])
    assert [p.name for p in tmp_path.iterdir()] == [ds.path.name]  # nothing left beside it


def test_a_truncated_file_is_found_by_its_size_and_rebuilt(entry, caplog):
    tmp_path, expected = entry
    X = next(tmp_path.glob("*/X.npy"))
    os.truncate(X, X.stat().st_size // 2)
    with pytest.raises(DataError, match=r"entry synthetic_dense-\w+ is damaged: X.npy has \d+ bytes, not \d+"):
        read_cached(X.parent)
    _rebuilt_equal(tmp_path, expected, caplog, "X.npy has")


def test_changed_bytes_of_the_same_size_are_found_by_the_checksum(entry, caplog):
    tmp_path, expected = entry
    X = next(tmp_path.glob("*/X.npy"))
    with open(X, "r+b") as f:  # zero a stretch in the middle, as a bad disk or a stray write would
        f.seek(X.stat().st_size // 2)
        f.write(b"\0" * 4096)
    with pytest.raises(DataError, match="X.npy has changed since it was written"):
        read_cached(X.parent)
    _rebuilt_equal(tmp_path, expected, caplog, "checksum")


def test_checksums_are_checked_once_per_process_sizes_always(entry):
    tmp_path, _ = entry
    folder = next(tmp_path.glob("synthetic_dense-*"))
    assert read_cached(folder).verified == "checksum"
    assert read_cached(folder).verified == "size and shape"


def test_a_missing_meta_json_is_rebuilt_without_error(entry, caplog):
    tmp_path, expected = entry
    next(tmp_path.glob("*/meta.json")).unlink()
    _rebuilt_equal(tmp_path, expected, caplog, "meta.json")


def test_temporaries_of_a_killed_maker_are_removed(tmp_path):
    """A process killed with SIGKILL while it makes data leaves its temporary folder; the
    next load on this host sees that process is gone and removes it."""
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from tasks.data import cache, SyntheticDenseData, load_dataset\n"
            "def slow(*args):\n"
            "    print('making', flush=True); time.sleep(60)\n"
            "cache.MAKERS['synthetic_dense'] = slow\n"
            "load_dataset(SyntheticDenseData(n_samples=10, n_features=5, n_informative=2), %r)\n"
            % (str(ROOT), str(tmp_path)))
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "making"
        leftovers = list(tmp_path.glob("*.tmp-*"))
        assert len(leftovers) == 1
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    load_dataset(CFG, tmp_path)
    assert list(tmp_path.glob("*.tmp-*")) == []


def test_a_live_makers_temporary_is_left_alone(tmp_path):
    mine = tmp_path / f"x-1.tmp-{cache.socket.gethostname()}-{os.getpid()}-abc"
    mine.mkdir(parents=True)
    load_dataset(CFG, tmp_path)
    assert mine.exists()


def test_a_dataset_larger_than_the_free_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    free = 10 ** 9
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda path: type("Usage", (), {"free": free})())
    huge = SyntheticDenseData(n_samples=50000, n_features=400000)
    with pytest.raises(DataError, match=r"needs 160.0 GB in .*, which has 1.0 GB free"):
        load_dataset(huge, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_dir_is_one_line(tmp_path):
    target = tmp_path / "file-not-dir"
    target.write_text("")
    with pytest.raises(DataError, match="The 'cache_dir' .*file-not-dir.* is not a writable folder"):
        load_dataset(CFG, target / "cache")
