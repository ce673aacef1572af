"""DuHL with part of the data resident on the CPU, the round loop compiled.

The Python loop (:mod:`solvers.duhl.swaps`) spends ~1 ms of interpreter time per
round (selection, swap bookkeeping, a thread hand-off, a trace row): on a small
problem that is most of the round (diabetes at memory_budget 0.25: 250x the
all-resident time). Here one compiled call runs many rounds of the same
algorithm, with ``refresh="all"`` semantics (every gap exact each round):

1. the block is chosen from the gap memory by the policy's rule (gap: largest
   gap first, resident first on ties, filling the byte budget; sequential; random);
2. a swap copies the coordinates that joined the block into the block's buffer
   (dense rows, or a CSR buffer compacted in place), counted as the resident set
   counts them (bytes of the joined coordinates, how many joined);
3. the stale gaps are refreshed at the round's start state, which with the block's
   gaps of the last round gives that state's exact gap: a certified row;
4. ``passes`` epochs over the block (its coordinates with a positive gap when
   shrinking), in the orders ``rng.permutation`` draws (the same stream as the
   Python loop's), then the block's gaps at the new state.

With the same selection it gives the Python loop's iterates, bytes, swaps and
trace rows (with refresh="all"), bit for bit: the same kernels in the same order,
and the gap sum as NumPy sums (pairwise). One difference: when a row certifies
the round's start state, this loop returns at once, where the Python loop has run
the round's epochs meanwhile and discards them (``epochs`` counts them there).

:func:`routes` says when the DuHL solver uses this loop (see its docstring).
"""

import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from solvers.duhl.inmemory import _csr, _epoch, _gaps
from solvers.duhl.swaps import MAX_PASSES_PER_ROUND, _child
from solvers.glm.certificates import form_certificate, residual_stats, tight_lasso
from solvers.kernels import cpu

# refresh="auto" in RAM runs here (as "all") when refreshing every stale gap reads at most
# this many bytes per round beyond what "auto" refreshes: ~1-2 ms of the gap kernel, about
# the Python loop's own cost per round (see routes)
EXTRA_GAP_BYTES = 4 << 20
POLICIES = {"gap": 0, "sequential": 1, "random": 2}
# rows a slice can record before it returns: a row per round, and a return costs the
# rows' Python (a few us each), so enough for a slice's rounds on small problems
HISTORY = 4096


def routes(solver, problem, rset):
    """Whether DuHL runs this loop: the data in RAM on device "cpu", no staging memory
    (prefetch 0: nothing to overlap on a CPU), a gap, sequential or random selection, and
    refresh "all", or "auto" when "all" costs little more. "auto" refreshes as many bytes
    as the device touches, (local_epochs + 1) times the block's; "all" refreshes every
    stale gap, the data outside the block. When the difference is at most EXTRA_GAP_BYTES
    a round, "all" costs less than the ~1 ms of Python a round the compiled loop saves
    (measured: w8a[20000] Lasso, 2.8 MB, at memory_budget 0.05, 2.4 MB more a round:
    compiled 1.25 s to 1e-6, Python 2.2 s), and its selection sees fresher gaps. A
    numeric refresh (a chosen share) keeps the Python loop."""
    if solver.device != "cpu" or problem.on_disk or rset.staging_bytes or solver.selection not in POLICIES:
        return False
    if solver.refresh == "all":
        return True
    total = int(problem.coord_bytes.sum())
    block = int(rset.capacity_bytes)
    extra = (total - block) - (solver.local_epochs + 1) * block
    return solver.refresh == "auto" and extra <= EXTRA_GAP_BYTES


