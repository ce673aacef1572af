"""Dataset configs: one dataclass per kind, with its ranges (they double as the Hydra
schemas of conf/data/*.yaml), and their validation."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import scipy.sparse as sp

from solvers.glm.checks import Either, Integer, Options, Real, check_fields, ruled

SHIPPED_SKLEARN_SETS = ("diabetes", "breast_cancer", "iris", "wine", "digits")
CORRELATION_KINDS = ("equicorrelated", "ar1")
DTYPES = ("float32", "float64")
# A class of a discrete multiclass target, trained against the rest by the classifiers
POSITIVE_CLASS = Either(None, Real())


@dataclass
class SyntheticDenseData:
    """Dense Gaussian design with a sparse true coefficient vector.

    y = X @ coef + noise * std(X @ coef) * eps. ``correlation`` is rho: every
    pair of features has correlation rho (equicorrelated) or features j, k have
    rho**|j-k| (ar1). ``n_groups`` (equicorrelated only) cuts the features into
    that many contiguous groups, equicorrelated within a group and independent
    across groups (features from independent sources; 1: all features one group).
    Classification models train on y split at its median (tasks.problems.labels_for: +1 above;
    balanced classes, about 3% of them flipped by the noise at noise=0.1).
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
class SyntheticRowsData:
    """Dense Gaussian rows made a block of ``block_rows`` samples at a time, each block from its
    own seed ([seed, block]): any range of samples is made alone, on any host, the same bytes
    whoever makes it (a worker makes its own shard: tasks/data/shards.py). Each sample's features
    are equicorrelated (``correlation``: a factor shared by the sample's features); y = X coef +
    noise * std(X coef) * eps, coef with ``n_informative`` non-zeros (drawn from the seed alone).
    Classifiers train on y split at its median (+1 above)."""

    name: str = "synthetic_rows"
    n_samples: int = ruled(100000, Integer(1))
    n_features: int = ruled(512, Integer(1))
    n_informative: int = ruled(50, Integer(1))
    correlation: float = ruled(0.5, Real(0, 1, "left"))
    noise: float = ruled(0.1, Real(0))
    dtype: str = ruled("float64", Options(DTYPES))
    seed: int = ruled(0, Integer(0))
    block_rows: int = ruled(4096, Integer(1))


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
    # at least this many features (the file's own count when larger); None: the file's
    n_features: Optional[int] = ruled(None, Either(None, Integer(1)))
    max_samples: Optional[int] = ruled(None, Either(None, Integer(1)))  # the first rows only (quick looks, tests)
    dtype: str = ruled("float64", Options(DTYPES))
    positive_class: Optional[float] = ruled(None, POSITIVE_CLASS)  # multiclass files: this class vs the rest


@dataclass
class CriteoData:
    """Click logs in Criteo's layout: tab-separated lines of a 0/1 label, 13 integer and 26
    categorical fields (empty: missing), plain or gzip / bz2 / xz; hashed into 2^hash_bits
    binary features (tasks/data/criteo.py documents the hash). Relative paths start at the
    project root."""

    name: str = "criteo"
    path: str = "../shared/datasets/criteo_sample.tsv"
    hash_bits: int = ruled(20, Integer(1, 31))  # n_features = 2^hash_bits
    max_samples: Optional[int] = ruled(None, Either(None, Integer(1)))  # the first rows only


@dataclass
class SyntheticCriteoData:
    """Click-like data made straight into the sparse store: ``nnz_per_row`` fields a row, each a
    binary feature of its own vocabulary drawn with power-law frequencies (r^-zipf by rank),
    ``missing`` the chance a field is empty; labels 0/1 from a sparse logistic model
    (``n_informative`` weights, ``base_rate`` the click rate at a zero margin). 2^hash_bits
    features; about n_samples * nnz_per_row * 4 bytes on disk (tasks/data/criteo.py)."""

    name: str = "synthetic_criteo"
    n_samples: int = ruled(100000, Integer(1))
    hash_bits: int = ruled(20, Integer(6, 31))
    nnz_per_row: int = ruled(40, Integer(1, 64))
    zipf: float = ruled(1.1, Real(0, None, "neither"))
    missing: float = ruled(0.05, Real(0, 1, "left"))
    n_informative: int = ruled(1000, Integer(1))
    base_rate: float = ruled(0.25, Real(0, 1, "neither"))
    seed: int = ruled(0, Integer(0))


@dataclass
class SklearnData:
    """One of scikit-learn's shipped datasets (no download)."""

    name: str = "sklearn"
    dataset: str = ruled("diabetes", Options(SHIPPED_SKLEARN_SETS))
    standardize: bool = True
    positive_class: Optional[float] = ruled(None, POSITIVE_CLASS)  # iris, wine, digits: this class vs the rest


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


