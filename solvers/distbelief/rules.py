"""Update rules a parameter-server shard applies to a pushed gradient.

Adagrad (DistBelief's choice): per parameter, ``w_i -= gamma g_i / sqrt(G_i)``
with ``G_i`` the running sum of squared gradients of that parameter (plus
``eps`` so an untouched parameter does not divide by zero). Fixed: ``w -= lr g``.
Both update ``w`` in place and keep their state as arrays that snapshot as is.
"""

from __future__ import annotations

import numpy as np

from solvers.glm.checks import check_params
from solvers.kernels.cache import compiled

RULES = ("adagrad", "fixed")


class FixedRate:
    name = "fixed"

    def __init__(self, size: int, lr: float = 0.1, xp=np):
        check_params("the fixed-rate rule", lr=lr)
        self.lr = float(lr)

    def apply(self, w, g) -> None:
        w -= self.lr * g

    def state(self) -> dict:
        return {}

    def load(self, state: dict) -> None:
        pass


class Adagrad:
    name = "adagrad"

    def __init__(self, size: int, lr: float = 0.1, eps: float = 1e-8, xp=np):
        check_params("the Adagrad rule", lr=lr)
        self.lr = float(lr)  # gamma
        self.eps = float(eps)
        self.sum_sq = xp.zeros(size)
        self._xp = xp
        self._scratch = None  # two buffers: a step of a few million parameters allocates nothing

    def apply(self, w, g) -> None:
        """w -= lr g / (sqrt(sum_sq) + eps), in place (the same roundings as written out)."""
        xp = self._xp
        if xp is np:  # one pass over g, sum_sq and w, where the ufuncs below make seven
            _adagrad(w, np.asarray(g, dtype=w.dtype), self.sum_sq, self.lr, self.eps)
            return
        if self._scratch is None or self._scratch[0].shape != self.sum_sq.shape:
            self._scratch = (xp.empty_like(self.sum_sq), xp.empty_like(self.sum_sq))
        denom, step = self._scratch
        xp.multiply(g, g, out=denom)
        self.sum_sq += denom
        xp.sqrt(self.sum_sq, out=denom)
        denom += self.eps
        xp.multiply(g, self.lr, out=step)
        step /= denom
        w -= step

    def state(self) -> dict:
        return {"sum_sq": self.sum_sq}

    def load(self, state: dict) -> None:
        self.sum_sq[...] = state["sum_sq"]


@compiled
def _adagrad(w, g, sum_sq, lr, eps):
    for i in range(w.size):
        gi = g[i]
        s = sum_sq[i] + gi * gi
        sum_sq[i] = s
        w[i] -= (gi * lr) / (np.sqrt(s) + eps)


def make_rule(name: str, size: int, lr: float, xp=np):
    if name not in RULES:
        raise ValueError(f"The 'rule' parameter of Downpour must be one of {RULES}. Got {name!r} instead.")
    return (Adagrad if name == "adagrad" else FixedRate)(size, lr=lr, xp=xp)