@intrinsic
def _monotonic_ns(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in ns, perf_counter's clock on Linux, called by name
    (no GIL, ~50 ns: a row per round; an object-mode perf_counter costs ~1 us)."""
    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        spec = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, spec.as_pointer()]),
                                            "clock_gettime")
        ts = cgutils.alloca_once(builder, spec)
        builder.call(fn, [ir.Constant(i32, 1), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(i64, 10**9)), nsec)
    return types.int64(), codegen


@njit(nogil=True, cache=True)
def _now():
    return _monotonic_ns() * 1e-9


@njit(nogil=True, cache=True)
def _block_sum(x, lo, n):
    """NumPy's sum of a leaf of its pairwise tree (n <= 128): eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r = x[lo:lo + 8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += x[lo + i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res += x[lo + i]
        i += 1
    return res


@njit(nogil=True, cache=True)
def _pairwise(x):
    """np.sum(x) bit for bit: NumPy's pairwise tree (halves cut at multiples of 8, leaves of
    at most 128), walked with a stack (a recursive function breaks Numba's cache: numba#6061)."""
    if x.shape[0] <= 128:
        return _block_sum(x, 0, x.shape[0])
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)
    vals = np.empty(64)
    los[0], ns[0], top, n_vals = 0, x.shape[0], 0, 0
    while top >= 0:
        lo, n = los[top], ns[top]
        if n <= 128:
            vals[n_vals] = _block_sum(x, lo, n)
            n_vals += 1
            top -= 1
        elif stage[top] == 2:  # both halves summed
            n_vals -= 1
            vals[n_vals - 1] += vals[n_vals]
            top -= 1
        else:  # the first, then the second half
            half = n // 2 - (n // 2) % 8
            stage[top] += 1
            los[top + 1] = lo if stage[top] == 1 else lo + half
            ns[top + 1] = half if stage[top] == 1 else n - half
            stage[top + 1] = 0
            top += 1
    return vals[0]


def _block_gaps(B, positions, coords, a, z, off, mu, c, theta, out, s):
    """Gaps and s of ``coords`` whose data are rows ``positions`` of the block B."""


def _swap_in(A, B, row_coord, pos, keep, joined, n_joined):
    """Make the block hold the coordinates with ``keep`` set: rows of the others leave,
    ``joined[:n_joined]`` are copied in from A. Returns the block's rows in use."""


@overload(_block_gaps)
def _block_gaps_for(B, positions, coords, a, z, off, mu, c, theta, out, s):
    if _csr(B):
        return lambda B, positions, coords, a, z, off, mu, c, theta, out, s: cpu.gaps_sparse(
            B[0], B[1], B[2], positions, coords, a, z, off, mu, c, theta, out, s)
    return lambda B, positions, coords, a, z, off, mu, c, theta, out, s: cpu.gaps_dense(
        B[0], positions, coords, a, z, off, mu, c, theta, out, s)


@overload(_swap_in)
def _swap_in_for(A, B, row_coord, pos, keep, joined, n_joined):
    if _csr(B):
        def csr(A, B, row_coord, pos, keep, joined, n_joined):
            # the kept rows move to the front in their order (a row never moves right, so in
            # place), then the joined ones are appended: what SparseResidentSet.assign builds
            bptr, bind, bdat = B
            rows, fill, start = 0, 0, 0
            for r in range(row_coord.shape[0]):
                i = row_coord[r]
                if i < 0:
                    break
                lo, hi = start, bptr[r + 1]  # read before row r + 1's start is rewritten
                start = hi
                if not keep[i]:
                    pos[i] = -1
                    continue
                for e in range(lo, hi):  # fill <= lo: copying forward never overwrites a source
                    bind[fill + e - lo] = bind[e]
                    bdat[fill + e - lo] = bdat[e]
                fill += hi - lo
                row_coord[rows] = i
                pos[i] = rows
                rows += 1
                bptr[rows] = fill
            for k in range(n_joined):
                i = joined[k]
                lo, hi = A[0][i], A[0][i + 1]
                bind[fill:fill + hi - lo] = A[1][lo:hi]
                bdat[fill:fill + hi - lo] = A[2][lo:hi]
                fill += hi - lo
                row_coord[rows] = i
                pos[i] = rows
                rows += 1
                bptr[rows] = fill
            row_coord[rows:] = -1
            return rows
        return csr

    def dense(A, B, row_coord, pos, keep, joined, n_joined):
        # a joined coordinate takes a row that holds none kept (empty rows first, as
        # DenseResidentSet.assign does; where it sits changes no iterate)
        rows = B[0]
        k = 0
        for empty in (True, False):
            for r in range(row_coord.shape[0]):
                if k == n_joined:
                    break
                i = row_coord[r]
                if (i < 0) != empty or (i >= 0 and keep[i]):
                    continue
                if i >= 0:
                    pos[i] = -1
                rows[r] = A[0][joined[k]]
                row_coord[r] = joined[k]
                pos[joined[k]] = r
                k += 1
        for r in range(row_coord.shape[0]):
            i = row_coord[r]
            if i >= 0 and not keep[i]:  # left the block, no one took its row
                pos[i] = -1
                row_coord[r] = -1
        return row_coord.shape[0]
    return dense