@dataclass
class NpyData:
    """Your own dense data: an (n_samples, n_features) ``.npy`` (C or Fortran order, any float
    dtype; relative paths start at the project root) and its target, a second ``.npy`` of
    n_samples values (``target``) or one of the file's columns (``target_column``; -1: the
    last; the other columns are the features). Read in chunks, never whole (tasks/data/npy.py)."""

    name: str = "npy"
    path: Optional[str] = None
    target: Optional[str] = None
    target_column: Optional[int] = ruled(None, Either(None, Integer()))
    # None: the file's own float32 / float64 (other float types become float64)
    dtype: Optional[str] = ruled(None, Either(None, Options(DTYPES)))
    positive_class: Optional[float] = ruled(None, POSITIVE_CLASS)  # multiclass targets: this class vs the rest


@dataclass
class ZarrData:
    """Your own dense data in a zarr store: an (n_samples, n_features) zarr v3 (or v2) array of
    numbers in a local folder (relative paths start at the project root; in a group, name the
    array: ``my.zarr/X``), and its target: a zarr array or ``.npy`` of n_samples values
    (``target``) or one of the array's columns (``target_column``). Converted a tile of its own
    chunks at a time, never whole (tasks/data/zarr_store.py)."""

    name: str = "zarr"
    path: Optional[str] = None
    target: Optional[str] = None
    target_column: Optional[int] = ruled(None, Either(None, Integer()))
    # None: the array's own float32 / float64 (other numbers become float64)
    dtype: Optional[str] = ruled(None, Either(None, Options(DTYPES)))
    positive_class: Optional[float] = ruled(None, POSITIVE_CLASS)  # multiclass targets: this class vs the rest


DATA_CONFIGS = {c.name: c for c in (SyntheticDenseData, SyntheticRowsData, SyntheticSparseData, LibsvmData, CriteoData,
                                    SyntheticCriteoData, SklearnData, SphereData, NpyData, ZarrData)}


@dataclass
class Dataset:
    X: Any  # np.ndarray / np.memmap (n_samples, n_features), or scipy.sparse CSR
    y: np.ndarray
    coef: Optional[np.ndarray]
    path: Path  # the cache folder
    verified: str = ""  # how the cache entry was checked when read ("size and shape", "checksum")
    verify_s: float = 0.0  # seconds the check took
    store: Any = None  # the entry's sparse store (solvers.storage.sparse_store.SparseStore), if it has one

    @property
    def shape(self) -> tuple:
        return self.X.shape

    @property
    def nbytes(self) -> int:
        if self.store is not None:
            return self.store.nbytes + self.store.indptr.nbytes
        if sp.issparse(self.X):
            return self.X.data.nbytes + self.X.indices.nbytes + self.X.indptr.nbytes
        return self.X.nbytes


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
    if kind == "synthetic_criteo" and c.n_informative > (1 << c.hash_bits):
        raise ValueError(f"The 'n_informative' parameter of data '{kind}' must be an int <= 2^hash_bits "
                         f"({1 << c.hash_bits}). Got {c.n_informative} instead.")
    if kind == "synthetic_criteo" and c.nnz_per_row > (1 << c.hash_bits):
        raise ValueError(f"The 'nnz_per_row' parameter of data '{kind}' must be an int <= 2^hash_bits "
                         f"({1 << c.hash_bits}). Got {c.nnz_per_row} instead.")
    if hasattr(c, "n_informative") and hasattr(c, "n_features") and c.n_informative > c.n_features:
        raise ValueError(f"The 'n_informative' parameter of data '{kind}' must be an int <= n_features "
                         f"({c.n_features}). Got {c.n_informative} instead.")
    if getattr(c, "n_groups", 1) > 1 and (c.correlation_kind != "equicorrelated" or c.n_groups > c.n_features):
        raise ValueError(f"The 'n_groups' parameter of data '{kind}' must be 1 with correlation_kind "
                         f"{c.correlation_kind!r}, and at most n_features ({c.n_features}). Got {c.n_groups} instead.")
    if kind in ("npy", "zarr"):
        _check_file_config(c)
    return c


def _check_file_config(c) -> None:
    what = ("a .npy file (data.path=path/to/X.npy)" if c.name == "npy"
            else "a zarr array (data.path=path/to/store.zarr/X)")
    if not c.path:
        raise ValueError(f"The 'path' parameter of data '{c.name}' must name {what}. Got {c.path!r} instead.")
    if (c.target is None) == (c.target_column is None):
        got = "neither" if c.target is None else f"both (target={c.target!r}, target_column={c.target_column})"
        targets = "a .npy of the targets" if c.name == "npy" else "a zarr array (or .npy) of the targets"
        raise ValueError(f"The 'target' parameter of data '{c.name}' must name {targets}, or "
                         f"'target_column' the column of data.path that holds them (one of the two). "
                         f"Got {got} instead.")


def resolve_path(path: str, base_dir: Path) -> Path:
    """A config's path: absolute, or relative to ``base_dir`` (the project root)."""
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else (base_dir / p).resolve()
