"""DuHL's reference round loop: every device (the CPU, a GPU, the simulator), data in RAM or on
disk, prefetch. Select, swap, compute, refresh gaps.

Each round the device runs epochs on its block (only the block's coordinates with
a positive gap when ``shrinking``: a working set inside the block) and returns the
block's gaps at the new state; meanwhile a host thread computes, at the round's
start state, the gaps of coordinates the memory holds only stale (on the CPU with
the data in RAM, where nothing runs beside the host, before the round's selection,
which then sees them):

- **certifying rounds** refresh every stale gap: with the block's gaps from the
  last round (also at that state) they give the start state's exact gap, a row
  with ``certified=1``;
- **other rounds** refresh only the oldest stale gaps that fit ``refresh`` times
  the bytes the device touches in the round (the paper's stale gap memory, as
  cheap as the device's own work): the row's gap is the memory's estimate,
  ``certified=0``.

A round certifies when the estimate reaches the tolerance (and the host has
refreshed at least one stale memory's worth of bytes since the last certificate,
so failed attempts cost at most half the host's work), and in RAM also on a
doubling schedule of rounds so certified rows keep coming (on disk each would be
a read of the stale data). ``refresh="all"`` certifies every round. With the
whole problem resident the device's gaps certify (on a schedule: no selection
needs them).

Stale is what the memory cannot prove: a coordinate at a bound whose gap is
provably 0 at the current state (a Lasso zero with |s_i| well below alpha, an SVM
sample well outside the margin: solvers.duhl.gaps.memory) needs no data, so near
the optimum most of a sparse model's coordinates drop out of the certificates'
and refreshes' reads; when none is left stale, the round's end state is certified
without reading anything.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from solvers.duhl.budget import update_budget
from solvers.duhl.block.gap_block import block_keys
from solvers.duhl.block.policies import Policy, child, stream
from solvers.duhl.gaps.memory import GapMemory, RefreshPlan, dual_step
from solvers.duhl.gaps.schedule import GapSchedule
from solvers.duhl.loops.rounds import passes_per_round, provable, refresh_first, refresh_ratio, round_epochs
from solvers.glm.models import shrink_cut
from solvers.storage.ram_tier import RamTier, ram_choice

# A host refresh smaller than this runs in the main thread: a thread hand-off costs more.
INLINE_BYTES = 1 << 18
# What the loop keeps per coordinate beside the data: a and the round's start copy of it, the gap
# memory (gap, s, the proofs' stamp, fresh, proven), the resident mask, each coordinate's bytes ...
KEPT_BYTES = 8 + 8 + 8 + 8 + 4 + 1 + 1 + 1 + 8
# ... what it allocates per coordinate for a moment, at most: the gap selection's mask, keys,
# candidates and block, and the block's list (a refresh's stale list and plan take less) ...
SCRATCH_BYTES = 1 + 8 + 8 + 8 + 8
# ... and per entry of z (a feature of a dual model, a sample of the Lasso family): z, its start
# copy, and v returned
Z_BYTES = 3 * 8


def host_state_bytes(problem):
    """The RAM this loop takes beside the data and the reader's buffers, at most: a sparse store's
    solve reserves it from ``host_budget``, which then holds everything that grows with the data."""
    return problem.n_coords * (KEPT_BYTES + SCRATCH_BYTES) + problem.A.shape[1] * Z_BYTES


@dataclass
class Carry:
    """What a solve from disk leaves to the next solve of the same coordinates, from a state that
    moved on meanwhile (a CoCoA+ part's next round starts from the broadcast state): the block in
    RAM, which the next selection swaps rather than reads whole, and the gap memory, every gap of
    which turns stale with the move (a proof still holds: the dual vector's move is added to its
    path), so the next solve starts from the memory's estimate, without a pass over the data.

    Pass an empty one to the first solve: each solve fills it. ``forget()`` before a solve whose
    start state must be certified: it reads every gap there again (the block stays). ``start``: the
    last solve's start state as its last row there saw it, (sum of the coordinates' gaps, whether
    every one was exact)."""

    rset: Any = None
    memory: Optional[GapMemory] = None
    plan: Optional[RefreshPlan] = None
    z: Optional[np.ndarray] = None     # the state the memory's gaps were last moved to
    off: Optional[np.ndarray] = None
    start: tuple = (float("nan"), False)

    def forget(self):
        self.memory = self.plan = self.z = self.off = None

    def close(self):
        """Lets the block go (its RAM)."""
        if self.rset is not None:
            self.rset.close()
        self.rset = None
        self.forget()


class _Done:
    """A result computed in place, with a future's face."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def solve_python(solver, problem, rset, a, z, off, rng, trace, t0, iterates, carry=None):
    """The loop of :class:`solvers.duhl.solver.DuHL` with a resident set ``rset``; ``carry`` (a
    :class:`Carry`): start from its gap memory, if it holds one, and leave this solve's in it.
    Returns (status, rounds, updates, best dual value, the settings it measured, whether the trace's
    last row certifies the state returned: not when ``solver.certify_end`` is False and the last
    round's end state was left uncertified)."""
    n = problem.n_coords
    tol_abs = solver.tol * problem.P0
    coord_bytes = problem.coord_bytes
    state = (a, z, off)
    policy = Policy(solver.selection, coord_bytes, rset.capacity_bytes, problem.sqnorm, child(rng))
    orders = stream(rng)  # the epochs' orders (the compiled loop's too)
    epochs = round_epochs(solver.local_epochs, problem.on_disk, problem.name)
    dual_best = -np.inf
    on_disk = problem.on_disk
    ram_rows = problem.A.data.shape[0] if isinstance(problem.A, RamTier) else 0

    def disk_columns():
        return {"bytes_disk": problem.A.bytes_read, "disk_s": problem.A.read_s} if on_disk else {}

    def record(rnd, st, estimate, updates, swaps, exact=True):
        """A row for state st: certified when every gap in ``estimate`` is at st."""
        nonlocal dual_best
        gap_sum, s_max = estimate
        if carry is not None and updates == 0:  # the start state's row
            carry.start = (gap_sum, bool(exact))
        if len(trace.rows) < iterates.shape[0]:
            iterates[len(trace.rows)] = st[0]
        if exact:
            primal, dual, gap, dual_best = problem.certify(*st, gap_sum=gap_sum, s_max=s_max, dual_best=dual_best)
        else:  # an estimate never feeds the best dual value
            primal, dual, gap, _ = problem.certify(*st, gap_sum=gap_sum, s_max=s_max)
        trace.record(round=rnd, time_s=time.perf_counter() - t0, epoch=updates / n,
                     primal=primal, dual=dual, gap=gap, rel_gap=gap / problem.P0 if problem.P0 > 0 else 0.0,
                     certified=int(exact), bytes_h2d=rset.bytes_h2d, swaps=swaps,
                     n_resident=len(rset.resident()), prefetch_hits=rset.prefetch_hits,
                     bytes_prefetched=rset.bytes_prefetched, **disk_columns())
        return gap

    def refresh_plan(rnd):
        """The stale gaps, whether round ``rnd`` refreshes them all (a certificate), and those it
        refreshes: all, or the oldest that fit ``ratio`` times the bytes the device reads in a round
        (the last round's)."""
        stale = memory.stale()
        exact = certifier.due(rnd, estimate, stale, coord_bytes, tol_abs)
        if exact:
            return stale, exact, stale
        budget = ratio * (passes * memory.bytes(visit) + block_bytes)
        todo = certifier.plan(stale, coord_bytes, budget) if ratio > 0 else stale[:0]
        return stale, exact, todo

    def start_row(rnd, st, stale, todo, exact, updates, swaps):
        """Round ``rnd``'s start row (state st) after the refresh of ``todo``: certified when every
        stale gap was refreshed (or none was stale). Returns (its gap, whether it converged)."""
        exact = exact or stale.size == 0
        gap = record(rnd - 1, st, memory.estimate(), updates, swaps, exact)
        if not exact:
            return gap, False
        certifier.certified(rnd)
        return gap, gap <= tol_abs

    # the host's gap passes write into the memory a chunk of coordinates at a time (on disk: what
    # the reader's buffer bounds), so that their outputs never take RAM in proportion to n
    chunk = problem.A.gap_chunk if hasattr(problem.A, "gap_chunk") else max(1, n)

    def refresh(st, coords):
        """The gaps of ``coords`` at the state ``st`` into the memory."""
        for lo in range(0, coords.shape[0], chunk):
            part = coords[lo:lo + chunk]
            memory.refresh(part, *problem.coordinate_gaps(*st, part, with_s=True))

    fresh_first = refresh_first(solver.device, problem)
    # gaps at the start state, all known: the first selection and round 0's row
    # refresh "all" computes every gap each round: nothing to prove (and the kernels' values,
    # e.g. a fused multiply-add's 1e-18 where the exact gap is 0, decide the selection)
    proofs = provable(problem) if solver.refresh != "all" else {}
    m = z.shape[0]
    resumed = carry is not None and carry.memory is not None
    if resumed:  # the carried memory, moved to this solve's start: every gap stale, what the proofs keep
        memory = carry.memory
        step = np.zeros(2)
        u_norm = dual_step(carry.z, z, problem.c * m * carry.off[0], problem.c * m * off[0], memory.mu is not None,
                           step)
        memory.moved(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), step=step, a=a, u_norm=u_norm)
    elif chunk >= n:  # every coordinate at once (coords=None: a problem may note the start state's pass)
        memory = GapMemory(*problem.coordinate_gaps(a, z, off, with_s=True), coord_bytes, **proofs)
    else:
        memory = GapMemory(np.empty(n), np.empty(n), coord_bytes, **proofs)
        for lo in range(0, n, chunk):
            part = np.arange(lo, min(n, lo + chunk))
            memory.refresh(part, *problem.coordinate_gaps(a, z, off, part, with_s=True))
    centred = memory.mu is not None
    ratio = refresh_ratio(solver.refresh, problem)
    # a rate measured on the first pass: recorded, so that refresh=<it> reproduces the run
    measured = {"refresh": ratio} if solver.refresh == "auto" and on_disk else {}
    max_updates = update_budget(solver.max_epochs, n)
    updates, swaps, rnd = 0, 0, 0
    certified = memory.all_known()       # the current state's gap is known (a carried memory: if proven)
    end_recorded = True                  # ... and recorded
    estimate = record(0, state, memory.estimate(), 0, 0, exact=certified)
    status = "converged" if certified and estimate <= tol_abs else None
    resident = np.zeros(n, dtype=bool)
    schedule = GapSchedule(tol_abs, solver.gap_every)
    certifier = (carry.plan if resumed else
                 RefreshPlan(solver.refresh != "all", on_disk and ratio > 0))  # (no refresh: the schedule alone)
    if carry is not None:  # what the next solve continues from (filled in as this one goes)
        carry.memory, carry.plan, carry.z, carry.off = memory, certifier, z, off
    snapshot = (np.empty_like(a), np.empty_like(z), np.empty_like(off))  # a round's start state, for the host
    active = None                        # the coordinates visited (shrinking), None: all resident
    share = shrink_cut(problem.theta)    # shrinking's cut, a share of the mean gap (0: gap 0 only)
    rank = None if on_disk else np.empty(n)  # (on disk the block ranks the gaps: keys below)
    curv = problem.step_curvature

    def keys():
        """What the gap block ranks (solvers.duhl.block.gap_block.block_keys); the gaps themselves with
        the data on disk, whose stale gaps only a certificate or the refresh plan reads: there the
        support's bound P(0)/l1 brings a coordinate with a stale violation into the block, where it is
        read fresh (docs/explanation/design-decisions/round-loop.md, "What the block ranks")."""
        if on_disk:
            return memory.gaps
        return block_keys(problem.theta, memory.gaps, a, memory.s, problem.sqnorm, curv, tol_abs, rank)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="duhl-host") as host:
        while status is None:
            if fresh_first and rnd > 0 and not resident.all():
                stale, exact, todo = refresh_plan(rnd + 1)
                refresh(state, todo)
                estimate, converged = start_row(rnd + 1, state, stale, todo, exact, updates, swaps)
                stale = todo = None  # (RAM in proportion to the stale gaps: not kept through the round)
                if converged:
                    status = "converged"
                    break
            if rnd == 0 or not resident.all():  # all resident: nothing left to choose
                ranked = keys()
                chosen = policy.select(ranked, resident)
                if ram_rows:  # a GPU under a RAM tier: the RAM set first, the block is a subset of it
                    problem.A.hold(ram_choice(chosen, ranked, ram_rows))
                swaps += rset.assign(chosen)
                resident[:] = False
                resident[chosen] = True
                n_resident = int(chosen.shape[0])
                block_bytes = memory.bytes(chosen)
                if solver.shrinking and not resident.all():
                    # a working set inside the block: coordinates whose last known gap is 0 sit
                    # at a bound with optimality holding; the block's gaps still cover them all
                    # (logistic: also those under a small share of the block's mean gap; the sum in
                    # coordinate order, one add at a time, as the compiled loop sums it)
                    cut = share * float(np.cumsum(memory.gaps[np.sort(chosen)])[-1]) / n_resident if share else 0.0
                    active = chosen[memory.gaps[chosen] > cut]
                    if active.shape[0] in (0, n_resident):
                        active = None
            rnd += 1
            start_updates, start_swaps = updates, swaps
            whole = bool(resident.all())
            visit = active if active is not None else chosen
            passes = passes_per_round(epochs, n_resident, visit.shape[0])
            if whole and rnd < schedule.next_round:
                # all resident (a GPU): gaps only when the schedule expects them to matter
                updates += rset.run_round(state, orders, passes, with_gaps=False, active=active, limit=max_updates - updates)[0]
                certified = False
                status = solver._stop(updates, n, t0)
                continue

            # else the host reads the start state while the device moves on from it (a small
            # refresh costs less than a thread hand-off: done here, before the round)
            beside = not fresh_first or whole
            for now, kept in zip(state, snapshot):
                np.copyto(kept, now)
            # what the next swap will likely bring in travels while the device computes (read
            # before the host's refresh writes the memory: the gaps as the round found them)
            upcoming = (policy.peek(ranked, resident, rset.staging_bytes)  # (the keys this round's block was chosen by)
                        if rset.staging_bytes and not whole else None)
            if beside:  # the host writes the memory while the device runs: nothing reads it meanwhile
                stale, exact, todo = refresh_plan(rnd)
                if memory.bytes(todo) >= INLINE_BYTES:
                    job = host.submit(refresh, snapshot, todo)
                else:
                    job = _Done(refresh(snapshot, todo))
            done, dev_coords, dev_gaps, dev_s = rset.run_round(state, orders, passes, active=active,
                                                               limit=max_updates - updates,
                                                               prefetch=upcoming)
            updates += done
            if beside:
                job.result()
            if beside and (stale.size or not (whole or end_recorded)):  # a row for the start state
                estimate, converged = start_row(rnd, snapshot, stale, todo, exact, start_updates, start_swaps)
                if converged:
                    a[:], z[:], off[:] = snapshot
                    status = "converged"
                    break
            stale = todo = None
            step = np.zeros(2)  # how far u moved, and ||z||
            u_norm = dual_step(snapshot[1], z, problem.c * m * snapshot[2][0], problem.c * m * off[0], centred, step)
            memory.moved(dev_coords, dev_gaps, dev_s, step=step, a=a, u_norm=u_norm)
            certified = memory.all_known()  # every gap computed or proven: the end state's is exact
            end_recorded = certified and whole
            if end_recorded:  # all resident: the end state's row now (else the next round's start row)
                estimate = record(rnd, state, memory.estimate(), updates, swaps)
                if estimate <= tol_abs:
                    status = "converged"
                    break
                schedule.checked(rnd, float(dev_gaps.sum()))
                if solver.shrinking:
                    # like liblinear's shrinking: skip coordinates whose gap is zero (at a
                    # bound, optimality holding) until the next gap pass; certification
                    # still covers every coordinate, so nothing is lost but time
                    active = dev_coords[dev_gaps > 0]
                    if active.size == 0:
                        active = None
            status = solver._stop(updates, n, t0)

    if not (certified and end_recorded) and status != "converged":
        if on_disk and not solver.certify_end:  # the caller certifies elsewhere: no read for it here
            return status, rnd, updates, dual_best, measured, False
        # the last round's end state has no row yet: the stale gaps (if any) give its exact gap
        refresh(state, memory.stale())
        record(rnd, state, memory.estimate(), updates, swaps)
    return status, rnd, updates, dual_best, measured, True
