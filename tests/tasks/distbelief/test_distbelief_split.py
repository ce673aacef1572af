"""The DistBelief train/test split: seeded, shuffled, a partition of the rows."""

import numpy as np

from tasks.data import read_cached
from tasks.data.cache import seal
from tasks.distbelief.common import data_spec, eval_rows, load_rows


def sorted_by_label(tmp_path, n=500):
    """A file whose last 20% is one class (as w8a almost is)."""
    folder = tmp_path / "sorted"
    folder.mkdir()
    np.save(folder / "X.npy", np.arange(n, dtype=float)[:, None] * np.ones((1, 3)))
    np.save(folder / "y.npy", np.where(np.arange(n) < int(0.8 * n), 1.0, -1.0) * -1)  # last 20%: +1
    seal(folder, {})
    return read_cached(folder)


def test_split_is_a_seeded_shuffled_partition(tmp_path):
    ds = sorted_by_label(tmp_path)
    spec = data_spec(ds, 0.2, shuffle_seed=3)
    parts = [load_rows(spec, "logistic", *spec.replica_rows(k, 3)) for k in range(3)]
    train_rows = np.concatenate([X[:, 0] for X, _ in parts]).astype(int)
    test = load_rows(spec, "logistic", spec.n_train, spec.n_rows)
    all_rows = np.concatenate([train_rows, test[0][:, 0].astype(int)])
    assert sorted(all_rows) == list(range(ds.shape[0]))  # every row once
    for X, y in parts + [test]:  # labels stay with their rows
        np.testing.assert_array_equal(y, np.where(X[:, 0] < 400, -1.0, 1.0))
    assert 0.1 < np.mean(test[1] == 1.0) < 0.35  # both classes in the test set, about as often as overall
    (_, _), (Xte, yte) = eval_rows(spec, "logistic", 10_000)
    np.testing.assert_array_equal(np.sort(Xte[:, 0]), np.sort(test[0][:, 0]))
    again = load_rows(data_spec(ds, 0.2, shuffle_seed=3), "logistic", spec.n_train, spec.n_rows)
    np.testing.assert_array_equal(again[0], test[0])


def test_no_seed_keeps_file_order(tmp_path):
    ds = sorted_by_label(tmp_path)
    spec = data_spec(ds, 0.2, shuffle_seed=None)
    X, y = load_rows(spec, "logistic", spec.n_train, spec.n_rows)
    np.testing.assert_array_equal(X[:, 0], np.arange(400, 500))
    assert set(y) == {1.0}
