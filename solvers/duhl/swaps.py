"""DuHL's round loop with part of the data resident: select, swap, compute, refresh gaps.

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
sample well outside the margin: solvers.duhl.gap_memory) needs no data, so near
the optimum most of a sparse model's coordinates drop out of the certificates'
and refreshes' reads; when none is left stale, the round's end state is certified
without reading anything.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from solvers.duhl.gap_memory import GapMemory, _step
from solvers.storage.ram_tier import RamTier, ram_choice
from solvers.duhl.selection import Policy, stream
from solvers.glm.models import shrink_cut

# A round does about ``local_epochs`` epochs' worth of updates however far shrinking
# has gone: passes over the visited coordinates, at most this many.
MAX_PASSES_PER_ROUND = 16


# A host refresh smaller than this runs in the main thread: a thread hand-off costs more.
INLINE_BYTES = 1 << 18


class _Done:
    """A result computed in place, with a future's face."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


# local_epochs "auto" (the default) with part of the data resident in RAM: this many epochs on the
# block per round. Side by side (pipelines.bench.swap_loop --full --arms "all resident,routed 1,routed 2",
# 2026-11-24 22:20-22:33 UTC, time to 1e-6 at memory_budget 0.05, 0.25 and 0.5, medians of 3), 2
# against 1: geometric mean 0.89 over the 29 cells, the hinge SVMs 0.66-0.78, w8a Lasso 0.64-1.0,
# breast cancer 0.84-0.90, worst w8a logistic at 0.05 (1.08) and dense 5000 x 20000 at 0.25 (1.13).
# The rule it replaces (the bytes outside the block over the block's, 1 to 4) took w8a logistic at
# 0.05 to 1.7x the time of 1 epoch. With the data on disk, 1: the out_of_core preset's DuHL arm (4 GB,
# host_budget 0.25), three runs each at 23:29-23:35, 10.5-11.4 s and 15.3 GB read with 1, 11.0-14.0 s
# and 15.4-17.4 GB with 2.
AUTO_EPOCHS = 2


def round_epochs(local_epochs, on_disk=False):
    """``local_epochs`` as a number of epochs on the block per round ("auto": AUTO_EPOCHS in RAM, 1
    with the data on disk)."""
    if local_epochs == "auto":
        return 1 if on_disk else AUTO_EPOCHS
    return int(local_epochs)