@njit(nogil=True, cache=True)
def _select(policy, gaps, resident, coord_bytes, budget, rng, cursor, chosen, order, keys):
    """The next block into ``chosen`` (Policy.select's rule; ``order`` and ``keys``:
    scratch); returns its size."""
    n = gaps.shape[0]
    if policy == 0:  # np.lexsort((~resident, -gaps)): largest gap first, resident first on ties
        k = 0
        for pass_resident in (True, False):
            for i in range(n):
                if resident[i] == pass_resident:
                    order[k] = i
                    keys[k] = -gaps[i]
                    k += 1
        order[:] = order[np.argsort(keys, kind="mergesort")]
    elif policy == 1:  # round robin from the cursor
        for i in range(n):
            order[i] = (i + cursor) % n
    else:  # rng.permutation(n)
        for i in range(n):
            order[i] = i
        rng.shuffle(order)
    used, k = 0, 0
    while k < n and used + coord_bytes[order[k]] <= budget:
        used += coord_bytes[order[k]]
        chosen[k] = order[k]
        k += 1
    return k


@njit(nogil=True, cache=True)
def _row(history, iterates, counters, a, primal, dual, gap, rnd, n_resident):
    """A certified row for the state a: (time, updates, P_form, D_form, gap, round, bytes,
    swaps, n_resident); a copy of a when the caller keeps iterates."""
    row = int(counters[4])
    history[row, 0] = _now()
    history[row, 1] = counters[0]
    history[row, 2] = primal
    history[row, 3] = dual
    history[row, 4] = gap
    history[row, 5] = rnd
    history[row, 6] = counters[3]
    history[row, 7] = counters[2]
    history[row, 8] = n_resident
    if counters[5] < iterates.shape[0]:
        iterates[int(counters[5])] = a
    counters[4] += 1
    counters[5] += 1


@cpu.model_kernel(nogil=True, cache=True, error_model="numpy")
def _certify(A, stale, a, z, off, mu, c, b, theta, tight, l1, carry_dual, gaps, s, counters, out_g, out_s):
    """The stale gaps refreshed at the state (a, z, off); with the others (fresh) its
    certificate (P_form, D_form, gap), dual_best updated in counters[7]."""
    n_stale = stale.shape[0]
    _gaps(A, stale, a, z, off, mu, c, theta, out_g[:n_stale], out_s[:n_stale])
    for j in range(n_stale):
        gaps[stale[j]] = out_g[j]
        s[stale[j]] = out_s[j]
    s_max = 0.0
    for i in range(gaps.shape[0]):
        s_max = max(s_max, abs(s[i]))
    q, ub = residual_stats(z, c * off[0], b)
    primal, dual, gap, dual_best = form_certificate(q, ub, c, cpu.sum_g(a, theta), _pairwise(gaps),
                                                    s_max if tight else 0.0, l1, tight,
                                                    counters[7] if carry_dual else -np.inf)
    counters[7] = dual_best
    return primal, dual, gap


