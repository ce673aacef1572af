"""DuHL: duality-gap-guided block coordinate descent under a device memory budget.

Dünner, Parnell, Jaggi, "Efficient Use of Limited-Memory Accelerators for
Linear Learning on Heterogeneous Systems", NIPS 2017.

The host holds all data, the coefficients ``a`` and a gap memory; the device
holds the data of a budget of coordinates. Each round (:mod:`solvers.duhl.loops`):

1. the device runs ``local_epochs`` epochs' worth of coordinate descent on its
   resident set, then computes its coordinates' gaps at the new state;
2. at the same time a host thread refreshes, at the round's start state, stale
   entries of the gap memory: all of them on certifying rounds (the block's
   gaps from last round + the host's = the start state's exact gap), else the
   oldest that fit ``refresh`` times the device's bytes (the row is an estimate).
   On the CPU with the data in RAM nothing runs beside the host: the refresh
   comes first, before the selection, which then sees it;
3. the host swaps in the coordinates with the largest gap memory (or the
   block another policy asks for), copying only coordinates not yet resident.

Every gap reported as certified is exact, never read from the stale memory;
a state is returned as converged only on an exact gap. With all data resident
on the CPU the whole loop is compiled (:mod:`solvers.duhl.loops.resident`); with part of
it, on the CPU and in RAM, too (:mod:`solvers.duhl.loops.swap`); else the reference loop
runs (:mod:`solvers.duhl.loops.python`: GPUs, the data on disk, prefetch).

A solve is deterministic: its iterates depend on the data, the parameters and
``random_state``, never on the clock (the compiled loops' slices end by work done).
What it chooses from a measured rate (refresh "auto" on disk) is in ``result.settings``;
passing it back reproduces the run step for step.
"""

import dataclasses
import time

import numpy as np

from solvers.duhl.block.resident import make_resident_set
from solvers.duhl.budget import is_sparse_on_disk, parse_budget, split_budget, update_budget
from solvers.duhl.loops.python import host_state_bytes, solve_python
from solvers.duhl.loops.resident import solve_resident
from solvers.duhl.loops.rounds import MAX_PASSES_PER_ROUND
from solvers.duhl.loops.swap import routes, solve_swap
from solvers.glm.checks import check_params
from solvers.glm.trace import SolveResult, Trace
from solvers.storage.on_disk import DEFAULT_BUFFER_BYTES, available_ram
from solvers.storage.ram_tier import RamTier

DuHLResult = SolveResult  # the name callers know
ANDERSON_K = 5  # passes between extrapolations (skglm's K)


def _size_up(nbytes):
    """A size string of at least ``nbytes``: whole MB below a GB, else GB to one decimal."""
    if nbytes < 10**9:
        return f"'{-(-nbytes // 10**6)}MB'"
    return f"'{-(-nbytes // 10**8) / 10:.1f}GB'"


