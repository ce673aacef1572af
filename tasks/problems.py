"""From a dataset and a model config to what a solver works on: labels, the GLM
problem, and the small read-only copy of the data the warm-up compiles on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import type_of_target

from solvers.distbelief.models import CLASSIFIERS as DISTBELIEF_CLASSIFIERS
from solvers.glm.models import MODELS
from solvers.glm.models.sides import resolve
from solvers.storage.on_disk import OnDisk
from solvers.storage.sparse_on_disk import SparseOnDisk
from solvers.storage.sparse_store import SparseStore, store_name
from solvers.glm.problems import make_problem, make_problem_on_disk
from tasks.data import DataError
from tasks.data.rows import features, sample_major
from tasks.data.sparse import sparse_layout


def is_classifier(model: str) -> bool:
    glm = MODELS.get(model)
    return glm.classifier if glm is not None else model in DISTBELIEF_CLASSIFIERS


def reads_samples(model: str) -> bool:
    """Whether the model's coordinates are samples (a classifier in the dual), not features."""
    glm = MODELS.get(model)
    return glm is not None and glm.dual_form


def labels_for(model: str, y) -> np.ndarray:
    """Targets as the model needs them: as they are for regression; +1 / -1 for a
    classifier: the larger of two classes is +1 (scikit-learn's ``classes_[1]``); a
    continuous target is split at its median (the synthetic targets are centred, so
    this is their sign; :func:`describe_labels` says so); a discrete target of more
    than two classes is a DataError naming the option that picks one class."""
    y = np.asarray(y, dtype=np.float64)
    if not is_classifier(model):
        return y
    classes = np.unique(y)
    if classes.size <= 2:
        return np.where(y == classes[-1], 1.0, -1.0)
    if type_of_target(y) != "continuous":
        shown = ", ".join(f"{c:g}" for c in classes[:10]) + (", ..." if classes.size > 10 else "")
        raise DataError(f"model '{model}' trains two classes; the target has {classes.size} ({shown}): set "
                        "data.positive_class=<one of them> to train that class against the rest.")
    return np.where(y > np.median(y), 1.0, -1.0)


def describe_labels(model: str, y) -> Optional[str]:
    """A note when the labels are not the target's own classes (a continuous target split)."""
    y = np.asarray(y, dtype=np.float64)
    if is_classifier(model) and np.unique(y).size > 2 and type_of_target(y) == "continuous":
        return (f"the target is continuous: model '{model}' trains on its sign about the median "
                f"({np.median(y):.4g}), +1 above")
    return None


def resolve_model(model_cfg: Mapping[str, Any], n_samples: int, n_features: int, dual_for: Optional[str] = None,
                  coupling: Optional[float] = None):
    """(the config of the registry entry that solves ``model_cfg`` on data of this shape, a note
    on the choice or None): a classifier's options (``penalty``, ``dual``) pick its primal or
    dual entry (solvers.glm.models.sides, scikit-learn's dual="auto"). ``dual_for``: why the run
    needs the dual side where both exist (the arms or the data on disk serve only it), which
    ``dual="auto"`` then takes. ``coupling``: the data's feature coupling where a memory budget
    holds part of it (solvers.glm.models.sides.resolve). A config without the options
    (another model, or one resolved already) is its own entry, so resolving twice changes nothing."""
    kwargs = dict(model_cfg)
    name = kwargs.pop("name")
    options = MODELS[name].options
    if not options or not set(options) & set(kwargs):
        return dict(model_cfg), None
    owner = f"model '{name}'"
    if dual_for is not None and kwargs.get("dual", options.get("dual")) == "auto":
        try:
            entry, params, _ = resolve(name, {**kwargs, "dual": True}, n_samples, n_features, owner=owner)
            return {"name": entry, **params}, f"dual='auto' chose the dual formulation: {dual_for}"
        except ValueError:
            pass  # the penalty has no dual side: the primal's own checks say what fails
    entry, params, note = resolve(name, kwargs, n_samples, n_features, owner=owner, coupling=coupling)
    return {"name": entry, **params}, note


def build_problem(model_cfg: Mapping[str, Any], X, y):
    """The GLM problem of a model config ({'name': ..., and make_problem's parameters; a
    classifier's options resolved on X's shape, see :func:`resolve_model`})."""
    kwargs, _ = resolve_model(model_cfg, *X.shape)
    model = kwargs.pop("name")
    return make_problem(model, X, labels_for(model, y), **kwargs)


