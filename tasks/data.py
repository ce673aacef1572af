"""Datasets from their config, cached on disk and memory-mapped when read.

Every dataset is a pure function of its config (and, for files, of the file's
size and modification time), so a cache keyed by a hash of the config is safe:
a sweep over solver settings makes each dataset once, and concurrent jobs that
race to make the same one each write to a private folder and keep the first.

Cache layout: ``<cache_dir>/<name>-<hash>/`` holding ``X.npy`` (dense, Fortran
order: feature columns contiguous) or ``X_data.npy``/``X_indices.npy``/
``X_indptr.npy`` (CSR), ``y.npy``, optionally ``coef.npy`` (the true
coefficients of a synthetic set) and ``meta.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import scipy.sparse as sp

from solvers.glm.checks import Either, Integer, Options, Real, check_fields, ruled

# Progress hook: called with (done, total) while a dataset is being made.
ProgressFn = Callable[[int, int], None]

SHIPPED_SKLEARN_SETS = ("diabetes", "breast_cancer", "iris", "wine", "digits")
CORRELATION_KINDS = ("equicorrelated", "ar1")
DTYPES = ("float32", "float64")
_BLOCK = 256  # columns generated per step: fixed, so the output never depends on it
ADDED_LATER = {"n_groups": 1}  # fields hashed into the cache key only when not at this default


# ---------------------------------------------------------------- configs ---
@dataclass
class SyntheticDenseData:
    """Dense Gaussian design with a sparse true coefficient vector.

    y = X @ coef + noise * std(X @ coef) * eps. ``correlation`` is rho: every
    pair of features has correlation rho (equicorrelated) or features j, k have
    rho**|j-k| (ar1). ``n_groups`` (equicorrelated only) cuts the features into
    that many contiguous groups, equicorrelated within a group and independent
    across groups (features from independent sources; 1: all features one group).
    Classification models use sign(y) as labels.
    """

    name: str = "synthetic_dense"
    n_samples: int = ruled(5000, Integer(1))
    n_features: int = ruled(4000, Integer(1))
    n_informative: int = ruled(40, Integer(1))
    correlation: float = ruled(0.5, Real(0, 1, "left"))
    correlation_kind: str = ruled("equicorrelated", Options(CORRELATION_KINDS))
    noise: float = ruled(0.1, Real(0))
    dtype: str = ruled("float64", Options(DTYPES))
    seed: int = ruled(0, Integer(0))
    n_groups: int = ruled(1, Integer(1))


@dataclass
class SyntheticSparseData:
    """Sparse design (each entry non-zero with probability ``density``)."""

    name: str = "synthetic_sparse"
    n_samples: int = ruled(20000, Integer(1))
    n_features: int = ruled(2000, Integer(1))
    density: float = ruled(0.01, Real(0, 1, "right"))
    n_informative: int = ruled(40, Integer(1))
    noise: float = ruled(0.1, Real(0))
    dtype: str = ruled("float64", Options(DTYPES))
    seed: int = ruled(0, Integer(0))


@dataclass
class LibsvmData:
    """A LIBSVM / svmlight text file (relative paths start at the project root)."""

    name: str = "libsvm"
    path: str = "../shared/datasets/w8a"
    n_features: Optional[int] = ruled(None, Either(None, Integer(1)))
    max_samples: Optional[int] = ruled(None, Either(None, Integer(1)))  # the first rows only (quick looks, tests)
    dtype: str = ruled("float64", Options(DTYPES))


@dataclass
class SklearnData:
    """One of scikit-learn's shipped datasets (no download)."""

    name: str = "sklearn"
    dataset: str = ruled("diabetes", Options(SHIPPED_SKLEARN_SETS))
    standardize: bool = True


@dataclass
class SphereData:
    """A set that needs a nonlinearity (DistBelief's MLP): Gaussian features, y = +1
    inside a sphere of the first ``n_informative`` features, -1 outside (radius at
    the median: balanced). No linear model does much better than chance."""

    name: str = "sphere"
    n_samples: int = ruled(20000, Integer(1))
    n_features: int = ruled(20, Integer(1))
    n_informative: int = ruled(4, Integer(1))
    seed: int = ruled(0, Integer(0))


