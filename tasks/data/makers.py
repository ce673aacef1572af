"""Dataset makers: each writes a dataset of its config into a folder (``X.npy`` dense,
Fortran order: feature columns contiguous, or ``X_data/X_indices/X_indptr.npy`` CSR with
``shape.json``; ``y.npy``; ``coef.npy`` for synthetic sets), reporting progress, and
says up front how many bytes it will write (so a dataset larger than the free disk
is refused before anything is written).

``synthetic_rows`` is made a block of rows at a time, each block from its own seed:
:func:`synthetic_rows_range` makes any range of samples alone (a worker's shard), the same
numbers the whole dataset holds there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from tasks.data.configs import SklearnData, SphereData, SyntheticDenseData, SyntheticRowsData, SyntheticSparseData
from tasks.data.errors import DataError

# Progress hook: called with (done, total) while a dataset is being made.
ProgressFn = Callable[[int, int], None]
_BLOCK = 256  # columns generated per step: fixed, so the output never depends on it


def save_sparse(X: sp.spmatrix, folder: Path) -> None:
    X = sp.csr_matrix(X)
    X.sum_duplicates()
    np.save(folder / "X_data.npy", X.data)
    np.save(folder / "X_indices.npy", X.indices)
    np.save(folder / "X_indptr.npy", X.indptr)
    (folder / "shape.json").write_text(json.dumps(list(X.shape)))


def binary_target(y: np.ndarray, positive_class, owner: str) -> np.ndarray:
    """y as it is, or +1 for ``positive_class`` and -1 for the rest (a class it must have)."""
    if positive_class is None:
        return y
    classes = np.unique(y)
    if positive_class not in classes:
        raise DataError(f"The 'positive_class' parameter of data '{owner}' must be one of the target's "
                        f"classes {classes[:20].tolist()}. Got {positive_class!r} instead.")
    return np.where(y == positive_class, 1.0, -1.0)


def _true_coef(rng: np.random.Generator, n_features: int, n_informative: int) -> np.ndarray:
    coef = np.zeros(n_features)
    support = rng.choice(n_features, size=n_informative, replace=False)
    coef[support] = rng.standard_normal(n_informative)
    return coef


def _targets(signal: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    scale = noise * (signal.std() or 1.0)
    return signal + scale * rng.standard_normal(signal.shape[0])


def make_synthetic_dense(c: SyntheticDenseData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    rng = np.random.default_rng(c.seed)
    n, p, rho = c.n_samples, c.n_features, c.correlation
    # Written column block by column block straight into the .npy file: a
    # dataset bigger than RAM can still be made.
    X = np.lib.format.open_memmap(out / "X.npy", mode="w+", dtype=c.dtype, shape=(n, p), fortran_order=True)
    common = rng.standard_normal(n)  # the shared factor of equicorrelated features (of group 0)
    if c.n_groups > 1:  # one factor per group (drawn after group 0's: n_groups = 1 keeps the old data)
        common = np.column_stack([common, rng.standard_normal((n, c.n_groups - 1))])
    group = np.minimum(np.arange(p) * c.n_groups // p, c.n_groups - 1)  # contiguous, balanced groups
    previous = None  # last column of the previous block (ar1)
    for start in range(0, p, _BLOCK):
        stop = min(start + _BLOCK, p)
        block = rng.standard_normal((n, stop - start))
        if c.correlation_kind == "equicorrelated":
            shared = common[:, None] if c.n_groups == 1 else common[:, group[start:stop]]
            block = np.sqrt(1 - rho) * block + np.sqrt(rho) * shared
        else:  # ar1: x_j = rho x_{j-1} + sqrt(1 - rho^2) z_j keeps unit variance
            for j in range(block.shape[1]):
                if previous is not None:
                    block[:, j] = rho * previous + np.sqrt(1 - rho**2) * block[:, j]
                previous = block[:, j]
        X[:, start:stop] = block
        progress(stop, p)
    coef = _true_coef(rng, p, c.n_informative)
    support = np.flatnonzero(coef)
    y = _targets(X[:, support] @ coef[support], c.noise, rng)
    X.flush()
    del X
    np.save(out / "y.npy", y)
    np.save(out / "coef.npy", coef)


COEF_STREAM = 1 << 32  # the coefficients' seed is [seed, COEF_STREAM]: no block's ([seed, block], block < 2^32)


def synthetic_rows_coef(c: SyntheticRowsData) -> np.ndarray:
    """The true coefficients of a synthetic_rows dataset (from its seed alone)."""
    return _true_coef(np.random.default_rng([c.seed, COEF_STREAM]), c.n_features, c.n_informative)


def synthetic_rows_block(c: SyntheticRowsData, block: int, coef: np.ndarray):
    """(X, y) of block ``block``: samples [block * block_rows, ...), from the seed [seed, block]."""
    lo = block * c.block_rows
    rows = min(c.block_rows, c.n_samples - lo)
    rng = np.random.default_rng([c.seed, block])
    rho = c.correlation
    X = np.sqrt(1 - rho) * rng.standard_normal((rows, c.n_features)) + np.sqrt(rho) * rng.standard_normal((rows, 1))
    # std(X coef) of the distribution (each block the same scale): (1 - rho) ||coef||^2 + rho (sum coef)^2
    scale = c.noise * (np.sqrt((1 - rho) * float(coef @ coef) + rho * float(coef.sum()) ** 2) or 1.0)
    y = X @ coef + scale * rng.standard_normal(rows)
    return X.astype(c.dtype, copy=False), y


def synthetic_rows_range(c: SyntheticRowsData, lo: int, hi: int):
    """Yields (X, y) of samples [lo, hi), a block (or a part of one) at a time."""
    coef = synthetic_rows_coef(c)
    for block in range(lo // c.block_rows, -(-hi // c.block_rows)):
        start = block * c.block_rows
        X, y = synthetic_rows_block(c, block, coef)
        a, b = max(lo, start) - start, min(hi, start + X.shape[0]) - start
        yield X[a:b], y[a:b]


def make_synthetic_rows(c: SyntheticRowsData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    """The whole dataset, a block of rows at a time, into the cache's Fortran-order X.npy."""
    n, p = c.n_samples, c.n_features
    X = np.lib.format.open_memmap(out / "X.npy", mode="w+", dtype=c.dtype, shape=(n, p), fortran_order=True)
    y = np.empty(n)
    done = 0
    for Xb, yb in synthetic_rows_range(c, 0, n):
        X[done:done + Xb.shape[0]] = Xb
        y[done:done + Xb.shape[0]] = yb
        done += Xb.shape[0]
        progress(done, n)
    X.flush()
    del X
    np.save(out / "y.npy", y)
    np.save(out / "coef.npy", synthetic_rows_coef(c))


