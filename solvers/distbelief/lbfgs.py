"""L-BFGS whose vectors live elsewhere: the coordinator holds only scalars.

Every vector (parameters ``x``, gradient ``g``, direction ``d``, the history
pairs ``s_i``, ``y_i``) is a *name*; ``ops`` does the arithmetic where the
vectors live (on parameter-server shards in Sandblaster, in a dict here):

    ops.dot(a, b) -> float          ops.axpy(alpha, x, y)   # y += alpha x
    ops.scale(alpha, x)             ops.copy(src, dst)

and ``evaluate(x, g) -> float`` writes the gradient of the objective at ``x``
into ``g`` and returns the objective (Sandblaster: a round of work units).
The coordinator keeps the objective, ``rho_i = 1 / <s_i, y_i>`` and the step
sizes, nothing of length n_params.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from solvers.glm.checks import check_params


@dataclass
class LBFGSResult:
    f: float
    n_iter: int
    n_evals: int
    status: str  # "converged", "max_iter", "max_time", "line_search_failed"
    grad_norm: float
    x: str = "x"  # the name of the vector holding the solution


class ArrayOps:
    """The ops on named NumPy (or CuPy) vectors in one process (tests, single machine)."""

    def __init__(self, vectors: Optional[Dict[str, np.ndarray]] = None):
        self.v = dict(vectors or {})

    def _get(self, name, like="x"):
        if name not in self.v:
            self.v[name] = self.v[like] * 0.0
        return self.v[name]

    def dot(self, a, b):
        return float(self._get(a) @ self._get(b))

    def axpy(self, alpha, x, y):
        self._get(y)[...] += alpha * self._get(x)

    def scale(self, alpha, x):
        self._get(x)[...] *= alpha

    def copy(self, src, dst):
        self._get(dst)[...] = self._get(src)


def two_loop(ops, history: List[Tuple[str, str, float, float]], g: str, d: str) -> None:
    """d = -H g from the history [(s, y, rho, yy), ...] oldest first (Nocedal & Wright, Alg. 7.4)."""
    ops.copy(g, d)
    alphas = []
    for s, y, rho, _ in reversed(history):
        a = rho * ops.dot(s, d)
        ops.axpy(-a, y, d)
        alphas.append(a)
    if history:
        _, _, rho, yy = history[-1]
        ops.scale(1.0 / (rho * yy), d)  # gamma = <s, y> / <y, y>
    for (s, y, rho, _), a in zip(history, reversed(alphas)):
        b = rho * ops.dot(y, d)
        ops.axpy(a - b, s, d)
    ops.scale(-1.0, d)


def lbfgs(ops, evaluate: Callable[[str, str], float], m: int = 10, max_iter: int = 200, gtol: float = 1e-8,
          ftol: float = 1e-13, c1: float = 1e-4, max_line_search: int = 30,
          callback: Optional[Callable[[dict], None]] = None, should_stop: Optional[Callable[[], bool]] = None
          ) -> LBFGSResult:
    """Minimize from the vector named "x" with a backtracking (Armijo) line search.

    Stops when ||g|| <= gtol * max(1, |f|), when f changes by <= ftol * max(1, |f|),
    after max_iter iterations, or when ``should_stop()`` says so. ``callback``
    sees {"iteration", "f", "grad_norm", "step", "n_evals"} after every iteration.
    """
    check_params("L-BFGS", m=m)
    x, g, xn, gn = "x", "g", "x_new", "g_new"
    f = evaluate(x, g)
    n_evals = 1
    history: List[Tuple[str, str, float, float]] = []
    free = [(f"s{i}", f"y{i}") for i in range(m)]
    gnorm = math.sqrt(ops.dot(g, g))
    status = "max_iter"
    for it in range(1, max_iter + 1):
        if gnorm <= gtol * max(1.0, abs(f)):
            status = "converged"
            break
        if should_stop is not None and should_stop():
            status = "max_time"
            break
        two_loop(ops, history, g, "d")
        gd = ops.dot(g, "d")
        if not gd < 0:  # not a descent direction: restart from steepest descent
            for s, y, *_ in history:
                free.append((s, y))
            history.clear()
            ops.copy(g, "d")
            ops.scale(-1.0, "d")
            gd = -gnorm ** 2
        t = 1.0 if history else min(1.0, 1.0 / max(gnorm, 1e-300))
        for _ in range(max_line_search):
            ops.copy(x, xn)
            ops.axpy(t, "d", xn)
            fn = evaluate(xn, gn)
            n_evals += 1
            if fn <= f + c1 * t * gd:
                break
            t *= 0.5
        else:
            status = "line_search_failed"
            break
        s, y = free.pop() if free else history.pop(0)[:2]
        ops.copy(xn, s)
        ops.axpy(-1.0, x, s)
        ops.copy(gn, y)
        ops.axpy(-1.0, g, y)
        sy, yy = ops.dot(s, y), ops.dot(y, y)
        if sy > 1e-12 * yy and yy > 0:
            history.append((s, y, 1.0 / sy, yy))
        else:
            free.append((s, y))
        x, xn, g, gn = xn, x, gn, g  # rename, do not copy
        f_old, f = f, fn
        gnorm = math.sqrt(ops.dot(g, g))
        if callback is not None:
            callback({"iteration": it, "f": f, "grad_norm": gnorm, "step": t, "n_evals": n_evals, "x": x})
        if abs(f_old - f) <= ftol * max(1.0, abs(f)):
            status = "converged"
            break
    return LBFGSResult(f=f, n_iter=it, n_evals=n_evals, status=status, grad_norm=gnorm, x=x)
