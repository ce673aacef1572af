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

A part whose data is on disk (its shard: a problem of
:func:`solvers.glm.problems.make_problem_on_disk`'s kind, ``host_budget`` of RAM for it) runs
DuHL from disk as its local solver. The part knows the state its round starts from (the
broadcast one), so DuHL's start reads no data for it (:class:`LocalSubproblem`). Its block in RAM
and its gap memory carry over from one round to the next (a :class:`Carry`): a round swaps
the block's rows by the memory's (stale) gaps, refreshes the oldest of them as DuHL does, and
reports the memory's estimate of its gap, not certified. An ``exact`` round (the driver asks
for one once the estimates reach the target) reads every gap at the broadcast state again: its
sum is the part's certified share of the global gap, and DuHL's gap memory starts anew from it.

Bits follow :mod:`solvers.distributed_glm.compression`'s wire convention (a float is
32 bits): the message, plus 32 bits for the gap and 32 for the intercept offset
when the problem has one. ``da`` also travels back (the driver's copy of a, from
which a lost replica is rebuilt); it is bookkeeping, not the algorithm's message,
and is not counted.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, replace
from typing import NamedTuple, Optional

import numpy as np

from solvers.distributed_glm.compression import FLOAT_BITS, make_compressor
from solvers.duhl.budget import parse_budget
from solvers.duhl.loops.python import Carry
from solvers.duhl.solver import DuHL
from solvers.glm.models import quadratic_majorant
from solvers.glm.problems import Problem
from solvers.kernels import cpu
from solvers.storage.on_disk import DEFAULT_BUFFER_BYTES

# The stale gaps a part on disk refreshes a round, in bytes per byte its epoch and block gaps read: fixed, as
# DuHL's "auto" would time the disk against the gap kernel and a part's iterates must not depend on a
# timing. Less re-reads less of the shard a round and takes more rounds (design-decisions/clusters.md).
DISK_REFRESH = 0.25