def make_synthetic_sparse(c: SyntheticSparseData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    rng = np.random.default_rng(c.seed)
    X = sp.random(c.n_samples, c.n_features, density=c.density, format="csr", dtype=c.dtype,
                  random_state=rng, data_rvs=rng.standard_normal)
    progress(1, 2)
    coef = _true_coef(rng, c.n_features, c.n_informative)
    y = _targets(X @ coef, c.noise, rng)
    save_sparse(X, out)
    np.save(out / "y.npy", y)
    np.save(out / "coef.npy", coef)
    progress(2, 2)


def make_sklearn(c: SklearnData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    import sklearn.datasets
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(sklearn.datasets, f"load_{c.dataset}")(return_X_y=True)
    if c.standardize:
        X = StandardScaler().fit_transform(X)
    np.save(out / "X.npy", np.asfortranarray(X, dtype=np.float64))
    np.save(out / "y.npy", binary_target(np.asarray(y, dtype=np.float64), c.positive_class, c.name))
    progress(1, 1)


def make_sphere(c: SphereData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    rng = np.random.default_rng(c.seed)
    X = rng.standard_normal((c.n_samples, c.n_features))
    r2 = np.sum(X[:, :c.n_informative] ** 2, axis=1)
    np.save(out / "X.npy", X)  # C order: DistBelief reads rows
    np.save(out / "y.npy", np.where(r2 <= np.median(r2), 1.0, -1.0))
    progress(1, 1)


def planned_bytes(c, base_dir: Path) -> int:
    """About how many bytes making the dataset writes (checked against the free disk)."""
    itemsize = np.dtype(getattr(c, "dtype", "float64")).itemsize
    if c.name in ("synthetic_dense", "synthetic_rows"):
        return c.n_samples * c.n_features * itemsize + 16 * (c.n_samples + c.n_features)
    if c.name == "synthetic_sparse":
        nnz = c.density * c.n_samples * c.n_features
        return int(nnz * (itemsize + 4) + 8 * c.n_samples + 16 * c.n_features)
    if c.name == "sphere":
        return 8 * c.n_samples * (c.n_features + 1)
    if c.name in ("libsvm", "criteo"):  # text: an entry takes more bytes of text than in the store
        from tasks.data.configs import resolve_path
        from tasks.data.streams import compression

        path = resolve_path(c.path, base_dir)
        return path.stat().st_size * (1 if compression(path) == "none" else 8)  # text compresses ~5-10x
    if c.name == "synthetic_criteo":  # int32 indices, no values; offsets and labels
        return c.n_samples * (4 * c.nnz_per_row + 16) + 16 * (1 << c.hash_bits)
    return 0  # scikit-learn's shipped sets: kilobytes (your own .npy: tasks.data.npy.planned_bytes)


def binary_target_in_place(path: Path, positive_class, owner: str, step: int = 1 << 20) -> None:
    """:func:`binary_target` on a ``y.npy`` on disk, a block at a time (the converters' targets
    are written as they are parsed, never whole in RAM)."""
    if positive_class is None:
        return
    y = np.load(path, mmap_mode="r+")
    if not any(np.any(y[i:i + step] == positive_class) for i in range(0, y.shape[0], step)):
        classes = np.zeros(0)
        for i in range(0, y.shape[0], step):  # the first classes, for the message
            classes = np.unique(np.concatenate([classes, np.unique(y[i:i + step])]))[:21]
        raise DataError(f"The 'positive_class' parameter of data '{owner}' must be one of the target's "
                        f"classes {classes[:20].tolist()}. Got {positive_class!r} instead.")
    for i in range(0, y.shape[0], step):
        y[i:i + step] = np.where(y[i:i + step] == positive_class, 1.0, -1.0)
    y.flush()
    del y
