"""CoCoA+: K parts of the coordinates each solve a local subproblem; the driver adds.

Ma, Smith, Jaggi, Jordan, Richtárik, Takáč, "Adding vs. Averaging in
Distributed Primal-Dual Optimization", ICML 2015 (CoCoA+), in the primal-dual
form of :mod:`solvers.glm.problems` (O(a) = f(A a) + sum_i g_i(a_i), f(v) = c/2
||P v - b||^2 with P the centring when an intercept is fitted, 1/c-smooth...
i.e. f is c-smooth).

Part k owns coordinates [k] (features for Lasso/ElasticNet/Ridge: model
parallelism; samples for SVM/logistic solved in the dual: data parallelism)
and, given the shared v = A a, approximately minimises its local subproblem

    G_k(da) = <grad f(v), A_[k] da> + (sigma' c / 2) ||P A_[k] da||^2 + sum_{i in [k]} g_i(a_i + da_i)

(the (1/K) f(v) constant dropped), with sigma' = K gamma the safe choice for
aggregation a += gamma da (adding: gamma = 1, sigma' = K; averaging: gamma =
1/K, sigma' = 1). G_k is our form again with c' = sigma' c and the local
state z' = z + c' A_[k] da, off' = off / sigma' + mu_[k] . da (so that
u' = z' - c' off' = u + c' P A_[k] da): the same SCD kernel, run with
curvature c' ||A_i - mu_i||^2, minimises it. A part returns
dv = A_[k] da = (z' - z) / c' and d_off = mu_[k] . da; the driver sets
z += gamma c sum_k dv_k, off += gamma sum_k d_off_k.

The duality gap is a sum of coordinate gaps, so each part sums its own at the
broadcast state; the driver adds K numbers. A round's gaps are those of the
state the round starts from (computed by the part just before its local
epochs), so every reported gap is exact; on convergence the driver returns
that certified start state. K = 1, gamma = 1 is single-machine SCD (DuHL with
all data resident): same coordinate order, same trace.

Local solvers: ``"scd"`` (H epochs of in-memory SCD over the part) or
``"duhl"`` (DuHL under a device ``memory_budget`` for H epochs' worth of
coordinate updates on the local subproblem).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from solvers.duhl.solver import DuHL
from solvers.glm.checks import check_params
from solvers.glm.trace import SolveResult
from solvers.kernels import cpu

AGGREGATIONS = ("adding", "averaging")


def partition(n_coords, n_parts):
    """Contiguous, balanced [lo, hi) ranges of coordinates (rows of A: slices are views)."""
    edges = np.linspace(0, n_coords, n_parts + 1).round().astype(np.int64)
    return [(int(edges[k]), int(edges[k + 1])) for k in range(n_parts)]


def sub_problem(problem, lo, hi):
    """The Problem restricted to coordinates [lo, hi): same f (c, b), its rows of A."""
    A = problem.A[lo:hi]
    return replace(problem, A=A, mu=np.asarray(problem.mu[lo:hi]), sqnorm=np.asarray(problem.sqnorm[lo:hi]),
                   info=dict(problem.info, coords=(lo, hi)))


def part_seed(random_state, k):
    if random_state is None:
        return None
    return random_state if k == 0 else [int(random_state), k]


class CocoaPart:
    """One part's state machine: its coordinates' a and its local solver.

    ``round(z, off)``: gap of its coordinates at the broadcast state, then H
    local epochs; returns (gap, dv, d_off, da, seconds). The part applies
    a += gamma da itself; ``set_a`` rebuilds it from the driver's copy.
    """

    def __init__(self, problem, lo, hi, n_parts, gamma, sigma, local_epochs=1, local_solver="scd",
                 memory_budget=None, device="cpu", random_state=None, a0=None, prefetch="auto",
                 gap_kernel="tpa", concurrency="auto"):
        self.problem = sub_problem(problem, lo, hi)
        self.lo, self.hi = lo, hi
        self.gamma, self.sigma = float(gamma), float(sigma)
        self.local_epochs = int(local_epochs)
        self.local_solver = local_solver
        self.memory_budget = memory_budget
        self.device = device
        self.prefetch = prefetch
        self.gap_kernel = gap_kernel
        self.concurrency = concurrency
        self.rng = np.random.default_rng(random_state)
        self.a = np.zeros(hi - lo) if a0 is None else np.array(a0, dtype=np.float64)
        if local_solver == "scd" and device != "cpu":
            raise ValueError("local_solver='scd' runs on the CPU; use local_solver='duhl' with device "
                             f"{device!r}.")

    def set_a(self, a):
        self.a = np.array(a, dtype=np.float64)

    def gaps(self, z, off):
        return float(self.problem.coordinate_gaps(self.a, z, off).sum())

    def local_update(self, z, off):
        """H epochs on the local subproblem; returns (dv, d_off, da)."""
        p = self.problem
        c_local = self.sigma * p.c
        if self.local_solver == "scd":
            a = self.a.copy()
            zl = np.array(z, dtype=np.float64)
            offl = np.array([off[0] / self.sigma])
            n = p.n_coords
            coords = np.arange(n, dtype=np.int64)
            for _ in range(self.local_epochs):
                order = self.rng.permutation(n)
                if p.sparse:
                    cpu.scd_epoch_sparse(p.A.indptr, p.A.indices, p.A.data, coords, order, a, zl, offl,
                                         p.mu, p.sqnorm, c_local, p.theta)
                else:
                    cpu.scd_epoch_dense(p.A, coords, order, a, zl, offl, p.mu, p.sqnorm, c_local, p.theta)
            da = a - self.a
            return (zl - z) / c_local, offl[0] - off[0] / self.sigma, da
        # DuHL on the local subproblem: c' = sigma c and b' chosen so that its
        # start state is (a_k, z, off / sigma) up to a constant shift of u that P removes
        Ak_a = p.state_from(self.a)[0] / p.c + p.b  # A_[k]^T a_k
        shift = float(p.mu @ self.a) - off[0] / self.sigma
        local = replace(p, c=c_local, b=Ak_a - np.asarray(z) / c_local + shift)
        solver = DuHL(memory_budget=self.memory_budget, selection="gap", local_epochs=1, tol=0.0,
                      max_epochs=self.local_epochs, device=self.device, random_state=self.rng,
                      prefetch=self.prefetch, gap_kernel=self.gap_kernel,
                      concurrency=self.concurrency)
        res = solver.solve(local, a0=self.a)
        da = res.a - self.a
        return res.v - Ak_a, float(p.mu @ da), da

    def round(self, z, off):
        t0 = time.perf_counter()
        gap = self.gaps(z, off)
        dv, d_off, da = self.local_update(z, off)
        self.a += self.gamma * da
        return gap, dv, d_off, da, time.perf_counter() - t0


class InProcessParts:
    """The parts in this process (the math's executor; tasks/replicas has the Dask one)."""

    def __init__(self, parts):
        self.parts = parts
        self.events = []

    def round(self, z, off):
        return [p.round(z, off) for p in self.parts]

    def gaps(self, z, off):
        return [p.gaps(z, off) for p in self.parts]

    def close(self):
        pass


@dataclass
class CocoaResult(SolveResult):
    bytes_dv: int = 0       # bytes of delta-v sent to the driver, cumulative
    events: list = field(default_factory=list)  # recoveries from lost workers


class CoCoA:
    """CoCoA+ over ``n_parts`` parts of the coordinates.

    Parameters
    ----------
    n_parts : int
        K, the number of parts (replicas).
    aggregation : {"adding", "averaging"}
        gamma = 1, sigma' = K (CoCoA+) or gamma = 1/K, sigma' = 1 (CoCoA).
    local_epochs : int
        H, local epochs per round.
    local_solver : {"scd", "duhl"}
        In-memory SCD, or DuHL with ``memory_budget`` of each part on its device.
    tol, max_epochs, max_time, random_state, callback, prefetch, gap_kernel, concurrency : as DuHL.
    """

    def __init__(self, n_parts=2, aggregation="adding", local_epochs=1, local_solver="scd",
                 memory_budget=None, selection="gap", tol=1e-6, max_epochs=1000, max_time=None,
                 device="cpu", random_state=None, callback=None, executor_factory=None,
                 prefetch="auto", gap_kernel="tpa", concurrency="auto"):
        self.n_parts = n_parts
        self.aggregation = aggregation
        self.local_epochs = local_epochs
        self.local_solver = local_solver
        self.memory_budget = memory_budget
        self.selection = selection  # DuHL's, for the "duhl" local solver (kept for arm settings)
        self.tol = tol
        self.max_epochs = max_epochs
        self.max_time = max_time
        self.device = device
        self.prefetch = prefetch
        self.gap_kernel = gap_kernel
        self.concurrency = concurrency
        self.random_state = random_state
        self.callback = callback
        self.executor_factory = executor_factory  # (solver, problem, parts spec) -> executor
        self._validate()

    def _validate(self):
        check_params("CoCoA", n_parts=self.n_parts, aggregation=self.aggregation,
                     local_epochs=self.local_epochs, local_solver=self.local_solver,
                     memory_budget=self.memory_budget, selection=self.selection, tol=self.tol,
                     max_epochs=self.max_epochs, max_time=self.max_time, device=self.device,
                     random_state=self.random_state, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency)

    @property
    def gamma(self):
        return 1.0 if self.aggregation == "adding" else 1.0 / self.n_parts

    @property
    def sigma(self):
        return float(self.n_parts) if self.aggregation == "adding" else 1.0

    def part_specs(self, problem):
        """Constructor arguments of each part (without the problem)."""
        local_solver = "duhl" if self.memory_budget is not None else self.local_solver
        return [dict(lo=lo, hi=hi, n_parts=self.n_parts, gamma=self.gamma, sigma=self.sigma,
                     local_epochs=self.local_epochs, local_solver=local_solver,
                     memory_budget=self.memory_budget, device=self.device, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency,
                     random_state=part_seed(self.random_state, k))
                for k, (lo, hi) in enumerate(partition(problem.n_coords, self.n_parts))]

    def solve(self, problem, a0=None):
        self._validate()
        if self.n_parts > problem.n_coords:
            raise ValueError(f"The 'n_parts' parameter of CoCoA ({self.n_parts}) is above the number of "
                             f"coordinates ({problem.n_coords}).")
        specs = self.part_specs(problem)
        n = problem.n_coords
        a = np.zeros(n) if a0 is None else np.array(a0, dtype=np.float64)
        if self.executor_factory is None:
            executor = InProcessParts([CocoaPart(problem, a0=a[s["lo"]:s["hi"]], **s) for s in specs])
        else:
            executor = self.executor_factory(problem, specs, a)
        try:
            return self._loop(problem, specs, a, executor)
        finally:
            executor.close()

    def _loop(self, problem, specs, a, executor):
        t0 = time.perf_counter()
        if a.any():  # (a skeleton problem's executor starts from a = 0)
            z, off = problem.state_from(a)
        else:
            z, off = -problem.c * problem.b, np.zeros(1)
        tol_abs = self.tol * problem.P0
        P0 = problem.P0 if problem.P0 > 0 else 1.0
        rows = []
        bytes_dv = 0
        n = problem.n_coords

        def record(rnd, gap, updates, extra):
            primal, dual, _ = problem.objectives(a, z, off, gap=gap)
            row = dict(round=rnd, time_s=time.perf_counter() - t0, epoch=updates / n, primal=primal,
                       dual=dual, gap=gap, rel_gap=gap / P0, bytes_dv=bytes_dv,
                       bits_sent=8 * bytes_dv, **extra)
            rows.append(row)
            if self.callback is not None:
                self.callback(dict(row))

        updates, rnd, status = 0, 0, None
        local_s = comm_s = 0.0
        while True:
            t_round = time.perf_counter()
            results = executor.round(z, off)
            wall = time.perf_counter() - t_round
            gap = float(sum(r[0] for r in results))
            work = max(r[4] for r in results)
            if rnd > 0:
                local_s += work
                comm_s += max(wall - work, 0.0)
            record(rnd, gap, updates, dict(local_s=local_s, comm_s=comm_s))
            if gap <= tol_abs:
                status = "converged"
                break
            if updates >= self.max_epochs * n:
                status = "max_epochs"
            elif self.max_time is not None and time.perf_counter() - t0 >= self.max_time:
                status = "max_time"
            if status is not None:
                break
            # apply this round's updates: the next round's gaps certify the new state
            g = self.gamma
            for s, (_, dv, d_off, da, _) in zip(specs, results):
                z += (g * problem.c) * dv
                off[0] += g * d_off
                a[s["lo"]:s["hi"]] += g * da
                bytes_dv += dv.nbytes
            updates += n * self.local_epochs
            rnd += 1
        # the parts have advanced past the certified state: the driver's a is the answer
        frame = pd.DataFrame(rows)
        if not problem.info.get("skeleton"):  # re-evaluate from a alone: no drift in z can hide
            z, off = problem.state_from(a)
        primal, dual, gap = problem.objectives(a, z, off, gap=None if not problem.info.get("skeleton")
                                               else rows[-1]["gap"])
        v = z / problem.c + problem.b
        return CocoaResult(a=a, v=v, trace=frame, status=status, primal=primal, dual=dual, gap=gap,
                           rel_gap=gap / P0, time_s=rows[-1]["time_s"], epochs=updates / n,
                           n_rounds=rnd, bytes_dv=bytes_dv, events=list(getattr(executor, "events", [])))