DATA_CONFIGS = {c.name: c for c in (SyntheticDenseData, SyntheticSparseData, LibsvmData, SklearnData, SphereData)}


@dataclass
class Dataset:
    X: Any  # np.ndarray / np.memmap (n_samples, n_features), or scipy.sparse CSR
    y: np.ndarray
    coef: Optional[np.ndarray]
    path: Path  # the cache folder

    @property
    def shape(self) -> tuple:
        return self.X.shape

    @property
    def nbytes(self) -> int:
        if sp.issparse(self.X):
            return self.X.data.nbytes + self.X.indices.nbytes + self.X.indptr.nbytes
        return self.X.nbytes


# ------------------------------------------------------------- validation ---
def validate_data_config(cfg: Any) -> Any:
    """Return the config as its dataclass, or raise a one-line ValueError."""
    cfg = dict(cfg) if not dataclasses.is_dataclass(cfg) else dataclasses.asdict(cfg)
    kind = cfg.get("name")
    if kind not in DATA_CONFIGS:
        raise ValueError(f"Unknown data '{kind}'. Choose one of {sorted(DATA_CONFIGS)}.")
    fields = {f.name for f in dataclasses.fields(DATA_CONFIGS[kind])}
    unknown = sorted(set(cfg) - fields)
    if unknown:
        raise ValueError(f"Unknown key(s) {unknown} for data '{kind}'. Known: {sorted(fields)}.")
    c = check_fields(f"data '{kind}'", DATA_CONFIGS[kind](**cfg))
    if hasattr(c, "n_informative") and c.n_informative > c.n_features:
        raise ValueError(f"The 'n_informative' parameter of data '{kind}' must be an int <= n_features "
                         f"({c.n_features}). Got {c.n_informative} instead.")
    if getattr(c, "n_groups", 1) > 1 and (c.correlation_kind != "equicorrelated" or c.n_groups > c.n_features):
        raise ValueError(f"The 'n_groups' parameter of data '{kind}' must be 1 with correlation_kind "
                         f"{c.correlation_kind!r}, and at most n_features ({c.n_features}). Got {c.n_groups} instead.")
    return c


