"""DIANA: distributed proximal gradient with compressed gradient differences.

Mishchenko, Gorbunov, Takáč, Richtárik, "Distributed learning with compressed
gradient differences" (2019). Data-parallel, on the primal of

    F(x) = sum_i w_i f_i(x) + R(x),    w_i = n_i / n

- ``lasso``:    f_i = 1/(2 n_i) ||X_i x - y_i||^2,               R = alpha ||x||_1
- ``logistic``: f_i = 1/n_i sum log(1 + exp(-y_ij <X_ij, x>)),    R = lam/2 ||x||^2, lam = 1/(C n)

(scikit-learn's Lasso and LogisticRegression objectives without intercept,
the latter divided by C n). Worker i keeps a shift h_i and sends
m_i = Q(g_i - h_i), then h_i += shift_lr m_i; the server keeps h = sum w_i h_i,
forms g = h + sum_i w_i m_i, steps x <- prox_{gamma R}(x - gamma g) and sets
h += shift_lr sum_i w_i m_i.

Methods (all in this one harness):

- ``diana``: as above; shift_lr = 1/(1 + omega).
- ``gd``: the identity compressor, shifts unused (uncompressed distributed GD).
- ``no_shift``: m_i = Q(g_i) (QSGD-style compressed GD): converges only to a
  neighbourhood whose size grows with omega ||grad f_i(x*)||^2.
- ``ef21``: error feedback for a biased compressor (top-k), Richtárik, Sokolov,
  Fatkhullin 2021: h_i += C(g_i - h_i) and g = sum w_i h_i (DIANA's update
  with shift_lr = 1 and the estimate used in place of h + m).

Step sizes (defaults; ``gamma`` overrides): L = max_i L_i (each f_i's
smoothness). ``diana`` and ``no_shift``: gamma = 1 / (L (1 + 6 omega / n))
(Horváth, Kovalev, Mishchenko, Stich, Richtárik 2019, DIANA for strongly
convex f: alpha <= 1/(omega + 1), gamma <= 1/(L (1 + 6 omega / n))); ``gd``:
gamma = 1/L; ``ef21``: gamma = 1 / (L (1 + sqrt(beta / theta))) with
theta = 1 - sqrt(1 - delta), beta = (1 - delta) / (1 - sqrt(1 - delta)),
delta = k/d (EF21, Theorem 1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from solvers.distributed_glm.compression import Identity, make_compressor
from solvers.glm import losses
from solvers.glm.checks import check_params

MODELS = ("lasso", "logistic")
METHODS = ("diana", "gd", "no_shift", "ef21")


@dataclass
class GlmSpec:
    """The model: loss and regulariser of F (shared by workers and server)."""

    model: str
    reg: float  # alpha (lasso) or lam = 1/(C n) (logistic)
    n_samples: int
    n_features: int

    def loss_grad(self, X, y, x):
        """(f_i(x), grad f_i(x)) of a shard."""
        t = X @ x
        n = X.shape[0]
        if self.model == "lasso":
            r = t - y
            return 0.5 * float(r @ r) / n, np.asarray(X.T @ r).ravel() / n
        loss, dm = losses.logistic(y * t)
        return loss / n, np.asarray(X.T @ (y * dm)).ravel() / n

    def smoothness(self, X):
        """L of a shard's f_i: ||X_i||_2^2 / n_i (lasso) or / (4 n_i) (logistic)."""
        if X.shape[0] == 0:
            return 0.0
        if sp.issparse(X):
            from scipy.sparse.linalg import svds
            top = float(svds(X.astype(np.float64), k=1, return_singular_vectors=False)[0]) ** 2 \
                if min(X.shape) > 1 else float(X.multiply(X).sum())
        else:
            top = float(np.linalg.norm(np.asarray(X, dtype=np.float64), 2)) ** 2
        return top / X.shape[0] / (1.0 if self.model == "lasso" else 4.0)

    def reg_value(self, x):
        if self.model == "lasso":
            return self.reg * float(np.abs(x).sum())
        return 0.5 * self.reg * float(x @ x)

    def prox(self, x, step):
        if self.model == "lasso":
            return np.sign(x) * np.maximum(np.abs(x) - step * self.reg, 0.0)
        return x / (1.0 + step * self.reg)