@cpu.model_kernel(nogil=True, cache=True, error_model="numpy")
def run_swap_slice(A, B, row_coord, pos, coord_bytes, budget, policy, a, z, off, mu, sqnorm, c, b, theta,
                   tight, l1, carry_dual, tol_abs, max_updates, deadline, local_epochs, max_passes, shrinking,
                   rng, child, gaps, s, resident, counters, history, iterates):
    """Rounds until a certified tolerance, ``max_updates``, ``deadline`` (perf_counter
    seconds) or a full ``history``. Carried between calls: the block (B, row_coord,
    pos: each coordinate's row or -1), the gap memory (gaps, s), ``resident`` and
    ``counters`` (updates, rounds, swaps, bytes moved, rows of this slice, rows of
    the run, sequential cursor, dual_best, 2: no gap known yet (the first call's row 0
    comes from a full pass), 1: every gap fresh, 0: the last round's block's). Each
    history row (see _row) is a round's start state; ``iterates`` receives a copy of a
    at the first rows of the run. Returns status: 1 converged, 2 max_updates, 3
    deadline or full history."""
    n = a.shape[0]
    chosen = np.empty(n, dtype=np.int64)
    keep = np.zeros(n, dtype=np.bool_)
    joined = np.empty(n, dtype=np.int64)
    visit = np.empty(n, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    keys = np.empty(n)
    stale = np.empty(n, dtype=np.int64)
    positions = np.empty(row_coord.shape[0], dtype=np.int64)
    block = np.empty(row_coord.shape[0], dtype=np.int64)
    out_g = np.empty(n)
    out_s = np.empty(n)
    if counters[8] == 2.0:  # row 0: every gap at the start state
        primal, dual, gap = _certify(A, np.arange(n), a, z, off, mu, c, b, theta, tight, l1, carry_dual, gaps, s,
                                     counters, out_g, out_s)
        _row(history, iterates, counters, a, primal, dual, gap, 0, 0)
        counters[8] = 1.0
        if gap <= tol_abs:
            return 1
    while True:
        k = _select(policy, gaps, resident, coord_bytes, budget, child, int(counters[6]), chosen, order, keys)
        if policy == 1:
            counters[6] = (counters[6] + k) % n
        # the swap: coordinates not in the block join it (their data copied in)
        keep[:] = False
        n_joined = 0
        for j in range(k):
            i = chosen[j]
            keep[i] = True
            if not resident[i]:
                joined[n_joined] = i
                n_joined += 1
                counters[3] += coord_bytes[i]
        counters[2] += n_joined
        _swap_in(A, B, row_coord, pos, keep, joined, n_joined)
        n_stale, n_gap = 0, 0
        for i in range(n):
            if not resident[i]:  # not in the last round's block: its gap is stale
                stale[n_stale] = i
                n_stale += 1
            if keep[i] and gaps[i] > 0.0:
                n_gap += 1
        use_gap = shrinking and 0 < n_gap < k  # a working set inside the block
        n_active = 0
        for i in range(n):  # in coordinate order, as the resident set visits them
            if keep[i] and (not use_gap or gaps[i] > 0.0):
                visit[n_active] = pos[i]
                n_active += 1
        resident[:] = keep
        counters[1] += 1
        if counters[8] == 0.0:  # the stale gaps at the start state: with the block's, its certificate
            primal, dual, gap = _certify(A, stale[:n_stale], a, z, off, mu, c, b, theta, tight, l1, carry_dual,
                                         gaps, s, counters, out_g, out_s)
            _row(history, iterates, counters, a, primal, dual, gap, counters[1] - 1, k)
            if gap <= tol_abs:
                return 1
        passes = local_epochs * min(max_passes, max(1, k // max(1, n_active)))
        for _ in range(passes):  # rng.permutation(visit) as the Python loop draws it: a copy, shuffled
            order[:n_active] = visit[:n_active]
            rng.shuffle(order[:n_active])
            counters[0] += _epoch(B, row_coord, order[:n_active], a, z, off, mu, sqnorm, c, theta)
        # the block's gaps at the new state (the others are stale now)
        m = 0
        for i in range(n):
            if keep[i]:
                positions[m] = pos[i]
                block[m] = i
                m += 1
        _block_gaps(B, positions[:m], block[:m], a, z, off, mu, c, theta, out_g[:m], out_s[:m])
        for j in range(m):
            gaps[block[j]] = out_g[j]
            s[block[j]] = out_s[j]
        counters[8] = 0.0
        if counters[0] >= max_updates:
            return 2
        if counters[4] >= history.shape[0] or _now() >= deadline:
            return 3


def solve_compiled_swaps(solver, problem, rset, a, z, off, rng, trace, t0, iterates, slice_s=0.2):
    """The loop of :class:`solvers.duhl.solver.DuHL` with the resident set ``rset`` (whose
    buffers hold the block), compiled; as :func:`solvers.duhl.swaps.solve_with_swaps`.
    Returns (status, rounds, (updates, best dual value))."""
    n = problem.n_coords
    A = problem.A
    tol_abs = solver.tol * problem.P0
    coord_bytes = problem.coord_bytes
    tight = tight_lasso(problem.theta)
    l1 = float(problem.theta.l1) if tight else 0.0
    carry = not problem.dual_form
    if problem.sparse:
        full = (A.indptr, A.indices, A.data)
        bptr = np.zeros(n + 1, dtype=np.int64)
        block = (bptr, rset.rows.indices, rset.rows.data)
        row_coord = np.full(n, -1, dtype=np.int64)
    else:
        full, block, row_coord = (A,), (rset.data,), rset.row_coord
    pos = np.full(n, -1, dtype=np.int64)
    counters = np.zeros(9)  # see run_swap_slice
    history = np.empty((HISTORY, 9))
    child = _child(rng)

    def record(rnd, time_s, updates, P_form, D_form, gap, bytes_h2d, swaps, n_resident):
        primal, dual = (-D_form, -P_form) if problem.dual_form else (P_form, D_form)
        trace.record(round=int(rnd), time_s=time_s, epoch=updates / n, primal=primal, dual=dual, gap=gap,
                     rel_gap=gap / problem.P0 if problem.P0 > 0 else 0.0, certified=1,
                     bytes_h2d=int(bytes_h2d), swaps=int(swaps), n_resident=int(n_resident), prefetch_hits=0,
                     bytes_prefetched=0)

    def certify_here(rnd, updates, swaps, n_resident):
        """A row for the last round's end state from a full gap pass (as the Python loop's last)."""
        gaps, s = problem.coordinate_gaps(a, z, off, with_s=True)
        if len(trace.rows) < iterates.shape[0]:
            iterates[len(trace.rows)] = a
        P, D, gap, counters[7] = _form(problem, a, z, off, float(gaps.sum()), float(np.abs(s).max(initial=0.0)),
                                       counters[7])
        record(rnd, time.perf_counter() - t0, updates, P, D, gap, counters[3], swaps, n_resident)

    gaps, s = np.empty(n), np.empty(n)
    resident = np.zeros(n, dtype=bool)
    counters[7] = -np.inf
    counters[8] = 2.0  # no gap known: the first call starts with row 0
    counters[5] = len(trace.rows)
    # one machine-code version for every user's value types (an int max_epochs or a float)
    scalars = (int(rset.capacity_bytes), int(POLICIES[solver.selection]))
    max_updates = float(solver.max_epochs * n)
    loop_params = (int(solver.local_epochs), int(MAX_PASSES_PER_ROUND), bool(solver.shrinking))
    tight, l1, carry, tol_abs = bool(tight), float(l1), bool(carry), float(tol_abs)
    status = None
    while status is None:
        deadline = time.perf_counter() + slice_s
        if solver.max_time is not None:
            deadline = min(deadline, t0 + solver.max_time)
        counters[4] = 0
        code = run_swap_slice(full, block, row_coord, pos, coord_bytes, *scalars, a, z, off, problem.mu, problem.sqnorm,
                              problem.c, problem.b, problem.theta, tight, l1, carry, tol_abs, max_updates, deadline,
                              *loop_params, rng, child, gaps, s, resident, counters, history, iterates)
        for t, updates, P, D, gap, rnd, bytes_h2d, swaps, n_resident in history[: int(counters[4])]:
            record(rnd, t - t0, updates, P, D, gap, bytes_h2d, swaps, n_resident)
        if code == 1:
            status = "converged"
        elif code == 2:
            status = "max_epochs"
        elif solver.max_time is not None and time.perf_counter() - t0 >= solver.max_time:
            status = "max_time"
    _hand_back(rset, problem, block, row_coord, resident, counters)
    if status != "converged":  # the last round's end state: one more pass certifies it
        certify_here(counters[1], counters[0], counters[2], np.count_nonzero(resident))
    return status, int(counters[1]), (float(counters[0]), counters[7])


def _form(problem, a, z, off, gap_sum, s_max, dual_best):
    """Problem.certify's numbers in the form's orientation (P_form, D_form, gap, dual_best)."""
    P, D, gap, best = problem.certify(a, z, off, gap_sum=gap_sum, s_max=s_max, dual_best=dual_best)
    return (-D, -P, gap, best) if problem.dual_form else (P, D, gap, best)


def _hand_back(rset, problem, block, row_coord, resident, counters):
    """The resident set's own record of the block and its counters, as the run left them."""
    rset.device.bytes_h2d = int(counters[3])
    if problem.sparse:
        used = int(np.count_nonzero(row_coord >= 0))
        rset.rows.coords = row_coord[:used].copy()
        rset.rows.indptr = block[0][: used + 1].copy()
        rset._indptr_dev = rset.rows.indptr
    else:
        rset.in_block = row_coord >= 0
        rset._coords_dev = None
