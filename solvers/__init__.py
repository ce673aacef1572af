"""Solvers: the math of the project (no Dask, Hydra, MLflow or file I/O here).

>>> from solvers import Lasso
>>> Lasso(alpha=0.1, memory_budget=0.25).fit(X, y)      # doctest: +SKIP
"""

from solvers.estimators import ElasticNet, Lasso, LinearSVC, LogisticRegression, Ridge

__all__ = ["Lasso", "ElasticNet", "Ridge", "LinearSVC", "LogisticRegression"]