def passes_per_round(local_epochs, n_resident, n_visit):
    """Passes over the visited coordinates worth ``local_epochs`` epochs of the resident set."""
    return local_epochs * min(MAX_PASSES_PER_ROUND, max(1, n_resident // max(1, n_visit)))


def _child(rng):
    """An independent stream for the selection policy, taken without advancing
    ``rng``: drawing a block ahead (prefetch) then changes no epoch's order."""
    try:
        return rng.spawn(1)[0]
    except (TypeError, ValueError):  # a generator without a SeedSequence
        return np.random.default_rng(rng.bit_generator.jumped().random_raw(1)[0])


class GapSchedule:
    """When to pay for a gap pass while all data is resident (no selection needs it).

    From the last two checked gaps it estimates the linear rate and waits half
    the rounds it predicts to the target (at most twice the last wait), so a
    run overshoots its target by a bounded share of its rounds, as
    scikit-learn's cheap stopping test does by other means.
    """

    def __init__(self, tol_abs, every="auto"):
        self.tol_abs = tol_abs
        self.every = every
        self.history = []
        self.next_round = 0

    def checked(self, rnd, gap):
        self.history.append((rnd, gap))
        wait = 1
        if self.every != "auto":
            wait = self.every
        elif len(self.history) >= 2:
            (r1, g1), (r2, g2) = self.history[-2:]
            if 0 < g2 < g1 and self.tol_abs > 0:
                per_round = np.log(g2 / g1) / (r2 - r1)
                remaining = np.log(self.tol_abs / g2) / per_round
                wait = int(np.clip(0.5 * remaining, 1, 2 * (r2 - r1)))
            elif 0 < g2 < g1:
                wait = 2 * (r2 - r1)
        self.next_round = rnd + min(wait, 64)


class Certifier:
    """Which rounds refresh every stale gap (see the module's docstring)."""

    def __init__(self, tol_abs, refresh, on_disk=False):
        self.tol_abs = tol_abs
        self.every_round = refresh == "all"
        self.wait, self.next_round = 2, 2
        self.refreshed_bytes = 0
        # on disk a certificate reads every stale coordinate: only when the estimate says the
        # target is reached, and the refresh has read the stale data once since the last one
        # (at most half the reads certify); no schedule (a measured 16% of the bytes read)
        self.on_disk = on_disk

    def due(self, rnd, estimate, stale_bytes):
        covered = self.refreshed_bytes >= stale_bytes
        if self.every_round or (rnd >= self.next_round and not self.on_disk):
            return True
        return estimate <= self.tol_abs and covered

    def refreshed(self, nbytes):
        self.refreshed_bytes += nbytes

    def certified(self, rnd):
        self.refreshed_bytes = 0
        self.wait *= 2
        self.next_round = rnd + self.wait


def refresh_ratio(refresh, problem):
    """Bytes the host refreshes per byte the device touches. "auto": as long as the device
    computes: 1 in RAM; on disk, the disk's rate over the gap kernel's on the first pass."""
    if refresh != "auto":
        return 0.0 if refresh == "all" else float(refresh)
    A = problem.A
    if not problem.on_disk or A.read_s <= 0 or A.compute_s <= 0:
        return 1.0
    return (A.matrix.useful_bytes / A.read_s) / (A.compute_bytes / A.compute_s)


def provable(problem):
    """GapMemory's arguments for proving gaps 0 without data (models with a ``zero_gap``)."""
    if problem.model.zero_gap is None:
        return {}
    return {"theta": problem.theta, "norms": np.sqrt(problem.sqnorm), "mu": problem.mu}


def refresh_first(solver, problem):
    """Whether a round refreshes the stale gaps before its selection, which then sees them, rather than
    beside the round's epochs (the selection seeing gaps a round old): on the CPU with the data in RAM,
    where nothing runs beside the host, for the Lasso family (coordinates: features). Side by side
    (pipelines.bench.swap_loop --full, 2026-11-25), time to 1e-6 at memory_budget 0.05 / 0.25 / 0.5, first
    over beside: the default experiment's Lasso 0.67 at 0.25 (every other round re-chose the block it had
    just solved: 5 rounds -> 3), dense 5000 x 20000 0.89 / 0.70 / 0.73, w8a 0.97 / 1.15 / 1.12; the
    classifiers in the dual not: w8a's hinge SVM 1.23 / 1.27 / 1.18 (more epochs, with refresh "all" too)."""
    return solver.device == "cpu" and not problem.on_disk and not problem.dual_form


def solve_with_swaps(solver, problem, rset, a, z, off, rng, trace, t0, iterates):
    """The loop of :class:`solvers.duhl.solver.DuHL` with a resident set ``rset``.
    Returns (status, rounds, (updates, best dual value))."""
    n = problem.n_coords
    tol_abs = solver.tol * problem.P0
    coord_bytes = problem.coord_bytes
    state = (a, z, off)
    policy = Policy(solver.selection, coord_bytes, rset.capacity_bytes, problem.sqnorm, _child(rng))
    orders = stream(rng)  # the epochs' orders (the compiled loop's too)
    epochs = round_epochs(solver.local_epochs, problem.on_disk)
    dual_best = -np.inf
    on_disk = problem.on_disk
    ram_rows = problem.A.data.shape[0] if isinstance(problem.A, RamTier) else 0

    def disk_columns():
        return {"bytes_disk": problem.A.bytes_read, "disk_s": problem.A.read_s} if on_disk else {}

    def record(rnd, st, estimate, updates, swaps, exact=True):
        """A row for state st: certified when every gap in ``estimate`` is at st."""
        nonlocal dual_best
        gap_sum, s_max = estimate
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
        exact = certifier.due(rnd, estimate, memory.bytes(stale))
        if exact:
            return stale, exact, stale
        todo = memory.plan(ratio * (passes * memory.bytes(visit) + block_bytes)) if ratio > 0 else stale[:0]
        return stale, exact, todo

    def start_row(rnd, st, stale, todo, exact, updates, swaps):
        """Round ``rnd``'s start row (state st) after the refresh of ``todo``: certified when every
        stale gap was refreshed (or none was stale). Returns (its gap, whether it converged)."""
        exact = exact or stale.size == 0
        gap = record(rnd - 1, st, memory.estimate(), updates, swaps, exact)
        if not exact:
            certifier.refreshed(memory.bytes(todo))
            return gap, False
        certifier.certified(rnd)
        return gap, gap <= tol_abs

    fresh_first = refresh_first(solver, problem)
    # gaps at the start state, all known: the first selection and round 0's row
    # refresh "all" computes every gap each round: nothing to prove (and the kernels' values,
    # e.g. a fused multiply-add's 1e-18 where the exact gap is 0, decide the selection)
    proofs = provable(problem) if solver.refresh != "all" else {}
    memory = GapMemory(*problem.coordinate_gaps(a, z, off, with_s=True), coord_bytes, **proofs)
    centred = memory.mu is not None
    m = z.shape[0]
    ratio = refresh_ratio(solver.refresh, problem)
    updates, swaps, rnd = 0, 0, 0
    estimate = record(0, state, memory.estimate(), 0, 0)
    status = "converged" if estimate <= tol_abs else None
    certified = True                     # the current state's gap is known
    end_recorded = True                  # ... and recorded
    resident = np.zeros(n, dtype=bool)
    schedule = GapSchedule(tol_abs, solver.gap_every)
    certifier = Certifier(tol_abs, solver.refresh, on_disk and ratio > 0)  # (no refresh: the schedule alone)
    active = None                        # the coordinates visited (shrinking), None: all resident
    share = shrink_cut(problem.theta)    # shrinking's cut, a share of the mean gap (0: gap 0 only)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="duhl-host") as host:
        while status is None:
            if fresh_first and rnd > 0 and not resident.all():
                stale, exact, todo = refresh_plan(rnd + 1)
                memory.refresh(todo, *problem.coordinate_gaps(a, z, off, todo, with_s=True))
                estimate, converged = start_row(rnd + 1, state, stale, todo, exact, updates, swaps)
                if converged:
                    status = "converged"
                    break
            if rnd == 0 or not resident.all():  # all resident: nothing left to choose
                chosen = policy.select(memory.gaps, resident)
                if ram_rows:  # a GPU under a RAM tier: the RAM set first, the block is a subset of it
                    problem.A.hold(ram_choice(chosen, memory.gaps, ram_rows))
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
                updates += rset.run_round(state, orders, passes, with_gaps=False, active=active)[0]
                certified = False
                status = solver._stop(updates, n, t0)
                continue

            # else the host reads the start state while the device moves on from it (a small
            # refresh costs less than a thread hand-off: done here, before the round)
            beside = not fresh_first or whole
            snapshot = (a.copy(), z.copy(), off.copy())
            if beside:
                stale, exact, todo = refresh_plan(rnd)
                if memory.bytes(todo) >= INLINE_BYTES:
                    job = host.submit(problem.coordinate_gaps, *snapshot, todo, with_s=True)
                else:
                    job = _Done(problem.coordinate_gaps(*snapshot, todo, with_s=True))
            # what the next swap will likely bring in travels while the device computes
            upcoming = (policy.peek(memory.gaps, resident, rset.staging_bytes)
                        if rset.staging_bytes and not whole else None)
            done, dev_coords, dev_gaps, dev_s = rset.run_round(state, orders, passes, active=active,
                                                               prefetch=upcoming)
            updates += done
            if beside:
                memory.refresh(todo, *job.result())
            if beside and (stale.size or not (whole or end_recorded)):  # a row for the start state
                estimate, converged = start_row(rnd, snapshot, stale, todo, exact, start_updates, start_swaps)
                if converged:
                    a[:], z[:], off[:] = snapshot
                    status = "converged"
                    break
            step = np.zeros(2)  # how far u moved (gap_memory.dual_step), and ||z||
            u_norm = _step(snapshot[1], z, problem.c * m * snapshot[2][0], problem.c * m * off[0], centred, step)
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
        # the last round's end state has no row yet: the stale gaps (if any) give its exact gap
        stale = memory.stale()
        memory.refresh(stale, *problem.coordinate_gaps(a, z, off, stale, with_s=True))
        record(rnd, state, memory.estimate(), updates, swaps)
    return status, rnd, (updates, dual_best)