def make_spec(model, n_samples, n_features, alpha=1.0, C=1.0):
    if model not in MODELS:
        raise ValueError(f"The 'model' parameter of DIANA must be one of {MODELS}. Got {model!r} instead.")
    reg = float(alpha) if model == "lasso" else 1.0 / (float(C) * n_samples)
    if not reg > 0:
        raise ValueError(f"DIANA needs a positive regularisation. Got alpha={alpha!r}, C={C!r}.")
    return GlmSpec(model, reg, int(n_samples), int(n_features))


def shard_rows(n_samples, n_workers):
    edges = np.linspace(0, n_samples, n_workers + 1).round().astype(np.int64)
    return [(int(edges[i]), int(edges[i + 1])) for i in range(n_workers)]


class DianaWorker:
    """Worker i: its shard, shift h_i, compressor and random stream.

    ``step(x)`` returns (message m_i (decoded), bits, local loss, seconds).
    """

    def __init__(self, spec, X, y, compressor, method, shift_lr, seed=None, h0=None):
        self.spec, self.X, self.y = spec, X, np.asarray(y, dtype=np.float64)
        self.compressor = make_compressor(compressor)
        self.method, self.shift_lr = method, float(shift_lr)
        self.rng = np.random.default_rng(seed)
        self.h = np.zeros(spec.n_features) if h0 is None else np.array(h0, dtype=np.float64)

    def step(self, x):
        t0 = time.perf_counter()
        loss, g = self.spec.loss_grad(self.X, self.y, x)
        if self.method == "gd":
            m, bits = g, 32 * g.shape[0]
        elif self.method == "no_shift":
            m, bits = self.compressor.compress(g, self.rng)
        else:  # diana, ef21: compress the difference to the shift
            m, bits = self.compressor.compress(g - self.h, self.rng)
            self.h += self.shift_lr * m
        return m, int(bits), loss, time.perf_counter() - t0


class DianaServer:
    """The server's state: x, h = sum w_i h_i, and a copy of each h_i (for recovery)."""

    def __init__(self, spec, weights, gamma, shift_lr, method, x0=None):
        self.spec, self.weights = spec, np.asarray(weights, dtype=np.float64)
        self.gamma, self.shift_lr, self.method = float(gamma), float(shift_lr), method
        d = spec.n_features
        self.x = np.zeros(d) if x0 is None else np.array(x0, dtype=np.float64)
        self.h = np.zeros(d)
        self.shifts = [np.zeros(d) for _ in self.weights]

    def step(self, messages):
        mean_m = sum(w * m for w, m in zip(self.weights, messages))
        if self.method in ("gd", "no_shift"):
            g = mean_m
        else:
            g = self.h + mean_m
            self.h = self.h + self.shift_lr * mean_m
            for hi, m in zip(self.shifts, messages):
                hi += self.shift_lr * m
        self.x = self.spec.prox(self.x - self.gamma * g, self.gamma)
        return self.x


def default_shift_lr(method, omega):
    if method == "diana":
        return 1.0 / (1.0 + omega)
    return 1.0 if method == "ef21" else 0.0


def default_gamma(method, L, compressor, d, n_workers):
    if method == "gd":
        return 1.0 / L
    if method == "ef21":
        delta = compressor.delta(d) if hasattr(compressor, "delta") else 1.0 / (1.0 + compressor.omega(d))
        if delta >= 1.0:
            return 1.0 / L
        theta = 1.0 - math.sqrt(1.0 - delta)
        beta = (1.0 - delta) / theta
        return 1.0 / (L * (1.0 + math.sqrt(beta / theta)))
    omega = compressor.omega(d)
    return 1.0 / (L * (1.0 + 6.0 * omega / n_workers))