# ------------------------------------------------------------------ cache ---
def resolve_path(path: str, base_dir: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else (base_dir / p).resolve()


def cache_key(cfg: Any, base_dir: Path = Path(".")) -> str:
    """Hash of the config (and of the source file's identity for file datasets)."""
    c = validate_data_config(cfg)
    fields = {k: v for k, v in dataclasses.asdict(c).items()
              if not (k in ADDED_LATER and v == ADDED_LATER[k])}  # caches made before a field existed stay valid
    if c.name == "libsvm":
        src = resolve_path(c.path, base_dir)
        stat = _stat_or_fail(src)
        fields["path"] = str(src)
        fields["source"] = [stat.st_size, stat.st_mtime_ns]
    blob = json.dumps(fields, sort_keys=True).encode()
    return f"{c.name}-{hashlib.sha256(blob).hexdigest()[:12]}"


def load_dataset(cfg: Any, cache_dir: Path, base_dir: Path = Path("."),
                 progress: Optional[ProgressFn] = None) -> Dataset:
    """Make the dataset once (into the cache), then return it memory-mapped."""
    c = validate_data_config(cfg)
    folder = Path(cache_dir) / cache_key(c, base_dir)
    if not (folder / "meta.json").exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
        try:
            MAKERS[c.name](c, tmp, base_dir, progress or (lambda done, total: None))
            (tmp / "meta.json").write_text(json.dumps({"config": dataclasses.asdict(c)}, indent=1))
            try:
                os.rename(tmp, folder)  # atomic; fails if a concurrent job won the race
            except OSError:
                if not (folder / "meta.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return read_cached(folder)


def read_cached(folder: Path) -> Dataset:
    def load(name: str) -> np.ndarray:
        return np.load(folder / name, mmap_mode="r")

    if (folder / "X.npy").exists():
        X = load("X.npy")
    else:
        shape = tuple(json.loads((folder / "shape.json").read_text()))
        X = sp.csr_matrix((load("X_data.npy"), load("X_indices.npy"), load("X_indptr.npy")),
                          shape=shape, copy=False)
    coef = load("coef.npy") if (folder / "coef.npy").exists() else None
    return Dataset(X=X, y=load("y.npy"), coef=coef, path=folder)


def _save_sparse(X: sp.spmatrix, folder: Path) -> None:
    X = sp.csr_matrix(X)
    X.sum_duplicates()
    np.save(folder / "X_data.npy", X.data)
    np.save(folder / "X_indices.npy", X.indices)
    np.save(folder / "X_indptr.npy", X.indptr)
    (folder / "shape.json").write_text(json.dumps(list(X.shape)))


# ----------------------------------------------------------------- makers ---
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


def make_synthetic_sparse(c: SyntheticSparseData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    rng = np.random.default_rng(c.seed)
    X = sp.random(c.n_samples, c.n_features, density=c.density, format="csr", dtype=c.dtype,
                  random_state=rng, data_rvs=rng.standard_normal)
    progress(1, 2)
    coef = _true_coef(rng, c.n_features, c.n_informative)
    y = _targets(X @ coef, c.noise, rng)
    _save_sparse(X, out)
    np.save(out / "y.npy", y)
    np.save(out / "coef.npy", coef)
    progress(2, 2)


def _stat_or_fail(path: Path) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"LIBSVM file not found: {path} (set data.path=/path/to/file)") from None


def _first_malformed_line(path: Path) -> Optional[tuple]:
    """(line number, text) of the first line that is not 'label idx:value ...'."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            text = raw.decode("utf-8", errors="replace").split("#", 1)[0].strip()
            if not text:
                continue
            label, *pairs = text.split()
            try:
                [float(v) for v in label.split(",")]
                for pair in pairs:
                    key, value = pair.split(":")
                    if key != "qid":
                        int(key)
                    float(value)
            except ValueError:
                return number, raw.decode("utf-8", errors="replace").rstrip("\n")
    return None


def make_libsvm(c: LibsvmData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    from sklearn.datasets import load_svmlight_file

    path = resolve_path(c.path, base_dir)
    _stat_or_fail(path)
    try:
        X, y = load_svmlight_file(str(path), n_features=c.n_features, dtype=np.dtype(c.dtype))
    except ValueError as error:
        bad = _first_malformed_line(path)
        where = f"line {bad[0]}: {bad[1][:80]!r}" if bad else "a line the loader rejected"
        raise ValueError(f"Malformed LIBSVM file {path}, {where} ({error})") from None
    if c.max_samples is not None:
        X, y = X[: c.max_samples], y[: c.max_samples]
    progress(1, 2)
    _save_sparse(X, out)
    np.save(out / "y.npy", np.asarray(y, dtype=np.float64))
    progress(2, 2)


def make_sklearn(c: SklearnData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    import sklearn.datasets
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(sklearn.datasets, f"load_{c.dataset}")(return_X_y=True)
    if c.standardize:
        X = StandardScaler().fit_transform(X)
    np.save(out / "X.npy", np.asfortranarray(X, dtype=np.float64))
    np.save(out / "y.npy", np.asarray(y, dtype=np.float64))
    progress(1, 1)


def make_sphere(c: SphereData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    rng = np.random.default_rng(c.seed)
    X = rng.standard_normal((c.n_samples, c.n_features))
    r2 = np.sum(X[:, :c.n_informative] ** 2, axis=1)
    np.save(out / "X.npy", X)  # C order: DistBelief reads rows
    np.save(out / "y.npy", np.where(r2 <= np.median(r2), 1.0, -1.0))
    progress(1, 1)


MAKERS = {
    "sphere": make_sphere,
    "synthetic_dense": make_synthetic_dense,
    "synthetic_sparse": make_synthetic_sparse,
    "libsvm": make_libsvm,
    "sklearn": make_sklearn,
}
