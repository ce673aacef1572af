"""Fixtures for the solvers tests: small problems and their oracles, built once per session."""

import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # glm_oracles, whatever the import mode

import glm_oracles as go  # noqa: E402


@dataclass
class Case:
    model: str
    X: object
    y: np.ndarray
    params: dict
    P0: float
    oracle: dict


_CASES = {}


def get_case(model, sparse, dtype):
    """The (X, y, params, oracle) of a model on the small test data, cached per session."""
    key = (model, bool(sparse), np.dtype(dtype).name)
    if key not in _CASES:
        X, y = go.make_data(go.kind_of(model), sparse, dtype)
        params = go.params_for(model, X, y)
        orc = go.oracle(model, X, y, params)
        P0 = go.P0(model, X, y, params)
        # the oracle must itself be certified, or the tests below would prove nothing
        assert orc["P"] - orc["D"] <= 2e-9 * P0, (key, orc["P"], orc["D"])
        _CASES[key] = Case(model, X, y, params, P0, orc)
    return _CASES[key]


@pytest.fixture(scope="session")
def case_factory():
    return get_case


def make_estimator(model, params, **kwargs):
    """The estimator of a glm_oracles model. Its classifiers are the registry's dual entries ("svm",
    "logistic": samples as coordinates), so they are fitted with dual=True unless a test says
    otherwise: dual="auto" takes the primal on the tall test data. dual=False solves the same
    objective in the primal (the entries "svm_l2", "logistic_l2")."""
    from solvers import ElasticNet, Lasso, LinearSVC, LogisticRegression, Ridge

    cls = {"lasso": Lasso, "enet": ElasticNet, "ridge": Ridge, "hinge": LinearSVC,
           "sqhinge": LinearSVC, "logistic": LogisticRegression}[model]
    if model in go.CLASSIFICATION:
        kwargs.setdefault("dual", True)
    return cls(**params, **kwargs)


@pytest.fixture(scope="session")
def estimator_factory():
    return make_estimator


W8A = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "datasets", "w8a")


@pytest.fixture(scope="session")
def w8a():
    """~3000 rows of w8a (LIBSVM, 300 binary features, labels -1/+1), loaded once."""
    path = os.path.normpath(W8A)
    if not os.path.exists(path):
        pytest.skip(f"w8a not found at {path} (../shared/datasets/w8a from the repo root)")
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(path, n_features=300)
    rows = np.sort(np.random.default_rng(0).choice(X.shape[0], 3000, replace=False))
    return X[rows].tocsr(), y[rows]


@pytest.fixture(scope="module")
def simulator():
    """device="cuda_sim": Numba's CUDA simulator switched on (skipped where numba.cuda was
    already imported for a real GPU in this process)."""
    from solvers.duhl.block import devices

    try:
        devices._enable_simulator()
    except RuntimeError as err:
        pytest.skip(str(err))