def reference_optimum(spec, X, y, tol=1e-13, max_iter=50000):
    """(F*, x*) from a tight in-memory solve on all the data (the oracle for suboptimality):
    Newton's method for logistic (d up to a few thousand), gap-certified coordinate
    descent (DuHL with all data in memory, rel_gap <= ``tol``) for lasso."""
    X = X.toarray() if sp.issparse(X) and spec.n_features <= 2000 and spec.model == "logistic" else X
    y = np.asarray(y, dtype=np.float64)
    d, n = spec.n_features, X.shape[0]

    def F(x):
        return spec.loss_grad(X, y, x)[0] + spec.reg_value(x)

    if spec.model == "logistic":
        x = np.zeros(d)
        for _ in range(100):
            _, g = spec.loss_grad(X, y, x)
            g = g + spec.reg * x
            s = -y * (X @ x)
            p = 0.5 * (1.0 + np.tanh(0.5 * s))
            H = (X.T * (p * (1.0 - p) / n)) @ X + spec.reg * np.eye(d)
            step = np.linalg.solve(H, g)
            t = 1.0
            while F(x - t * step) > F(x) + 1e-16 * abs(F(x)) and t > 1e-8:
                t *= 0.5
            x = x - t * step
            if float(np.abs(g).max()) <= 1e-15 * max(1.0, float(np.abs(x).max())) or \
                    float(np.abs(t * step).max()) <= 1e-16 * max(1.0, float(np.abs(x).max())):
                break
        return F(x), x
    # lasso: our coordinate descent, certified by its duality gap
    from solvers.duhl.solver import DuHL
    from solvers.glm.problems import make_problem

    problem = make_problem("lasso", X, y, alpha=spec.reg, fit_intercept=False)
    res = DuHL(memory_budget=None, tol=tol, max_epochs=max_iter, random_state=0).solve(problem)
    x = res.a
    return F(x), x


@dataclass
class DianaResult:
    x: np.ndarray
    trace: pd.DataFrame
    status: str
    objective: float
    suboptimality: float
    time_s: float
    n_rounds: int
    bits_sent: int
    events: list

    @property
    def converged(self):
        return self.status == "converged"


class InProcessWorkers:
    def __init__(self, workers):
        self.workers = workers
        self.events = []

    def step(self, x):
        return [w.step(x) for w in self.workers]

    def close(self):
        pass


