"""DuHL: duality-gap-guided block coordinate descent under a device memory budget.

Dünner, Parnell, Jaggi, "Efficient Use of Limited-Memory Accelerators for
Linear Learning on Heterogeneous Systems", NIPS 2017.

The host holds all data, the coefficients ``a`` and a gap memory; the device
holds the data of a budget of coordinates. Each round:

1. the device runs ``local_epochs`` epochs of stochastic coordinate descent on
   its resident set, then computes its coordinates' gaps at the new state;
2. at the same time a host thread computes the gaps, at the round's start
   state, of every coordinate whose gap there is not yet known (those not
   resident last round), from a snapshot of (a, z);
3. the host swaps in the coordinates with the largest gap memory (or the
   block another policy asks for), copying only coordinates not yet resident.

Steps 1 and 2 together give the exact duality gap of the round's start state
(last round's device gaps + this round's host gaps, all at that state), so
every reported gap is exact, never read from the stale gap memory. When the
start state is certified to the tolerance, it is the one returned. With all
data resident the device gaps alone certify the end state.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from solvers.duhl.budget import parse_budget, split_budget
from solvers.duhl.inmemory import solve_in_memory
from solvers.duhl.resident import make_resident_set
from solvers.duhl.selection import Policy
from solvers.glm.checks import check_params
from solvers.glm.trace import SolveResult, Trace

# A round does about ``local_epochs`` epochs' worth of updates however far shrinking
# has gone: passes over the visited coordinates, at most this many.
MAX_PASSES_PER_ROUND = 16


def passes_per_round(local_epochs, n_resident, n_visit):
    """Passes over the visited coordinates worth ``local_epochs`` epochs of the resident set."""
    return local_epochs * min(MAX_PASSES_PER_ROUND, max(1, n_resident // max(1, n_visit)))


DuHLResult = SolveResult  # the name callers know


def _child(rng):
    """An independent stream for the selection policy, taken without advancing
    ``rng``: drawing a block ahead (prefetch) then changes no epoch's order."""
    try:
        return rng.spawn(1)[0]
    except (TypeError, ValueError):  # a generator without a SeedSequence
        return np.random.default_rng(rng.bit_generator.jumped().random_raw(1)[0])


class _GapSchedule:
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


