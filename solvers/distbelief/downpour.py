"""Downpour SGD as a single-process state machine (a server, replicas stepping).

The server holds the parameters and an update rule and counts versions (one
per applied push). A replica fetches every ``n_fetch`` steps, computes a
minibatch gradient at its (possibly stale) copy, accumulates it, and pushes
the sum every ``n_push`` steps. Staleness of a push = server version at push -
version the replica fetched. ``tasks.distbelief.downpour`` runs the same ``Replica``
against sharded parameter-server actors; here the server is one object.
"""

from __future__ import annotations

from typing import Iterator, List, Optional

import numpy as np

from solvers.distbelief.rules import make_rule
from solvers.glm.checks import check_params


def minibatches(n_rows: int, batch_size: int, seed: int) -> Iterator[np.ndarray]:
    """Row indices of successive minibatches: a fresh permutation every epoch."""
    rng = np.random.default_rng(seed)
    batch_size = min(batch_size, n_rows)
    while True:
        order = rng.permutation(n_rows)
        for start in range(0, n_rows - batch_size + 1, batch_size):
            yield order[start: start + batch_size]


class Server:
    """One parameter server: fetch -> (w, token), push(g, token, n) -> staleness."""

    def __init__(self, w0, rule: str = "fixed", lr: float = 0.1):
        self.w = np.array(w0, dtype=float)
        self.rule = make_rule(rule, self.w.size, lr)
        self.version = 0
        self.samples = 0
        self.staleness: List[int] = []

    def fetch(self):
        return self.w.copy(), self.version

    def push(self, g, token, n_samples: int = 0) -> int:
        stale = self.version - token
        self.rule.apply(self.w, g)
        self.version += 1
        self.samples += n_samples
        self.staleness.append(stale)
        return stale


class Replica:
    """One model replica on its rows (X, y)."""

    def __init__(self, model, X, y, batch_size: int = 32, n_fetch: int = 1, n_push: int = 1, seed: int = 0,
                 local_lr: Optional[float] = None):
        check_params("Downpour", batch_size=batch_size, n_fetch=n_fetch, n_push=n_push)
        self.model, self.X, self.y = model, X, y
        self.n_fetch, self.n_push, self.local_lr = n_fetch, n_push, local_lr
        self.batches = minibatches(X.shape[0], batch_size, seed)
        self.t = 0
        self.w = None
        self.token = None
        self.acc = None
        self.n_acc = 0
        self.samples = 0
        self.last_loss = float("nan")

    def step(self, server) -> float:
        """One minibatch; returns its objective at the replica's copy."""
        if self.w is None or self.t % self.n_fetch == 0:
            self.w, self.token = server.fetch()
        rows = next(self.batches)
        loss, g = self.model.loss_grad(self.w, self.X[rows], self.y[rows])
        self.acc = g if self.acc is None else self.acc + g
        self.n_acc += rows.size
        self.samples += rows.size
        if self.local_lr:  # apply its own gradient between fetches
            self.w = self.w - self.local_lr * g
        self.t += 1
        if self.t % self.n_push == 0:
            self.flush(server)
        self.last_loss = loss
        return loss

    def flush(self, server) -> None:
        if self.acc is not None and self.n_acc:
            server.push(self.acc, self.token, self.n_acc)
        self.acc, self.n_acc = None, 0


def sequential_sgd(model, X, y, w0, lr: float, batch_size: int, n_steps: int, seed: int = 0,
                   rule: str = "fixed") -> np.ndarray:
    """Plain minibatch SGD, written independently of Server/Replica (the oracle
    for 'Downpour with one replica and n_fetch = n_push = 1')."""
    w = np.array(w0, dtype=float)
    upd = make_rule(rule, w.size, lr)
    batches = minibatches(X.shape[0], batch_size, seed)
    for _ in range(n_steps):
        rows = next(batches)
        upd.apply(w, model.loss_grad(w, X[rows], y[rows])[1])
    return w
