"""From a dataset and a model config to what a solver works on: labels, the GLM
problem, and the small read-only copy of the data the warm-up compiles on."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from solvers.distbelief.models import CLASSIFIERS as DISTBELIEF_CLASSIFIERS
from solvers.glm.models import MODELS
from solvers.glm.problems import make_problem


def is_classifier(model: str) -> bool:
    glm = MODELS.get(model)
    return glm.classifier if glm is not None else model in DISTBELIEF_CLASSIFIERS


def labels_for(model: str, y) -> np.ndarray:
    """Targets as the model needs them: as they are for regression; +1 / -1 for a
    classifier (the larger of two classes is +1, as scikit-learn's ``classes_[1]``;
    a target with more values is split at its median: the synthetic targets are
    centred, so this is their sign)."""
    y = np.asarray(y, dtype=np.float64)
    if not is_classifier(model):
        return y
    classes = np.unique(y)
    if classes.size <= 2:
        return np.where(y == classes[-1], 1.0, -1.0)
    return np.where(y > np.median(y), 1.0, -1.0)


def build_problem(model_cfg: Mapping[str, Any], X, y):
    """The GLM problem of a model config ({'name': ..., and make_problem's parameters})."""
    kwargs = dict(model_cfg)
    model = kwargs.pop("name")
    return make_problem(model, X, labels_for(model, y), **kwargs)


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
        small = X[index]
        parts = (small.data, small.indices, small.indptr)
    else:
        small = np.asarray(X)[index]
        small = np.asfortranarray(small) if np.isfortran(X) else np.ascontiguousarray(small)
        parts = (small,)
    small_y = np.array(y[index])
    for array in (*parts, small_y):
        array.setflags(write=False)
    return small, small_y