def ram_block_rows(host_bytes, row_bytes):
    """The coordinates DuHL's RAM tier holds under ``host_bytes`` of dense rows of ``row_bytes``: its
    read buffers first (an eighth of the budget, at most 64 MB, at least two rows), the block the
    rest (solvers.duhl.solver's split, without prefetch)."""
    buffer = max(2 * row_bytes, min(DEFAULT_BUFFER_BYTES, host_bytes // 8) // row_bytes * row_bytes)
    return max(1, (host_bytes - buffer) // row_bytes)


def epochs_of(updates, n):
    """max_epochs for ``updates`` coordinate updates of n, or the nearest count under it (else over it) whose quotient
    times n is that count exactly: DuHL's loop allows int(max_epochs * n - done) more updates a round, so
    a product a hair off an integer (158 / 600 * 600 is 157.99999999999997) never lets it reach its
    budget (solvers/duhl's stop; reported to its owner)."""
    want = max(1, int(updates))
    k = next((k for k in itertools.chain(range(want, 0, -1), itertools.count(want + 1)) if (k / n) * n == k))
    return k / n


def partition(n_coords, n_parts):
    """Contiguous, balanced [lo, hi) ranges of coordinates (rows of A: slices are views)."""
    edges = np.linspace(0, n_coords, n_parts + 1).round().astype(np.int64)
    return [(int(edges[k]), int(edges[k + 1])) for k in range(n_parts)]


def sub_problem(problem, lo, hi):
    """The Problem restricted to coordinates [lo, hi): same f (c, b), its rows of A (a problem
    on disk is a part's whole shard: [0, n_coords) only)."""
    if problem.on_disk:
        if (lo, hi) != (0, problem.n_coords):
            raise ValueError(f"A part on disk holds its own shard: coordinates [0, {problem.n_coords}). "
                             f"Got [{lo}, {hi}) instead.")
        return replace(problem, info=dict(problem.info, coords=(lo, hi)))
    A = problem.A[lo:hi]
    return replace(problem, A=A, mu=np.asarray(problem.mu[lo:hi]), sqnorm=np.asarray(problem.sqnorm[lo:hi]),
                   info=dict(problem.info, coords=(lo, hi)))


def local_form(problem):
    """(the quadratic-term problem a part's local subproblems are posed in, f's smoothness): for the
    quadratic term, the problem itself and c. For a loss of the margins (a classifier in the primal,
    A = the signed features), f's quadratic bound at the broadcast state, as ProxCoCoA+ (Smith et al.,
    "CoCoA: A General Framework for Communication-Efficient Distributed Optimization", JMLR 2018):
    the same A and g under c = 1, b = 0 and the loss's smoothness L, so that the local subproblem
    <grad f(v), A_[k] da> + (sigma' L / 2) ||A_[k] da||^2 + g is the quadratic one with c' = sigma' L."""
    if not problem.loss:
        return problem, problem.c
    smoothness, name, theta = quadratic_majorant(problem.theta)
    return replace(problem, name=name, theta=theta, c=1.0, b=np.zeros(problem.A.shape[1])), smoothness


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
    bytes_disk: int = 0  # bytes the part read from disk this round (a part on disk)
    disk_s: float = 0.0  # seconds it spent reading them
    updates: int = 0     # coordinate updates it made (H epochs of its coordinates; on disk, of its block)
    certified: bool = True  # gap is exact (on disk: False when it is the gap memory's estimate)
    settled: bool = False   # on disk: its local solve ended at its share of the target (a certified local gap)


@dataclass
class LocalSubproblem(Problem):
    """A part's local subproblem whose start state is known: ``start`` = (a, z, off), the state
    the round starts from. ``state_from(a)`` at that a returns it without reading the data (on
    disk, A^T a is a pass over every coordinate with a_i != 0); ``start_gap_s`` adds up the
    seconds spent on gaps at that state."""

    start: Optional[tuple] = None
    start_gap_s: float = 0.0

    def _at_start(self, a, z=None, off=None):
        if self.start is None or not np.array_equal(a, self.start[0]):
            return False
        return z is None or (np.array_equal(z, self.start[1]) and np.array_equal(off, self.start[2]))

    def state_from(self, a):
        if self._at_start(a):
            return self.start[1].copy(), self.start[2].copy()
        return super().state_from(a)

    def coordinate_gaps(self, a, z, off, coords=None, with_s=False):
        started = time.perf_counter()
        out = super().coordinate_gaps(a, z, off, coords, with_s)
        if self._at_start(a, z, off):
            self.start_gap_s += time.perf_counter() - started
        return out


class CocoaPart:
    """One part's state machine: its coordinates' a, its local solver, its shift.

    ``round(z, off, local_epochs=None, exact=False)``: gap of its coordinates at the
    broadcast state, then H local epochs (``local_epochs``, default the part's own),
    then its message; returns a :class:`RoundOutput`. The part applies a += gamma da
    itself; ``set_a`` rebuilds it from the driver's copy.
    """

    def __init__(self, problem, lo, hi, n_parts, gamma, sigma, local_epochs=1, local_solver="scd",
                 memory_budget=None, device="cpu", random_state=None, a0=None, prefetch="auto",
                 gap_kernel="tpa", concurrency="auto", compressor=None, shift_lr=None, h0=None,
                 host_budget=None, local_tol=0.0):
        self.problem = sub_problem(problem, lo, hi)
        self.host_budget, self.local_tol = host_budget, float(local_tol)
        self.loaded_bytes = 0  # a shard on disk that its host_budget holds: read into RAM once, here
        if self.problem.on_disk:
            if local_solver != "duhl" or device != "cpu":
                raise ValueError("A part whose data is on disk runs DuHL from disk on the CPU (local_solver='duhl', "
                                 f"device='cpu'). Got local_solver={local_solver!r}, device={device!r} instead.")
            if host_budget is None:
                raise ValueError("A part whose data is on disk needs a 'host_budget' (the RAM its shard may use). "
                                 "Got None instead.")
            budget = parse_budget(host_budget, self.problem.A.nbytes)
            if budget >= self.problem.A.nbytes:  # it all fits: the shard lives in RAM from now on
                disk, before = self.problem.A, self.problem.A.bytes_read
                self.problem = self.problem.in_memory()
                self.loaded_bytes = int(disk.bytes_read - before)
        # the local DuHL's block and gap memory, from one round to the next (a part on disk)
        self.carry = Carry() if self.problem.on_disk else None
        # the local subproblems' form (the problem's own gaps certify: self.problem)
        self.quad, self.smoothness = local_form(self.problem)
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
        p = self.quad
        return p.state_from(self.a)[0] / p.c + p.b

    def set_a(self, a):
        self.a = np.array(a, dtype=np.float64)
        if self.carry is not None:  # its gap memory's proofs held at the old a
            self.carry.forget()
        if self.compressor is not None:
            self.v = self.contribution()

    def gaps(self, z, off):
        return float(self.problem.coordinate_gaps(self.a, z, off).sum())

    def local_on_disk(self, z, off, local_epochs=None, exact=False):
        """Round on disk: H DuHL rounds from the shard under ``host_budget`` of RAM, from the broadcast
        state, continuing the last round's block and gap memory (:class:`Carry`): H times the block of
        largest remembered gaps swapped in and an epoch on it, the oldest gaps refreshed beside it (or
        nothing once the part's gap is at ``local_tol`` times P(0)). The part's gap is the memory's
        estimate at the broadcast state after the first refresh; ``exact`` (and the first round): a
        pass over every gap there first, its sum certified. Returns (gap at the broadcast state,
        whether certified, its seconds, dv, d_off, da, coordinate updates, whether the local solve
        converged).

        The local end state is not certified (DuHL's ``certify_end=False``): that would be a pass
        over the shard, and the driver asks for an exact round once the estimates reach the target.
        H counts DuHL rounds (epochs of the block), not epochs of the shard: with K > 1 CoCoA+'s
        rounds, not the local work, set how far a round gets (on a 164 MB logistic problem, K = 2:
        22-23 rounds with one block epoch or a shard's (4-5 blocks')). One part (K = 1) is DuHL itself:
        a large H solves it in one round."""
        p = self.quad
        epochs = self.local_epochs if local_epochs is None else int(local_epochs)
        n = p.n_coords
        block = ram_block_rows(parse_budget(self.host_budget, p.A.nbytes), int(p.coord_bytes.max()))
        c_local = self.sigma * self.smoothness
        z = np.array(z, dtype=np.float64)
        start_off = np.array([off[0] / self.sigma])
        # the local subproblem's state at a_k is (z, off / sigma) (see solvers.distributed_glm.cocoa); with
        # b' = -z / c' its v' = z' / c' + b' is A_[k]^T (a - a_k): DuHL's result v is dv itself
        fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(Problem)}
        local = LocalSubproblem(**{**fields, "c": c_local, "b": -z / c_local},
                                start=(self.a, z, start_off))
        if exact:
            self.carry.forget()
        # a solve from the carried memory certifies nothing itself (tol 0): a part's certificate is of use
        # only in a round in which every part reads its gaps whole, which the driver asks for
        tol = self.local_tol if self.carry.memory is None else 0.0
        # H DuHL rounds, an epoch of the block each (no prefetch: a block staged past the last round is a waste)
        solver = DuHL(host_budget=self.host_budget, selection="gap", local_epochs=1, tol=tol,
                      max_epochs=epochs_of(epochs * min(block, n), n), device="cpu", random_state=self.rng,
                      prefetch=0.0, refresh=DISK_REFRESH, certify_end=False)
        res = solver.solve(local, a0=self.a, carry=self.carry)
        gap, certified = self.carry.start
        da = res.a - self.a
        return (gap, certified, local.start_gap_s, res.v, float(p.mu @ da), da, int(round(res.epochs * n)),
                res.status == "converged")

    def local_update(self, z, off, local_epochs=None):
        """H epochs on the local subproblem; returns (dv, d_off, da)."""
        p = self.quad
        epochs = self.local_epochs if local_epochs is None else int(local_epochs)
        c_local = self.sigma * self.smoothness
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
        disk = self.problem.A if self.problem.on_disk else None
        read0, read_s0 = (disk.bytes_read, disk.read_s) if disk is not None else (0, 0.0)
        epochs = self.local_epochs if local_epochs is None else int(local_epochs)
        certified, settled = True, False
        if disk is not None:
            gap, certified, gap_s, dv, d_off, da, updates, settled = self.local_on_disk(z, off, local_epochs, exact)
        else:
            gap = self.gaps(z, off)
            gap_s = time.perf_counter() - t0
            dv, d_off, da = self.local_update(z, off, local_epochs)
            updates = epochs * self.problem.n_coords
        bytes_disk = int(disk.bytes_read - read0) + self.loaded_bytes if disk is not None else self.loaded_bytes
        disk_s = float(disk.read_s - read_s0) if disk is not None else 0.0
        self.loaded_bytes = 0  # (counted once: in the first round)
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
        return RoundOutput(gap, message, d_off, da, time.perf_counter() - t0, int(bits) + scalar_bits, gap_s,
                           bytes_disk, disk_s, int(updates), bool(certified), bool(settled))

    def close(self):
        """Lets the local solver's block go (a part on disk)."""
        if self.carry is not None:
            self.carry.close()


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
        for part in self.parts:
            part.close()
