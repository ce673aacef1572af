"""One CoCoA+ part: its coordinates, its local solver and what it sends back each round.

Part k owns coordinates [k] and, given the broadcast state (z, off), approximately
minimises its local subproblem (see :mod:`solvers.distributed_glm.cocoa`) for H
local epochs, applies a_[k] += gamma da itself, and sends the driver its message:

- uncompressed: dv = A_[k]^T da, the change of its contribution to v = A a;
- compressed (``compressor`` given): part k keeps its contribution v_k = A_[k]^T a_[k]
  and a shift h_k (the driver holds the same copy), and sends m_k = Q(v_k - h_k)
  with an unbiased compressor Q, then h_k += shift_lr m_k (DIANA's shift,
  shift_lr = 1/(1 + omega)). The driver's estimate of v_k is h_k + m_k, whose
  error has variance <= omega ||v_k - h_k||^2: as the method converges the shifts
  learn v_k, the variance vanishes and the fixed point is CoCoA+'s exact optimum.
  An ``exact`` round sends v_k - h_k uncompressed and sets h_k = v_k on both
  sides (the driver asks for one before it certifies a gap).

Bits follow :mod:`solvers.distributed_glm.compression`'s wire convention (a float is
32 bits): the message, plus 32 bits for the gap and 32 for the intercept offset
when the problem has one. ``da`` also travels back (the driver's copy of a, from
which a lost replica is rebuilt); it is bookkeeping, not the algorithm's message,
and is not counted.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from solvers.distributed_glm.compression import FLOAT_BITS, make_compressor
from solvers.duhl.solver import DuHL
from solvers.kernels import cpu


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


def default_shift_lr(compressor, m):
    return 1.0 / (1.0 + compressor.omega(m))


class RoundOutput(NamedTuple):
    """What a part returns from a round (a replica returns it through Dask as is)."""

    gap: float          # sum of its coordinates' gaps at the broadcast state
    message: np.ndarray  # dv (uncompressed) or Q(v_k - h_k), decoded
    d_off: float        # mu_[k] . da (the intercept offset's change)
    da: np.ndarray      # its coordinates' step (before gamma)
    seconds: float      # gap + local epochs + compression
    bits: int           # the message's length on the wire (plus the gap and offset scalars)
    gap_s: float        # of which the gap pass


class CocoaPart:
    """One part's state machine: its coordinates' a, its local solver, its shift.

    ``round(z, off, local_epochs=None, exact=False)``: gap of its coordinates at the
    broadcast state, then H local epochs (``local_epochs``, default the part's own),
    then its message; returns a :class:`RoundOutput`. The part applies a += gamma da
    itself; ``set_a`` rebuilds it from the driver's copy.
    """

    def __init__(self, problem, lo, hi, n_parts, gamma, sigma, local_epochs=1, local_solver="scd",
                 memory_budget=None, device="cpu", random_state=None, a0=None, prefetch="auto",
                 gap_kernel="tpa", concurrency="auto", compressor=None, shift_lr=None, h0=None):
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
        m = self.problem.A.shape[1]
        self.scalars = 1 + int(bool(np.any(self.problem.mu)))  # the gap, and the offset with an intercept
        self.compressor = None if compressor is None else make_compressor(compressor)
        if self.compressor is not None:
            self.shift_lr = default_shift_lr(self.compressor, m) if shift_lr is None else float(shift_lr)
            self.h = np.zeros(m) if h0 is None else np.array(h0, dtype=np.float64)
            self.v = self.contribution()

    def contribution(self):
        """v_k = A_[k]^T a_[k] (what this part adds to v = A^T a)."""
        p = self.problem
        return p.state_from(self.a)[0] / p.c + p.b

    def set_a(self, a):
        self.a = np.array(a, dtype=np.float64)
        if self.compressor is not None:
            self.v = self.contribution()

    def gaps(self, z, off):
        return float(self.problem.coordinate_gaps(self.a, z, off).sum())

    def local_update(self, z, off, local_epochs=None):
        """H epochs on the local subproblem; returns (dv, d_off, da)."""
        p = self.problem
        epochs = self.local_epochs if local_epochs is None else int(local_epochs)
        c_local = self.sigma * p.c
        if self.local_solver == "scd":
            a = self.a.copy()
            zl = np.array(z, dtype=np.float64)
            offl = np.array([off[0] / self.sigma])
            n = p.n_coords
            coords = np.arange(n, dtype=np.int64)
            for _ in range(epochs):
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
                      max_epochs=epochs, device=self.device, random_state=self.rng,
                      prefetch=self.prefetch, gap_kernel=self.gap_kernel,
                      concurrency=self.concurrency)
        res = solver.solve(local, a0=self.a)
        da = res.a - self.a
        return res.v - Ak_a, float(p.mu @ da), da

    def round(self, z, off, local_epochs=None, exact=False):
        t0 = time.perf_counter()
        gap = self.gaps(z, off)
        gap_s = time.perf_counter() - t0
        dv, d_off, da = self.local_update(z, off, local_epochs)
        self.a += self.gamma * da
        scalar_bits = FLOAT_BITS * self.scalars
        if self.compressor is None:
            message, bits = dv, FLOAT_BITS * dv.shape[0]
        else:
            self.v += self.gamma * dv
            diff = self.v - self.h
            if exact:
                message, bits = diff, FLOAT_BITS * diff.shape[0]
                self.h = self.v.copy()
            else:
                message, bits = self.compressor.compress(diff, self.rng)
                self.h += self.shift_lr * message
        return RoundOutput(gap, message, d_off, da, time.perf_counter() - t0, int(bits) + scalar_bits, gap_s)


class InProcessParts:
    """The parts in this process (the math's executor; tasks/distributed_glm/replicas has the Dask one)."""

    def __init__(self, parts):
        self.parts = parts
        self.events = []

    def round(self, z, off, *extra):
        return [p.round(z, off, *extra) for p in self.parts]

    def gaps(self, z, off):
        return [p.gaps(z, off) for p in self.parts]

    def close(self):
        pass
