"""Solvers: the math of the project (no Dask, Hydra, MLflow or file I/O here).

Three families, one folder each: ``duhl`` (DuHL and its estimators),
``distributed_glm`` (CoCoA+, DIANA, compressors) and ``distbelief`` (Downpour,
Sandblaster, L-BFGS, the MLP); ``glm`` holds the models and problems they
share, ``kernels`` the compiled epochs and gaps.

>>> from solvers import Lasso
>>> Lasso(alpha=0.1, memory_budget=0.25).fit(X, y)      # doctest: +SKIP

The names below are imported on first use (PEP 562), so ``import solvers`` (or
any subpackage) loads neither scikit-learn nor Numba until they are needed.
"""

import importlib

_EXPORTS = {
    "Lasso": "solvers.duhl.estimators", "ElasticNet": "solvers.duhl.estimators",
    "Ridge": "solvers.duhl.estimators", "LinearSVC": "solvers.duhl.estimators",
    "LogisticRegression": "solvers.duhl.estimators", "LogisticRegressionCV": "solvers.duhl.estimators",
    "DuHL": "solvers.duhl.solver",
    "make_problem": "solvers.glm.problems", "MODELS": "solvers.glm.models",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