class DuHL:
    """Gap-guided block coordinate descent with ``memory_budget`` of the data on the device.

    Parameters
    ----------
    memory_budget : None, float in (0, 1] or str
        The device's share of the data's bytes, or a size such as "512MB";
        None holds everything (plain in-memory stochastic coordinate descent).
    selection : {"gap", "random", "sequential", "importance"}
        Which coordinates live on the device; "gap" is DuHL.
    local_epochs : int
        Device epochs over its block per round.
    tol : float
        Stop once rel_gap = gap / P(0) <= tol.
    max_epochs : float
        Stop after this many epochs (coordinate updates / coordinates).
    max_time : float or None
        Stop after this many seconds.
    device : str
        Where the block lives ("cpu").
    random_state : None, int or numpy Generator
        Seeds the coordinate order and random block choices.
    callback : callable(row: dict) or None
        Sees every trace row as it is recorded.
    gap_every : "auto" or int >= 1
        All data resident on a GPU: no selection needs gaps, so the gap pass runs
        every ``gap_every`` rounds, or ("auto") when the observed linear rate
        predicts the target is near. (On the CPU the compiled loop decides,
        solvers.duhl.inmemory; with part of the data resident the gaps drive the
        selection and are computed every round.)
    shrinking : bool
        With all data resident, epochs skip the coordinates whose gap was zero at
        the last gap pass (as liblinear's shrinking: a working set); every gap pass
        still covers all coordinates, so the certificate is unchanged.
    keep_iterates : int >= 0
        Keep a copy of ``a`` at each of the first ``keep_iterates`` trace rows (the
        state each row certifies), as ``result.iterates``: for inspecting a run.
    prefetch : "auto" or float in [0, 1)
        The share of ``memory_budget`` kept as staging memory: while the device
        runs a round, the coordinates the policy will likely swap in next are
        copied there, so their swap costs no copy (double buffering). It changes
        no iterate, only where swapped-in data comes from; the block is the rest
        of the budget. "auto": 0.2 on the GPU devices, 0 on the CPU (where a copy
        cannot overlap compute). Ignored when the budget holds all data.
    gap_kernel : {"tpa", "blas"}
        How a GPU device computes its block's gaps: "tpa", a thread block per
        coordinate reducing <A_i, z> in float64; "blas", one cuBLAS
        matrix-vector product in the data's precision, then a thread per
        coordinate (dense data, device "cuda" or "cuda_sim"). The host computes
        the other coordinates' gaps on the CPU either way, as in the paper.
    concurrency : "auto" or int >= 1
        The most coordinates a GPU epoch updates at once (thread blocks in
        flight, each reading z while the others change it). All at once makes
        an epoch a Jacobi step, which diverges on correlated coordinates;
        "auto" allows sqrt(coordinates), the delay under which asynchronous
        coordinate descent keeps its linear rate (Liu & Wright, 2015).
    """

    owner = "DuHL"  # the class errors name (an estimator built on DuHL sets its own)

    def __init__(self, memory_budget=None, selection="gap", local_epochs=1, tol=1e-6,
                 max_epochs=1000, max_time=None, device="cpu", random_state=None, callback=None,
                 gap_every="auto", shrinking=True, prefetch="auto", gap_kernel="tpa",
                 concurrency="auto", keep_iterates=0):
        self.memory_budget = memory_budget
        self.selection = selection
        self.local_epochs = local_epochs
        self.tol = tol
        self.max_epochs = max_epochs
        self.max_time = max_time
        self.device = device
        self.random_state = random_state
        self.callback = callback
        self.gap_every = gap_every
        self.shrinking = shrinking
        self.prefetch = prefetch
        self.gap_kernel = gap_kernel
        self.concurrency = concurrency
        self.keep_iterates = keep_iterates
        self._validate(self.owner)

    def _validate(self, owner):
        check_params(owner, memory_budget=self.memory_budget, selection=self.selection,
                     local_epochs=self.local_epochs, tol=self.tol, max_epochs=self.max_epochs,
                     max_time=self.max_time, device=self.device, random_state=self.random_state,
                     gap_every=self.gap_every, shrinking=self.shrinking, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency,
                     keep_iterates=self.keep_iterates)
        if self.gap_kernel == "blas" and self.device == "cpu":
            raise ValueError(f"The 'gap_kernel' parameter 'blas' of {owner} runs on device='cuda' or "
                             "'cuda_sim' (the CPU computes gaps with its own kernels). Got device='cpu'.")

    def _prefetch_share(self):
        if self.prefetch == "auto":
            return 0.2 if self.device in ("cuda", "cuda_sim") else 0.0
        return float(self.prefetch)

    def _budget_bytes(self, problem):
        coord_bytes = problem.coord_bytes
        total = int(coord_bytes.sum())
        budget = parse_budget(self.memory_budget, total)
        if budget is None:
            return None
        if budget >= total:
            if budget > total:
                self._notes.append(f"memory_budget {self.memory_budget!r} ({budget} bytes) holds all "
                                   f"{total} bytes of data: everything resident, as with None")
            return None
        largest = int(coord_bytes.max())
        if budget < largest:
            raise ValueError(f"The 'memory_budget' parameter of {self.owner} ({self.memory_budget!r} = "
                             f"{budget} bytes) is below one coordinate's data ({largest} bytes).")
        block = split_budget(problem, budget, self._prefetch_share())[0]
        if block < largest:
            raise ValueError(f"The 'prefetch' parameter of {self.owner} ({self.prefetch!r}) leaves "
                             f"{block} bytes of the {budget}-byte memory_budget "
                             f"for the block, below one coordinate's data ({largest} bytes).")
        return budget

    def _stop(self, updates, n, t0):
        """The status that ends the run now, or None."""
        if updates >= self.max_epochs * n:
            return "max_epochs"
        if self.max_time is not None and time.perf_counter() - t0 >= self.max_time:
            return "max_time"
        return None

    def solve(self, problem, a0=None):
        self._validate(self.owner)
        self._notes = []
        if self.gap_kernel == "blas" and problem.sparse:
            raise ValueError(f"The 'gap_kernel' parameter 'blas' of {self.owner} needs dense data (a cuBLAS "
                             "matrix-vector product); use gap_kernel='tpa' for sparse data.")
        budget = self._budget_bytes(problem)
        rng = np.random.default_rng(self.random_state)
        t0 = time.perf_counter()
        n = problem.n_coords
        trace = Trace(self.callback)
        self._iterates = np.empty((self.keep_iterates, n))
        a = np.zeros(n) if a0 is None else np.array(a0, dtype=np.float64)
        if a0 is None:
            z, off = -problem.c * problem.b, np.zeros(1)
        else:
            z, off = problem.state_from(a)
        if budget is None and self.device == "cpu":
            status, rounds, counters = self._solve_in_memory(problem, a, z, off, rng, trace, t0)
            bytes_h2d, hits, prefetched = int(problem.coord_bytes.sum()), 0, 0
        else:
            rset = make_resident_set(problem, budget, self.device, prefetch=self._prefetch_share(),
                                      gap_kernel=self.gap_kernel, concurrency=self.concurrency)
            status, rounds, counters = self._solve_with_swaps(problem, rset, a, z, off, rng, trace, t0)
            bytes_h2d, hits, prefetched = rset.bytes_h2d, rset.prefetch_hits, rset.bytes_prefetched
        updates, dual_best = counters
        elapsed = trace.rows[-1]["time_s"]
        # re-evaluate from a alone (outside the timed loop): no drift in z can hide in the result
        z, off = problem.state_from(a)
        primal, dual, gap, _ = problem.certify(a, z, off, dual_best=dual_best)
        v = z / problem.c + problem.b
        return DuHLResult(a=a, v=v, trace=trace.frame(), status=status, primal=primal, dual=dual, gap=gap,
                          rel_gap=gap / problem.P0 if problem.P0 > 0 else 0.0, time_s=elapsed,
                          epochs=updates / n, bytes_h2d=bytes_h2d, n_rounds=rounds, prefetch_hits=hits,
                          bytes_prefetched=prefetched, notes=self._notes,
                          iterates=self._iterates[: min(len(trace.rows), self.keep_iterates)])

    def _solve_in_memory(self, problem, a, z, off, rng, trace, t0):
        """All data resident on the CPU: the compiled loop (solvers.duhl.inmemory)."""
        n, P0 = problem.n_coords, problem.P0
        total = int(problem.coord_bytes.sum())
        done = {"rounds": 0, "updates": 0.0}

        def record(rows, counters):
            for t, updates, P_form, D_form, gap, rounds in rows:
                primal, dual = (-D_form, -P_form) if problem.dual_form else (P_form, D_form)
                loaded = rounds > 0  # the data is loaded (once, logically) for the first round
                trace.record(round=int(rounds), time_s=t - t0, epoch=updates / n, primal=primal, dual=dual,
                             gap=gap, rel_gap=gap / P0 if P0 > 0 else 0.0, certified=1,
                             bytes_h2d=total if loaded else 0, swaps=n if loaded else 0, n_resident=n,
                             prefetch_hits=0, bytes_prefetched=0)
            done.update(rounds=int(counters[1]), updates=float(counters[0]))

        status, dual_best = solve_in_memory(
            problem, a, z, off, local_epochs=self.local_epochs, max_epochs=self.max_epochs,
            max_time=self.max_time, shrinking=self.shrinking, tol_abs=self.tol * P0,
            seed_value=int(rng.integers(2**31 - 1)), record=record, t0=t0, max_passes=MAX_PASSES_PER_ROUND,
            iterates=self._iterates)
        return status, done["rounds"], (done["updates"], dual_best)

    def _solve_with_swaps(self, problem, rset, a, z, off, rng, trace, t0):
        """The DuHL loop: a resident set on a device, swaps chosen by the policy, the host
        refreshing the other coordinates' gaps in a thread while the device computes."""
        n = problem.n_coords
        tol_abs = self.tol * problem.P0
        state = (a, z, off)
        policy = Policy(self.selection, problem.coord_bytes, rset.capacity_bytes, problem.sqnorm,
                        _child(rng))
        dual_best = -np.inf

        def record(rnd, st, gap_sum, s_max, updates, swaps):
            """The certificate of state st (every coordinate's gap and s at st known)."""
            nonlocal dual_best
            primal, dual, gap, dual_best = problem.certify(*st, gap_sum=gap_sum, s_max=s_max, dual_best=dual_best)
            if len(trace.rows) < self.keep_iterates:
                self._iterates[len(trace.rows)] = st[0]
            trace.record(round=rnd, time_s=time.perf_counter() - t0, epoch=updates / n,
                         primal=primal, dual=dual, gap=gap, rel_gap=gap / problem.P0 if problem.P0 > 0 else 0.0,
                         certified=1, bytes_h2d=rset.bytes_h2d, swaps=swaps, n_resident=len(rset.resident()),
                         prefetch_hits=rset.prefetch_hits, bytes_prefetched=rset.bytes_prefetched)
            return gap

        # gaps at the start state, all known: the first selection and round 0's row
        gap_memory, s_memory = problem.coordinate_gaps(a, z, off, with_s=True)
        fresh = np.ones(n, dtype=bool)      # coordinates whose gap at the current state is known
        fresh_sum, fresh_s = float(gap_memory.sum()), float(np.abs(s_memory).max(initial=0.0))
        updates, swaps, rnd = 0, 0, 0
        status = "converged" if record(0, state, fresh_sum, fresh_s, 0, 0) <= tol_abs else None
        certified = True                     # the current state's gap is known and recorded
        resident = np.zeros(n, dtype=bool)
        schedule = _GapSchedule(tol_abs, self.gap_every)
        active = None                         # all resident + shrinking: coordinates visited

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="duhl-host") as host:
            while status is None:
                if rnd == 0 or not resident.all():  # all resident: nothing left to choose
                    chosen = policy.select(gap_memory, resident)
                    swaps += rset.assign(chosen)
                    resident[:] = False
                    resident[chosen] = True
                    n_resident = int(chosen.shape[0])
                rnd += 1

                start_updates, start_swaps = updates, swaps
                stale = np.flatnonzero(~fresh)
                # the host reads the start state while the device moves on from it
                snapshot = (a.copy(), z.copy(), off.copy()) if stale.size else None
                job = (host.submit(problem.coordinate_gaps, *snapshot, stale, with_s=True)
                       if stale.size else None)
                whole = bool(resident.all())
                passes = passes_per_round(self.local_epochs, n_resident, n_resident if active is None
                                          else active.shape[0])
                if whole and rnd < schedule.next_round:
                    # all resident (a GPU): gaps only when the schedule expects them to matter
                    updates += rset.run_round(state, rng, passes, with_gaps=False, active=active)[0]
                    certified = False
                    status = self._stop(updates, n, t0)
                    continue
                # what the next swap will likely bring in travels while the device computes
                upcoming = (policy.peek(gap_memory, resident, rset.staging_bytes)
                            if rset.staging_bytes and not whole else None)
                done, dev_coords, dev_gaps, dev_s = rset.run_round(state, rng, passes, active=active,
                                                                   prefetch=upcoming)
                updates += done
                refreshed = job.result() if job is not None else None

                if refreshed is not None:  # the start state's gap is now exact
                    host_gaps, host_s = refreshed
                    gap_start = record(rnd - 1, snapshot, fresh_sum + float(host_gaps.sum()),
                                       max(fresh_s, float(np.abs(host_s).max(initial=0.0))),
                                       start_updates, start_swaps)
                    if gap_start <= tol_abs:
                        a[:], z[:], off[:] = snapshot
                        status = "converged"
                        break
                    gap_memory[stale] = host_gaps
                gap_memory[dev_coords] = dev_gaps
                fresh[:] = False
                fresh[dev_coords] = True
                fresh_sum, fresh_s = float(dev_gaps.sum()), float(np.abs(dev_s).max(initial=0.0))
                certified = bool(fresh.all())
                if certified:  # all coordinates resident: the end state is certified too
                    if record(rnd, state, fresh_sum, fresh_s, updates, swaps) <= tol_abs:
                        status = "converged"
                        break
                    schedule.checked(rnd, fresh_sum)
                    if self.shrinking:
                        # like liblinear's shrinking: skip coordinates whose gap is zero (at a
                        # bound, optimality holding) until the next gap pass; certification
                        # still covers every coordinate, so nothing is lost but time
                        active = dev_coords[dev_gaps > 0]
                        if active.size == 0:
                            active = None
                status = self._stop(updates, n, t0)

        if not certified and status != "converged":
            # the last round's end state has no exact gap yet: one more pass gives it
            gaps, s = problem.coordinate_gaps(a, z, off, with_s=True)
            record(rnd, state, float(gaps.sum()), float(np.abs(s).max(initial=0.0)), updates, swaps)
        return status, rnd, (updates, dual_best)