class DuHL:
    """Gap-guided block coordinate descent with ``memory_budget`` of the data on the device.

    Parameters
    ----------
    memory_budget : None, float in (0, 1] or str
        The device's share of the data's bytes, or a size such as "512MB";
        None holds everything (plain in-memory stochastic coordinate descent).
    selection : {"gap", "random", "sequential", "importance"}
        Which coordinates live on the device; "gap" is DuHL.
    local_epochs : int or "auto"
        Device epochs over its block per round. "auto" (default): 2 with part of the data
        resident and the data in RAM, 1 with all data resident, the data on disk, or the
        logistic loss's dual.
    tol : float
        Stop once rel_gap = gap / P(0) <= tol.
    max_epochs : float
        The epoch budget: at most this many epochs (coordinate updates / coordinates), the
        last pass cut short if need be; the state reached is certified and returned.
    max_time : float or None
        Stop after this many seconds (checked between slices of work: the only setting
        whose effect depends on the machine's speed).
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
        solvers.duhl.loops.resident; with part of the data resident the gaps drive the
        selection and are computed every round.)
    shrinking : bool
        Epochs skip the coordinates whose last known gap is zero (as liblinear's
        shrinking: a working set, inside the block when part of the data is
        resident); every gap pass still covers all coordinates, so the
        certificate is unchanged.
    refresh : "auto", "all" or float >= 0
        Part of the data resident: how many stale gaps the host refreshes in a
        round that does not certify, as a multiple of the bytes the device
        touches in it ("auto": as long as the device computes: 1 with the data
        in RAM, the disk's rate over the gap kernel's rate, measured on the first
        pass, with the data on disk; 0: only certifying passes); "all": every
        round refreshes every stale gap and certifies its start state. With the
        data in RAM on the CPU, "all" and "auto" run a compiled round loop (see ``loop``);
        there, with "auto", the Lasso family (Lasso, ElasticNet, Ridge) whose Gram matrix
        X^T X takes at most the data's bytes refreshes the stale gaps from it instead of the
        data, once the stale reads have cost about as much as building it (see ``gram``; the
        data is still read every 16 rows and for the row that stops the solve).
    host_budget : None, float in (0, 1] or str
        Data on disk (a problem from solvers.glm.problems.make_problem_on_disk):
        the RAM the data may use, as a share of its bytes or a size such as
        "2GB", read buffers included; None loads it all into RAM (refused when
        it does not fit). With device="cpu" the RAM tier is the block; with a
        GPU (solvers.storage.ram_tier) the RAM tier holds the GPU block's
        coordinates and those of largest gap, and ``memory_budget`` (at most the
        RAM tier; None: as large as it) sizes the GPU block. A sparse store's block
        is read into RAM at each swap, then copied to a GPU: host_budget sizes it
        (``memory_budget``, when set, caps it).
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
        coordinate descent keeps its linear rate (Liu & Wright, 2015). On strongly
        correlated data even that overshoots (equicorrelated features, rho 0.5,
        diverged at 31 in flight on an H100): a round that raises the objective
        is undone and rerun with half as many in flight (a note says so).
    anderson : "auto" or bool
        All data resident on the CPU, coordinates that are the model's coefficients (the Lasso
        family; the classifiers in the primal, over working sets their Newton passes go
        through coordinate by coordinate): every 5 passes over the working set try the
        Anderson extrapolation of the last 6 iterates, kept only where it lowers the
        objective, the coordinate order drawn once per 6 passes (solvers.duhl.accel.anderson).
        "auto": on where it applies; True: the same, with a note where it does not apply;
        False: off.
    gram : "auto" or bool
        Covariance updates for the Lasso family in RAM on the CPU whose Gram matrix X^T X takes
        at most the data's bytes (solvers.duhl.accel.gram): "auto" where they pay (all data
        resident: built once the rate predicts enough data work; part of it, with refresh
        "auto": the stale gaps kept from it); True: also with refresh "all"; False: never.
    gap_proofs : "auto" or bool
        Part of the data resident: prove coordinates' gaps 0 without reading their data (gap
        safe screening's bound), so refreshes and certificates read only the others. "auto":
        in the Python loop always, in the compiled one where the proofs' reads of the dual
        vector cost at most a tenth of the stale data; True: always; False: never.
    loop : {"auto", "python", "compiled"}
        Part of the data resident: the round loop. "auto" runs the compiled one where it
        applies (device "cpu", the data in RAM, no prefetch, selection gap, sequential or
        random, refresh "auto" or "all"), else the Python one; "python" always the Python one
        (the reference); "compiled" refuses a solve it cannot run.
    certify_end : bool
        Data on disk: whether a solve that stops on ``max_epochs`` or ``max_time`` reads the
        data it has not certified once more, to certify the state it returns. False returns
        that state without the read: the result's ``primal``, ``dual`` and ``gap`` are NaN and
        the trace ends at the last certified row. For a caller that certifies elsewhere, as a
        CoCoA+ part, whose next round's pass at the broadcast state is its certificate. (With
        the data in RAM the state returned is always certified: that costs no read.)

    Attributes set by :meth:`solve`
    -------------------------------
    loop_ : str
        The round loop that ran: "resident" (all data resident on the CPU), "compiled" or "python".
    gram_ : dict
        The compiled swap loop's Gram matrix: whether it was built, its anchors (data passes that
        re-read the dots), the largest drift of its dots from the data's at an anchor, the rows
        certified from its dots.
    anderson_state_ : ndarray
        All data resident: Anderson's [iterates stored, extrapolations tried, kept].
    global_passes_ : dict
        All data resident: the global gap passes, the coordinates they read (the others were
        proven 0 without their data), whether the Gram matrix was built.
    """

    owner = "DuHL"  # the class errors name (an estimator built on DuHL sets its own)

    def __init__(self, memory_budget=None, selection="gap", local_epochs="auto", tol=1e-6,
                 max_epochs=1000, max_time=None, device="cpu", random_state=None, callback=None,
                 gap_every="auto", shrinking=True, prefetch="auto", gap_kernel="tpa",
                 concurrency="auto", keep_iterates=0, refresh="auto", host_budget=None, anderson="auto", gram="auto",
                 gap_proofs="auto", loop="auto", certify_end=True):
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
        self.refresh = refresh
        self.host_budget = host_budget
        self.anderson = anderson
        self.gram = gram
        self.gap_proofs = gap_proofs
        self.loop = loop
        self.certify_end = certify_end
        self._validate(self.owner)

    def _validate(self, owner):
        check_params(owner, memory_budget=self.memory_budget, selection=self.selection,
                     local_epochs=self.local_epochs, tol=self.tol, max_epochs=self.max_epochs,
                     max_time=self.max_time, device=self.device, random_state=self.random_state,
                     gap_every=self.gap_every, shrinking=self.shrinking, prefetch=self.prefetch,
                     gap_kernel=self.gap_kernel, concurrency=self.concurrency,
                     keep_iterates=self.keep_iterates, refresh=self.refresh, host_budget=self.host_budget,
                     anderson=self.anderson, gram=self.gram, gap_proofs=self.gap_proofs, loop=self.loop,
                     certify_end=self.certify_end)
        if self.gap_kernel == "blas" and self.device == "cpu":
            raise ValueError(f"The 'gap_kernel' parameter 'blas' of {owner} runs on device='cuda' or "
                             "'cuda_sim' (the CPU computes gaps with its own kernels). Got device='cpu'.")

    def _prefetch_share(self, problem):
        if is_sparse_on_disk(problem.A):  # its block reads the joined rows at the swap (no staging)
            return 0.0
        if self.prefetch == "auto":  # a copy overlaps compute on a GPU, a disk read anywhere
            return 0.2 if self.device in ("cuda", "cuda_sim") or problem.on_disk else 0.0
        return float(self.prefetch)

    def _budget_bytes(self, problem, name="memory_budget", reserved=0):
        """The block's budget in bytes (None: everything resident), checked; ``reserved``
        bytes of it go to read buffers."""
        value = getattr(self, name)
        coord_bytes = problem.coord_bytes
        total = int(coord_bytes.sum())
        budget = parse_budget(value, total)
        if budget is None:
            return None
        if budget >= total:
            if budget > total:
                self._notes.append(f"{name} {value!r} ({budget} bytes) holds all "
                                   f"{total} bytes of data: everything resident, as with None")
            return None
        budget -= reserved
        largest = int(coord_bytes.max())
        if budget < largest:
            raise ValueError(f"The '{name}' parameter of {self.owner} ({value!r} = {budget + reserved} "
                             f"bytes{f', {reserved} for read buffers and indexes' if reserved else ''}) is below one "
                             f"coordinate's data ({largest} bytes).")
        block = split_budget(problem, budget, self._prefetch_share(problem))[0]
        if block < largest:
            raise ValueError(f"The 'prefetch' parameter of {self.owner} ({self.prefetch!r}) leaves "
                             f"{block} bytes of the {budget}-byte {name} "
                             f"for the block, below one coordinate's data ({largest} bytes).")
        return budget

    def _ram_tier(self, problem):
        """Data on disk: (the problem, the block's budget). Loaded into RAM when host_budget
        holds it all (or is None and it fits); else the block is the RAM tier."""
        sparse = is_sparse_on_disk(problem.A)
        total = int(problem.coord_bytes.sum()) if sparse else problem.A.nbytes  # the data's bytes in RAM
        budget = parse_budget(self.host_budget, total)
        if budget is None or budget >= total:
            free = available_ram()
            if budget is None and free is not None and total > free:
                raise ValueError(f"The data on disk ({total / 1e9:.2f} GB) does not fit in the RAM "
                                 f"available ({free / 1e9:.2f} GB): set {self.owner}'s 'host_budget' "
                                 f"(e.g. '{max(1, free // 4 // 10**9)}GB').")
            self._notes.append(f"host_budget {self.host_budget!r} holds all {total} bytes of data: "
                               "read into RAM once")
            return problem.in_memory(), self._budget_bytes(problem)
        if self.device != "cpu" and not sparse:
            return self._gpu_under_ram_tier(problem, budget)
        if self.memory_budget is not None and self.device == "cpu":
            raise ValueError(f"{self.owner}: with the data on disk and device='cpu' the block is the RAM "
                             f"tier, sized by 'host_budget'; leave 'memory_budget' None "
                             f"(got {self.memory_budget!r}).")
        if sparse:
            A = problem.A
            index = A.store.indptr.nbytes + (0 if A.scale is None else A.scale.nbytes)
            ram = isinstance(self.host_budget, str)  # RAM: everything that grows with the data, the solver's too
            room = budget - index - host_state_bytes(problem) if ram else budget
            buffer = max(1 << 13, min(DEFAULT_BUFFER_BYTES, room // 8) >> 12 << 12)  # whole 4 KB blocks
            A.buffer_bytes = buffer
            if ram:
                fixed = self._sparse_reserve(problem, budget, buffer, index)
            else:  # a share of the data: the block, two read buffers (gaps, the block's reads), indptr, the signs
                fixed = 2 * buffer + index
            if self.prefetch not in ("auto", 0, 0.0):
                self._notes.append("prefetch: a sparse store's block reads its rows at the swap (no staging): ignored")
            block = self._budget_bytes(problem, "host_budget", reserved=fixed)
            if self.device != "cpu":
                # the GPU's block lands in RAM at its swap, then in pinned memory for its copy: twice in RAM
                device = self._budget_bytes(problem)
                if block // 2 < int(problem.coord_bytes.max()):
                    raise ValueError(f"The 'host_budget' parameter of {self.owner} ({self.host_budget!r} = {budget} "
                                     f"bytes, {fixed} for read buffers and indexes) leaves a GPU block of "
                                     f"{block // 2} bytes (half: the rows read and their pinned copy), below one "
                                     f"coordinate's data ({int(problem.coord_bytes.max())} bytes).")
                block = block // 2 if device is None else min(block // 2, device)
                self._notes.append(f"sparse store on the GPU: a block of {block} bytes, read into RAM at each "
                                   "swap (and its pinned copy), then copied to the GPU")
            return problem, block
        row = problem.A.shape[1] * problem.A.itemsize
        buffer = max(2 * row, min(DEFAULT_BUFFER_BYTES, budget // 8) // row * row)
        problem.A.buffer_bytes = buffer
        return problem, self._budget_bytes(problem, "host_budget", reserved=buffer)

    def _sparse_reserve(self, problem, budget, buffer, index):
        """What a sparse store's solve takes from ``host_budget`` bytes of RAM beside the block:
        ``index`` (row pointers, signs), three read buffers' worth (the gaps' reads, the block's reads,
        a gap pass's scratch) and the loop's state; an error naming the least that works."""
        state = host_state_bytes(problem)
        fixed = 3 * buffer + index + state
        largest = int(problem.coord_bytes.max())
        n = problem.n_coords
        if budget - fixed < largest:
            raise ValueError(
                f"The 'host_budget' parameter of {self.owner} ({self.host_budget!r} = {budget} bytes) is below what "
                f"the solve keeps beside the block: {state} bytes of solver state for {n} coordinates "
                f"({state / n:.0f} a coordinate), {index} of row pointers and signs, {3 * buffer} of read buffers. "
                f"Set it to at least {_size_up(fixed + 16 * largest)}, or to a share of the data (e.g. 0.25).")
        self._notes.append(f"host_budget {self.host_budget!r}: {index / 1e9:.3f} GB row pointers and signs, "
                           f"{state / 1e9:.3f} GB the solver's state ({state / n:.0f} bytes a coordinate), "
                           f"{3 * buffer / 1e9:.3f} GB read buffers, {(budget - fixed) / 1e9:.3f} GB the block")
        return fixed

    def _gpu_under_ram_tier(self, problem, host):
        """Data on disk, a GPU: ``host`` bytes of RAM (read buffers included) hold the GPU
        block's coordinates and the largest gaps (solvers.storage.ram_tier); memory_budget sizes
        the GPU block, at most the RAM tier (None: as large as it)."""
        row = problem.A.shape[1] * problem.A.itemsize
        buffer = max(2 * row, min(DEFAULT_BUFFER_BYTES, host // 8) // row * row)
        problem.A.buffer_bytes = buffer
        n_rows = (host - buffer) // row
        if n_rows < 1:
            raise ValueError(f"The 'host_budget' parameter of {self.owner} ({self.host_budget!r} = {host} bytes, "
                             f"{buffer} for read buffers) is below one coordinate's data ({row} bytes).")
        tier = RamTier(problem.A, n_rows)
        problem = dataclasses.replace(problem, A=tier)
        device = self._budget_bytes(problem)
        if device is None:
            device = tier.capacity_bytes
        elif device > tier.capacity_bytes:
            raise ValueError(f"The 'memory_budget' parameter of {self.owner} ({self.memory_budget!r} = {device} "
                             f"bytes) is more than the RAM tier holds ({tier.capacity_bytes} bytes of "
                             f"host_budget {self.host_budget!r}): the GPU block is a subset of the RAM set.")
        self._notes.append(f"RAM tier: {n_rows} of {problem.n_coords} coordinates ({tier.capacity_bytes} bytes); "
                           f"GPU block {device} bytes")
        return problem, device

    def _stop(self, updates, n, t0):
        """The status that ends the run now, or None."""
        if updates >= update_budget(self.max_epochs, n):
            return "max_epochs"
        if self.max_time is not None and time.perf_counter() - t0 >= self.max_time:
            return "max_time"
        return None

    def solve(self, problem, a0=None, carry=None):
        """Solve ``problem`` (a :class:`solvers.glm.problems.Problem`, in RAM or on disk) from
        ``a0`` (None: zeros) to ``tol``, within ``max_epochs`` (and ``max_time``).

        ``carry`` (data on disk, device "cpu": a :class:`solvers.duhl.loops.python.Carry`, empty
        for the first of a series of solves of the same coordinates): the block in RAM and the gap
        memory one solve leaves to the next, which starts from them rather than from a pass over
        the data; its first rows are then the memory's estimate (``certified`` 0). The caller
        closes it once the series ends.

        Returns a :class:`solvers.glm.trace.SolveResult`: the coordinates ``a`` (coefficients for
        the Lasso family, dual variables for the classifiers), ``v`` = A a (the classifiers'
        weights w), the certified ``primal``, ``dual`` and ``gap`` of the state returned, the
        per-round ``trace`` (the project's metric vocabulary), ``status`` ("converged",
        "max_epochs" or "max_time"), ``notes`` (settings adjusted for the data) and ``settings``
        (what the run chose from measured rates: pass them back to reproduce it)."""
        self._validate(self.owner)
        self._notes = []
        if carry is not None and not (problem.on_disk and self.device == "cpu"):
            raise ValueError(f"{self.owner}.solve's 'carry' continues a solve from disk on the CPU. Got it with "
                             f"the data {'on disk' if problem.on_disk else 'in RAM'} and device={self.device!r}.")
        if self.gap_kernel == "blas" and problem.sparse:
            raise ValueError(f"The 'gap_kernel' parameter 'blas' of {self.owner} needs dense data (a cuBLAS "
                             "matrix-vector product); use gap_kernel='tpa' for sparse data.")
        if problem.on_disk:
            problem, budget = self._ram_tier(problem)
        else:
            budget = self._budget_bytes(problem)
        rng = np.random.default_rng(self.random_state)
        t0 = time.perf_counter()
        n = problem.n_coords
        trace = Trace(self.callback)
        self._iterates = np.empty((self.keep_iterates, n))
        a = np.zeros(n) if a0 is None else np.array(a0, dtype=np.float64)
        if a0 is None:
            z, off = problem.zero_state()
        else:
            z, off = problem.state_from(a)
        applies = budget is None and self.device == "cpu" and not problem.dual_form
        if not isinstance(self.anderson, str) and self.anderson and not applies:
            self._notes.append("anderson applies with all data resident on the CPU and coordinates that are "
                               "the model's coefficients (Lasso, ElasticNet, Ridge, classifiers in the primal): "
                               "ignored")
        settings, end_row = {}, True  # end_row: the trace's last row certifies the state returned
        self.gram_, self.anderson_state_, self.global_passes_ = {}, np.zeros(3), {}
        if budget is None and self.device == "cpu":
            status, rounds, updates, dual_best = self._solve_resident(problem, a, z, off, rng, trace, t0)
            bytes_h2d, hits, prefetched = int(problem.coord_bytes.sum()), 0, 0
            self.loop_ = "resident"
        else:
            if carry is not None and carry.rset is not None:  # the last solve's block, under this problem
                rset = carry.rset
                rset.problem = problem
            else:
                rset = make_resident_set(problem, budget, self.device, prefetch=self._prefetch_share(problem),
                                          gap_kernel=self.gap_kernel, concurrency=self.concurrency)
            if carry is not None:
                carry.rset = rset
            compiled = routes(self, problem, rset) and carry is None
            if self.loop == "compiled" and not compiled:
                rset.close()
                raise ValueError(f"The 'loop' parameter 'compiled' of {self.owner} needs device='cpu', the data "
                                 "in RAM, no prefetch, selection 'gap', 'sequential' or 'random' and refresh "
                                 f"'auto' or 'all'. Got device={self.device!r}, selection={self.selection!r}, "
                                 f"refresh={self.refresh!r}{', the data on disk' if problem.on_disk else ''}.")
            compiled = compiled and self.loop != "python"
            self.loop_ = "compiled" if compiled else "python"
            try:
                if compiled:
                    status, rounds, updates, dual_best = solve_swap(self, problem, rset, a, z, off, rng, trace, t0,
                                                                    self._iterates)
                else:
                    status, rounds, updates, dual_best, settings, end_row = solve_python(
                        self, problem, rset, a, z, off, rng, trace, t0, self._iterates, carry)
            finally:
                rset.close()
            if problem.on_disk and trace.rows:  # the last row counts the read-ahead the loop left in flight
                trace.rows[-1].update(bytes_disk=problem.A.bytes_read, disk_s=problem.A.read_s)
            bytes_h2d, hits, prefetched = rset.bytes_h2d, rset.prefetch_hits, rset.bytes_prefetched
            cuts = getattr(rset.device, "cuts", [])
            if cuts:
                self._notes.append(f"concurrency cut to {cuts[-1]} update(s) in flight: {len(cuts)} round(s) "
                                   "raised the objective (correlated coordinates updated at once), undone")
        for name, value in settings.items():
            self._notes.append(f"{name} 'auto' measured {value:.6g}: pass {name}={value!r} to reproduce this run")
        last = trace.rows[-1]
        elapsed = last["time_s"] if end_row else time.perf_counter() - t0
        if problem.on_disk and not end_row:  # certify_end=False: the state returned has no certificate
            primal = dual = gap = float("nan")
        elif problem.on_disk:  # the last row certifies the state returned; a re-evaluation is a full read
            primal, dual, gap = last["primal"], last["dual"], last["gap"]
        else:  # re-evaluate from a alone (outside the timed loop): no drift in z can hide in the result
            z, off = problem.state_from(a)
            primal, dual, gap, _ = problem.certify(a, z, off, dual_best=dual_best)
        v = problem.v_of(z, off)
        return DuHLResult(a=a, v=v, trace=trace.frame(), status=status, primal=primal, dual=dual, gap=gap,
                          rel_gap=gap / problem.P0 if problem.P0 > 0 else 0.0, time_s=elapsed,
                          epochs=updates / n, bytes_h2d=bytes_h2d, n_rounds=rounds, prefetch_hits=hits,
                          bytes_prefetched=prefetched, notes=self._notes, settings=settings,
                          iterates=self._iterates[: min(len(trace.rows), self.keep_iterates)])

    def _solve_resident(self, problem, a, z, off, rng, trace, t0):
        """All data resident on the CPU: the compiled loop (solvers.duhl.loops.resident)."""
        epochs = 1 if self.local_epochs == "auto" else self.local_epochs  # "auto": one epoch a round here
        on = (isinstance(self.anderson, str) or bool(self.anderson)) and not problem.dual_form
        status, rounds, updates, dual_best, self.anderson_state_, self.global_passes_ = solve_resident(
            problem, a, z, off, local_epochs=epochs, max_epochs=self.max_epochs, max_time=self.max_time,
            shrinking=self.shrinking, tol_abs=self.tol * problem.P0, seed_value=int(rng.integers(2**31 - 1)),
            trace=trace, t0=t0, max_passes=MAX_PASSES_PER_ROUND, iterates=self._iterates,
            anderson=ANDERSON_K if on else 0, gram=self.gram is not False)
        return status, rounds, updates, dual_best