def build_problem_on_disk(model_cfg: Mapping[str, Any], folder, y, row_stats=None, direct=None):
    """The GLM problem with its coordinate data left on disk. Regression models (the Lasso
    family): the cached dataset's ``X.npy`` (Fortran order: each feature a contiguous run, read
    past the page cache). Classifiers (solved in the dual, a sample per coordinate): its
    sample-major copy (tasks.data.rows.sample_major: ``X_rows.npy``, written once), read with
    the labels' signs applied. ``row_stats`` = (sum, sum of squares) of each coordinate (from
    :func:`coordinate_stats`), else one pass over the file. ``direct``: the reader's (OnDisk)."""
    kwargs = dict(model_cfg)
    model = kwargs.pop("name")
    path = on_disk_path(model, folder)
    if isinstance(path, SparseStore):  # a sparse store of the layout the model reads
        data = SparseOnDisk(path, direct=direct)
    else:  # a classifier's rows are padded (its dual's sample-major copy): its features are the leading values
        data = OnDisk(path, n_features=features(path) if reads_samples(model) else None, direct=direct)
    return make_problem_on_disk(model, data, labels_for(model, y), row_stats=row_stats, **kwargs)


def has_sparse_store(folder) -> bool:
    """Whether the cache entry holds its X as a sparse store (LIBSVM, Criteo, synthetic clicks)."""
    return not (Path(folder) / "X.npy").exists() and any(
        (Path(folder) / f"{store_name(layout)}.json").exists() for layout in ("csr", "csc"))


def on_disk_path(model: str, folder):
    """What a model reads from disk: X.npy (features contiguous) or, for a classifier, the
    sample-major copy (made now if the cache entry has none yet); for sparse data, the store of
    the model's layout (a SparseStore: 'csr' for a classifier, 'csc' for the Lasso family, the
    second written now from the first if the entry has none yet)."""
    if has_sparse_store(folder):
        return sparse_layout(folder, "csr" if reads_samples(model) else "csc")
    if reads_samples(model):
        return sample_major(folder)
    path = Path(folder) / "X.npy"
    if not path.exists():
        raise DataError(f"host_budget needs the dataset on disk in the cache (X.npy or a sparse store); "
                        f"{Path(folder).name} has neither.")
    return path


def coordinate_stats(model: str, folder):
    """(sum, sum of squares) of each coordinate's data in what ``model`` reads from disk
    (features of X.npy, or samples of its sample-major copy; a sparse store's coordinates): one
    pass past the page cache (none for a binary store: its counts)."""
    path = on_disk_path(model, folder)
    if isinstance(path, SparseStore):
        data = SparseOnDisk(path)
        try:
            return data.row_stats()
        finally:
            data.close()
    return OnDisk(path).row_stats()


WARMUP_COLUMNS = 256


def read_only_miniature(model: str, X, y, rows: int = 64):
    """A few rows of the data with its dtype, layout and read-only flags (the data
    is memory-mapped read-only, and Numba compiles read-only arrays apart);
    classifiers get rows of both classes."""
    y = labels_for(model, y)
    if is_classifier(model):
        index = np.concatenate([np.flatnonzero(y == c)[: rows // 2] for c in np.unique(y)])
    else:
        index = np.arange(min(rows, y.shape[0]))
    if sp.issparse(X):
        small = _rows(X, index)
        parts = (small.data, small.indices, small.indptr)
    else:
        # a few columns too: compiling needs the dtype and layout, not the width, and a row of a
        # Fortran file on disk touches a page of every column (30 GB: minutes of random reads)
        small = np.asarray(X)[:, :WARMUP_COLUMNS][index]
        small = np.asfortranarray(small) if np.isfortran(X) else np.ascontiguousarray(small)
        parts = (small,)
    small_y = np.array(y[index])
    for array in (*parts, small_y):
        array.setflags(write=False)
    return small, small_y


def _rows(X, index):
    """Rows ``index`` of a sparse X as a small CSR, gathered entry by entry: X may be memory-mapped
    from a store (a binary one's values a broadcast 1), which scipy's own row indexing would copy whole."""
    X = X if X.format == "csr" else X.tocsr()
    lo, hi = X.indptr[index].astype(np.int64), X.indptr[index + 1].astype(np.int64)
    positions = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)] + [np.zeros(0, np.int64)])
    indptr = np.concatenate([[0], np.cumsum(hi - lo)])
    data = np.ascontiguousarray(X.data[positions])
    indices = np.asarray(X.indices[positions])
    return sp.csr_matrix((data, indices, indptr.astype(indices.dtype)), shape=(index.size, X.shape[1]))
