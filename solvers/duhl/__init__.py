"""DuHL (Dünner, Parnell, Jaggi, NIPS 2017): the host holds all data, a device holds a
budget of it, and coordinate-wise duality gaps choose what the device holds.

The public API:

- :class:`DuHL`: the solver (a :class:`solvers.glm.problems.Problem` in, a result out)
- scikit-learn estimators solved by DuHL: :class:`Lasso`, :class:`ElasticNet`, :class:`Ridge`,
  :class:`LinearSVC`, :class:`LogisticRegression`, :class:`LogisticRegressionCV` (C chosen over a
  warm-started path by cross-validation)
- :func:`compile_kernels`: compile the CPU kernels before anything is timed
"""

from solvers.duhl.estimators import ElasticNet, Lasso, LinearSVC, LogisticRegression, LogisticRegressionCV, Ridge
from solvers.duhl.solver import DuHL, DuHLResult
from solvers.duhl.warmup import compile_kernels

__all__ = ["DuHL", "DuHLResult", "ElasticNet", "Lasso", "LinearSVC", "LogisticRegression", "LogisticRegressionCV",
           "Ridge", "compile_kernels"]