class Diana:
    """DIANA and its baselines on ``n_workers`` equal row shards.

    Parameters
    ----------
    n_workers : int
    method : {"diana", "gd", "no_shift", "ef21"}
    compressor : name, mapping or Compressor (see solvers.distributed_glm.compression.make_compressor)
    gamma, shift_lr : float or None (defaults above)
    tol : float
        Stop once F(x) - F* <= tol (``f_star`` given to ``solve``) ...
    max_rounds, max_time : ... or after this many rounds / seconds.
    """

    def __init__(self, n_workers=4, method="diana", compressor="identity", gamma=None, shift_lr=None,
                 tol=1e-8, max_rounds=10000, max_time=None, random_state=None, callback=None,
                 executor_factory=None):
        self.n_workers, self.method, self.compressor = n_workers, method, compressor
        self.gamma, self.shift_lr, self.tol = gamma, shift_lr, tol
        self.max_rounds, self.max_time = max_rounds, max_time
        self.random_state, self.callback = random_state, callback
        self.executor_factory = executor_factory
        self._validate()

    def _validate(self):
        check_params("DIANA", n_workers=self.n_workers, method=self.method, gamma=self.gamma,
                     shift_lr=self.shift_lr, tol=self.tol, max_rounds=self.max_rounds,
                     max_time=self.max_time, random_state=self.random_state)
        comp = make_compressor(self.compressor)
        if self.method in ("diana", "no_shift") and not comp.unbiased:
            raise ValueError(f"The '{self.method}' method needs an unbiased compressor; {comp!r} is biased "
                             "(use method='ef21').")

    def settings(self, spec, X_shards):
        """(compressor, gamma, shift_lr, L) for these shards."""
        return self.settings_from_L(spec, max(spec.smoothness(X) for X in X_shards))

    def settings_from_L(self, spec, L):
        comp = Identity() if self.method == "gd" else make_compressor(self.compressor)
        d = spec.n_features
        gamma = self.gamma if self.gamma is not None else default_gamma(self.method, L, comp, d, self.n_workers)
        omega = comp.omega(d) if comp.unbiased else 0.0
        shift_lr = self.shift_lr if self.shift_lr is not None else default_shift_lr(self.method, omega)
        return comp, gamma, shift_lr, L

    def solve(self, spec, X, y, f_star=None, L=None):
        """In-process workers on row shards of (X, y); ``f_star`` for suboptimality; ``L`` (max_i L_i
        of these shards) when the caller already has it."""
        X_shards = [X[lo:hi] for lo, hi in shard_rows(X.shape[0], self.n_workers)]
        y_shards = [y[lo:hi] for lo, hi in shard_rows(X.shape[0], self.n_workers)]
        comp, gamma, shift_lr, _ = (self.settings(spec, X_shards) if L is None else self.settings_from_L(spec, L))
        seeds = np.random.SeedSequence(self.random_state).spawn(self.n_workers)
        workers = [DianaWorker(spec, Xs, ys, comp, self.method, shift_lr, seed=s)
                   for Xs, ys, s in zip(X_shards, y_shards, seeds)]
        weights = [Xs.shape[0] / X.shape[0] for Xs in X_shards]
        return self.run(spec, InProcessWorkers(workers), weights, gamma, shift_lr, f_star)

    def run(self, spec, executor, weights, gamma, shift_lr, f_star=None):
        server = DianaServer(spec, weights, gamma, shift_lr, self.method)
        if hasattr(executor, "attach"):
            executor.attach(server)  # recovery reads the server's copy of the shifts
        t0 = time.perf_counter()
        rows, bits, status, rnd = [], 0, None, 0
        f0 = None
        try:
            while True:
                t_round = time.perf_counter()
                out = executor.step(server.x)
                wall = time.perf_counter() - t_round
                loss = float(sum(w * o[2] for w, o in zip(weights, out)))  # F at the broadcast x
                F = loss + spec.reg_value(server.x)
                f0 = F if f0 is None else f0
                sub = F - f_star if f_star is not None else np.nan
                row = dict(round=rnd, time_s=time.perf_counter() - t0, primal=F, train_loss=loss,
                           suboptimality=sub, rel_suboptimality=sub / f0 if f0 else np.nan,
                           bits_sent=bits, local_s=max(o[3] for o in out), comm_s=max(wall - max(o[3] for o in out), 0.0))
                rows.append(row)
                if self.callback is not None:
                    self.callback(dict(row))
                if f_star is not None and sub <= self.tol:
                    status = "converged"
                elif not np.isfinite(F):
                    status = "diverged"
                elif rnd >= self.max_rounds:
                    status = "max_rounds"
                elif self.max_time is not None and time.perf_counter() - t0 >= self.max_time:
                    status = "max_time"
                if status is not None:
                    break
                bits += sum(o[1] for o in out)
                server.step([o[0] for o in out])
                rnd += 1
        finally:
            executor.close()
        frame = pd.DataFrame(rows)
        last = rows[-1]
        return DianaResult(x=server.x, trace=frame, status=status, objective=last["primal"],
                           suboptimality=last["suboptimality"], time_s=last["time_s"], n_rounds=rnd,
                           bits_sent=bits, events=list(getattr(executor, "events", [])))
