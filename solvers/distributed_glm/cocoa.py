"""CoCoA+: K parts of the coordinates each solve a local subproblem; the driver adds.

Ma, Smith, Jaggi, Jordan, Richtárik, Takáč, "Adding vs. Averaging in
Distributed Primal-Dual Optimization", ICML 2015 (CoCoA+), in the primal-dual
form of :mod:`solvers.glm.problems` (O(a) = f(A a) + sum_i g_i(a_i), f(v) = c/2
||P v - b||^2 with P the centring when an intercept is fitted: f is c-smooth).

Part k owns coordinates [k] (features for Lasso/ElasticNet/Ridge: model
parallelism; samples for SVM/logistic solved in the dual: data parallelism)
and, given the shared v = A a, approximately minimises its local subproblem

    G_k(da) = <grad f(v), A_[k] da> + (sigma' c / 2) ||P A_[k] da||^2 + sum_{i in [k]} g_i(a_i + da_i)

(the (1/K) f(v) constant dropped) for aggregation a += gamma da (adding: gamma =
1; averaging: gamma = 1/K). Any sigma' >= sigma'_min = gamma max_a ||P A a||^2 /
sum_k ||P A_[k] a_[k]||^2 is safe; sigma'_min <= gamma K (``sigma="safe"``, the
paper's choice, needs no data); ``sigma="data"`` computes sigma'_min exactly
(:mod:`solvers.distributed_glm.sigma`): about gamma on parts whose columns are
nearly orthogonal, gamma K on equicorrelated ones. G_k is our form again with
c' = sigma' c and the local state z' = z + c' A_[k] da, off' = off / sigma' +
mu_[k] . da: the same SCD kernel minimises it (:mod:`solvers.distributed_glm.cocoa_part`).
The driver sets z += gamma c sum_k dv_k, off += gamma sum_k d_off_k.

A classifier in the primal (features as coordinates: L1, elastic-net or L2 logistic
regression, the squared hinge) has a loss of the margins f(v) = C sum_k loss(v_k), L-smooth
with L = sup loss'' (C/4, 2C), as its data term. Its local subproblem is the same G_k with
grad f(v) = z and c' = sigma' L: f's quadratic bound, as Smith et al., "CoCoA: A General
Framework for Communication-Efficient Distributed Optimization", JMLR 2018 (ProxCoCoA+ when
g is the L1 norm); each part solves it in the quadratic form (cocoa_part.local_form). The
driver adds the margins' changes, v += gamma sum_k dv_k, and sets z = grad f(v).

The duality gap is a sum of coordinate gaps, so each part sums its own at the
broadcast state; the driver adds K numbers. A round's gaps are those of the
state the round starts from, so every reported gap is exact (but for parts on
disk and compressed messages, below); on convergence the driver returns that
certified start state. K = 1, gamma = 1 is
single-machine SCD (DuHL with all data resident): same coordinate order, same trace.

Compressed messages (``compressor``): each part sends Q(v_k - h_k) with DIANA's
shifts h_k (see cocoa_part); the driver's v is then an unbiased estimate, so a
round's gap is an estimate (``certified`` = 0 in the trace). When an estimate
meets the tolerance the driver asks the parts for one exact round, and stops
only on a certified gap at or below it.

Local epochs H (``local_epochs``) per round, or ``"auto"``: rounds 0 and 1 run
one epoch; from round 1's timings H = (communication + the gap pass) / one local
epoch (1 to ``MAX_AUTO_EPOCHS``), so a round spends about as long in local epochs
as in everything else (in-process, where nothing is communicated, H = 1 or 2).

Local solvers: ``"scd"`` (H epochs of in-memory SCD over the part) or
``"duhl"`` (DuHL under a device ``memory_budget`` for H epochs' worth of
coordinate updates on the local subproblem). Parts whose data is on disk (each its own
shard, built by the caller's executor: tasks/distributed_glm) run DuHL from disk with
``host_budget`` of RAM for H DuHL rounds a round, continuing their block and gap memory from
round to round: H times the largest remembered gaps are swapped into the RAM block and an epoch
runs on it (H counts epochs of the block there) while the oldest gaps are refreshed, and a part
reports its memory's estimate of its gap at the broadcast state. A round whose estimates sum to
the target, or in which every part's local solve reached its share of it, is followed by an exact
one, in which each part reads every gap at the broadcast state (its first round does too): the
run stops only on such a certified gap. The trace then
has ``bytes_disk`` (all parts, so far) and, per part k, ``part<k>_bytes_disk`` and
``part<k>_bits_sent``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from solvers.distributed_glm.cocoa_part import (CocoaPart, InProcessParts, RoundOutput,  # noqa: F401 (re-exported)
                                                 default_shift_lr, part_seed, partition, sub_problem)
from solvers.distributed_glm.compression import make_compressor
from solvers.distributed_glm.sigma import sigma_ratio
from solvers.glm.checks import AUTO_OR_POSITIVE_INT, Either, Real, check_params
from solvers.glm.trace import SolveResult

AGGREGATIONS = ("adding", "averaging")
MAX_AUTO_EPOCHS = 100
RULES = {"local_epochs": AUTO_OR_POSITIVE_INT, "sigma": Either("safe", "data", Real(0, None, "neither"))}


@dataclass
class CocoaResult(SolveResult):
    bytes_dv: int = 0       # bytes of the parts' messages (float64 arrays) sent to the driver, cumulative
    bits_sent: int = 0      # the same messages on the wire (compression's convention: 32-bit floats)
    sigma: float = 0.0      # the sigma' the parts used
    sigma_s: float = 0.0    # seconds spent computing it (set-up: not in time_s)
    events: list = field(default_factory=list)  # recoveries from lost workers
    shards: list = field(default_factory=list)  # parts on disk: where each part's shard is (the executor's account)


class CoCoA:
    """CoCoA+ over ``n_parts`` parts of the coordinates.

    Parameters
    ----------
    n_parts : int
        K, the number of parts (replicas).
    aggregation : {"adding", "averaging"}
        gamma = 1 (CoCoA+) or gamma = 1/K (CoCoA).
    sigma : {"safe", "data"} or float
        sigma': gamma K, the exact sigma'_min of the data and partition, or a value.
    local_epochs : int or "auto"
        H, local epochs per round (auto: from the measured communication / computation); parts on
        disk: DuHL rounds, each an epoch over the part's RAM block (the coordinates of largest gap
        its host_budget holds).
    local_solver : {"scd", "duhl"}
        In-memory SCD, or DuHL with ``memory_budget`` of each part on its device.
    compressor : None, a name or a mapping (see compression.make_compressor)
        None: exact messages. An unbiased compressor: DIANA-style shifted compression.
    shift_lr : float or None
        The shifts' step (None: 1 / (1 + omega)).
    host_budget : None, float in (0, 1] or str
        Parts on disk: the RAM each part's DuHL may use for its shard (a share of the shard's
        bytes, or a size such as "256MB"), read buffers included.
    tol, max_epochs, max_time, random_state, callback, prefetch, gap_kernel, concurrency : as DuHL.
    """

    def __init__(self, n_parts=2, aggregation="adding", local_epochs=1, local_solver="scd",
                 memory_budget=None, selection="gap", tol=1e-6, max_epochs=1000, max_time=None,
                 device="cpu", random_state=None, callback=None, executor_factory=None,
                 prefetch="auto", gap_kernel="tpa", concurrency="auto", sigma="safe", compressor=None,
                 shift_lr=None, host_budget=None):
        self.n_parts = n_parts
        self.aggregation = aggregation
        self.sigma = sigma
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
        self.compressor = dict(compressor) if hasattr(compressor, "items") else compressor
        self.shift_lr = shift_lr
        self.host_budget = host_budget
        self._validate()

    def _validate(self):
        check_params("CoCoA", n_parts=self.n_parts, aggregation=self.aggregation,
                     local_solver=self.local_solver,
                     memory_budget=self.memory_budget, selection=self.selection, tol=self.tol,
                     max_epochs=self.max_epochs, max_time=self.max_time, device=self.device,
                     random_state=self.random_state, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency, shift_lr=self.shift_lr,
                     host_budget=self.host_budget)
        check_params("CoCoA", RULES, local_epochs=self.local_epochs, sigma=self.sigma)
        if self.compressor is not None:
            comp = make_compressor(self.compressor)
            if not comp.unbiased:
                raise ValueError(f"The 'compressor' parameter of CoCoA must be unbiased (its shifts are "
                                 f"DIANA's). Got {comp!r} instead.")

    @property
    def gamma(self):
        return 1.0 if self.aggregation == "adding" else 1.0 / self.n_parts

    def sigma_value(self, problem, cache=None):
        """(sigma', seconds to compute it) for this problem's partition (``cache``: see sigma_ratio)."""
        if self.sigma == "safe":
            return self.gamma * self.n_parts, 0.0
        if self.sigma == "data":
            t0 = time.perf_counter()
            ratio = sigma_ratio(problem, partition(problem.n_coords, self.n_parts), cache)
            return self.gamma * ratio, time.perf_counter() - t0
        return float(self.sigma), 0.0

    def part_specs(self, problem, sigma):
        """Constructor arguments of each part (without the problem). ``h0`` (compressed
        messages) is the driver's copy of the part's shift, updated in place every round:
        a part rebuilt on another worker starts from it."""
        local_solver = "duhl" if self.memory_budget is not None or self.host_budget is not None else self.local_solver
        m = problem.A.shape[1]
        first = 1 if self.local_epochs == "auto" else self.local_epochs
        return [dict(lo=lo, hi=hi, n_parts=self.n_parts, gamma=self.gamma, sigma=sigma,
                     local_epochs=first, local_solver=local_solver,
                     memory_budget=self.memory_budget, device=self.device, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency,
                     random_state=part_seed(self.random_state, k),
                     **({} if self.host_budget is None else
                        # a part stops its local solve at its share of the target (the sum of the
                        # parts' gaps at it is the target: the run converges once every part is there)
                        dict(host_budget=self.host_budget, local_tol=self.tol / self.n_parts)),
                     **({} if self.compressor is None else
                        dict(compressor=self.compressor, shift_lr=self.shift_lr, h0=np.zeros(m))))
                for k, (lo, hi) in enumerate(partition(problem.n_coords, self.n_parts))]

    def solve(self, problem, a0=None, sigma=None, setup_s=0.0):
        """Solve ``problem``; ``sigma`` (with the ``setup_s`` it took) when the caller computed
        sigma' itself (a cluster's driver holds only a skeleton problem). Computing sigma'
        from the data is set-up, like DIANA's smoothness constant: it depends on the data
        and the partition only, is done before the clock starts and is reported apart."""
        self._validate()
        if self.n_parts > problem.n_coords:
            raise ValueError(f"The 'n_parts' parameter of CoCoA ({self.n_parts}) is above the number of "
                             f"coordinates ({problem.n_coords}).")
        if sigma is None:
            sigma, setup_s = self.sigma_value(problem)
        notes = [f"sigma' = {sigma:.4g} ({self.sigma}; the safe gamma K = {self.gamma * self.n_parts:g})"
                 + (f", computed in {setup_s:.2f}s of set-up (not in time_s)" if setup_s else "")]
        specs = self.part_specs(problem, sigma)
        n = problem.n_coords
        a = np.zeros(n) if a0 is None else np.array(a0, dtype=np.float64)
        if self.compressor is not None and a.any():
            raise ValueError("CoCoA with a compressor starts from a = 0 (its shifts start at 0).")
        # the executor's construction is set-up (a part on disk makes its shard there): before the clock
        if self.executor_factory is None:
            executor = InProcessParts([CocoaPart(problem, a0=a[s["lo"]:s["hi"]], **s) for s in specs])
        else:
            executor = self.executor_factory(problem, specs, a)
        t0 = time.perf_counter()
        try:
            return self._loop(problem, specs, a, executor, sigma, t0, notes, setup_s)
        finally:
            executor.close()

    def _loop(self, problem, specs, a, executor, sigma, t0, notes, setup_s):
        if a.any():  # (a skeleton problem's executor starts from a = 0)
            z, off = problem.state_from(a)
        else:
            z, off = problem.state_of(np.zeros(problem.A.shape[1]))
        tol_abs = self.tol * problem.P0
        P0 = problem.P0 if problem.P0 > 0 else 1.0
        rows = []
        bytes_dv = bits = 0
        n = problem.n_coords
        compressed = self.compressor is not None
        shifts = [s["h0"] for s in specs] if compressed else []
        alpha = (default_shift_lr(make_compressor(self.compressor), problem.A.shape[1])
                 if compressed and self.shift_lr is None else self.shift_lr)
        H = specs[0]["local_epochs"]
        K = len(specs)
        part_disk = np.zeros(K, dtype=np.int64)  # each part's bytes read from disk, so far
        part_bits = np.zeros(K, dtype=np.int64)  # each part's bits sent, so far
        on_disk = False

        def per_part():
            if not on_disk:
                return {}
            return {"bytes_disk": int(part_disk.sum()), "disk_s": disk_s,
                    **{f"part{k}_bytes_disk": int(part_disk[k]) for k in range(K)},
                    **{f"part{k}_bits_sent": int(part_bits[k]) for k in range(K)}}

        def record(rnd, gap, updates, extra):
            primal, dual, _ = problem.objectives(a, z, off, gap=gap)
            row = dict(round=rnd, time_s=time.perf_counter() - t0, epoch=updates / n, primal=primal,
                       dual=dual, gap=gap, rel_gap=gap / P0, bytes_dv=bytes_dv, bits_sent=bits, **extra, **per_part())
            rows.append(row)
            if self.callback is not None:
                self.callback(dict(row))

        updates, rnd, status = 0, 0, None
        local_s = comm_s = disk_s = 0.0
        # this round's messages uncompressed (compressed runs, before certifying), and the parts on disk
        # read every gap at the broadcast state
        exact = False
        certified = True  # the broadcast state is exact
        asks_exact = compressed or self.host_budget is not None
        while True:
            t_round = time.perf_counter()
            results = executor.round(z, off, H, exact) if asks_exact else executor.round(z, off, H)
            results = [RoundOutput(*r) for r in results]
            wall = time.perf_counter() - t_round
            gap = float(sum(r.gap for r in results))
            exact_row = certified and all(r.certified for r in results)  # exact state, exact gaps
            work = max(r.seconds for r in results)
            for k, r in enumerate(results):  # a round's reads are of its start pass too: counted in its row
                part_disk[k] += r.bytes_disk
                on_disk = on_disk or r.bytes_disk > 0
            disk_s += max(r.disk_s for r in results)
            if rnd > 0:
                local_s += work
                comm_s += max(wall - work, 0.0)
            record(rnd, gap, updates, dict(local_s=local_s, comm_s=comm_s, certified=float(exact_row),
                                           local_epochs=H))
            if gap <= tol_abs and exact_row:
                status = "converged"
                break
            if updates >= self.max_epochs * n:
                status = "max_epochs"
            elif self.max_time is not None and time.perf_counter() - t0 >= self.max_time:
                status = "max_time"
            if status is not None:
                break
            # apply this round's updates: the next round's gaps are at the new state
            g = self.gamma
            if compressed:
                estimate = np.zeros_like(z)
                for h, r in zip(shifts, results):
                    estimate += h + r.message
                    h += (1.0 if exact else alpha) * r.message  # in place: specs[k]["h0"] follows
                if not problem.loss:
                    z = problem.c * (estimate - problem.b)
            # a loss of the margins: v moves by the messages, and z = grad f(v) follows
            v = (estimate if compressed else off[1:].copy()) if problem.loss else None
            for k, (s, r) in enumerate(zip(specs, results)):
                part_bits[k] += r.bits
                if problem.loss and not compressed:
                    v += g * r.message
                elif not compressed:
                    z += (g * problem.c) * r.message
                off[0] += g * r.d_off
                a[s["lo"]:s["hi"]] += g * r.da
                bytes_dv += r.message.nbytes
                bits += r.bits
            if problem.loss:
                z, off = problem.state_of(v)
            updates += sum(r.updates for r in results)  # (H epochs of each part's coordinates; on disk, of its block)
            certified = not compressed or exact
            # an estimate at the target: verify (compressed: exact messages make the next state exact; on
            # disk: the next round's gaps are read whole, also once every part's local solve reached its share)
            settled = all(r.settled for r in results)
            exact = (((compressed and not exact) and gap <= tol_abs)
                     or (self.host_budget is not None and (gap <= tol_abs or settled)))
            if self.local_epochs == "auto" and rnd == 1:
                epoch_s = max((r.seconds - r.gap_s) / H for r in results)
                other_s = (wall - work) + max(r.gap_s for r in results)  # communication and the gap pass
                H = int(np.clip(round(other_s / max(epoch_s, 1e-9)), 1, MAX_AUTO_EPOCHS))
                notes.append(f"local_epochs auto: H = {H} (communication {1e3 * (wall - work):.1f} ms and the gap "
                             f"pass {1e3 * max(r.gap_s for r in results):.1f} ms a round, one local epoch "
                             f"{1e3 * epoch_s:.1f} ms)")
            rnd += 1
        # the parts have advanced past the certified state: the driver's a is the answer
        frame = pd.DataFrame(rows)
        if not rows[-1]["certified"] and problem.info.get("skeleton"):
            notes.append("stopped on an estimated gap (compressed messages, or parts on disk): the final gap is not "
                         "certified")
        if not problem.info.get("skeleton"):  # re-evaluate from a alone: no drift in z can hide
            z, off = problem.state_from(a)
        primal, dual, gap = problem.objectives(a, z, off, gap=None if not problem.info.get("skeleton")
                                               else rows[-1]["gap"])
        v = problem.v_of(z, off)
        return CocoaResult(a=a, v=v, trace=frame, status=status, primal=primal, dual=dual, gap=gap,
                           rel_gap=gap / P0, time_s=rows[-1]["time_s"], epochs=updates / n,
                           n_rounds=rnd, bytes_dv=bytes_dv, bits_sent=bits, sigma=sigma, sigma_s=setup_s, notes=notes,
                           events=list(getattr(executor, "events", [])),
                           shards=list(getattr(executor, "shards", [])))
