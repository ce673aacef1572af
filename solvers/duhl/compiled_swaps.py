"""DuHL with part of the data resident on the CPU, the round loop compiled.

The Python loop (:mod:`solvers.duhl.swaps`) spends ~0.4-1 ms of interpreter time per round (selection, swap
bookkeeping, a thread hand-off, a trace row): on a small problem most of the round. Here one compiled call runs many
rounds of the same algorithm:

1. the stale gaps are refreshed at the round's start state, which with the block's gaps of the last round gives that
   state's exact gap: a certified row. With refresh "auto", for the Lasso family with few coordinates, from dots
   <A_i, z> kept by the Gram matrix (a certified row at most every ROWS_EVERY rounds: solvers.duhl.gram); else
   only the oldest that fit the device's reads, a row of the memory's estimate, but on the certifier's schedule
   (solvers.duhl.stale_plan). Before the selection: on the CPU nothing would run beside it, and the selection
   sees them (the default experiment: 5 rounds to 1e-6 -> 3, when every other round re-chose the block it had
   just solved from gaps a round old);
2. the block is chosen from the gap memory by the policy's rule (gap: largest gap first, resident first on ties,
   filling the byte budget, few coordinates by their ranks: solvers.duhl.few_select; sequential; random);
3. a swap copies the coordinates that joined the block into the block's buffer (dense rows, or a CSR buffer
   compacted in place), counted as the resident set counts them (bytes of the joined coordinates, how many joined);
4. ``passes`` epochs over the block (its coordinates with a positive gap when shrinking), in the orders the Python
   loop draws (``cpu.shuffle`` from the same state: solvers.duhl.selection.stream), then the block's gaps at the new
   state.

With refresh="all" and the same selection it gives the Python loop's iterates, bytes, swaps and trace rows, bit
for bit (on the CPU with the data in RAM the Python loop refreshes before the selection too): the same kernels in
the same order, and the gap sum as NumPy sums (pairwise). :func:`routes` says when the DuHL solver uses this loop.
"""

import time

import numpy as np

from solvers.duhl import gram
from solvers.duhl.compiled_parts import (_block_gaps, _clock, _form, _hand_back, _now, _proof_arrays, _row,
                                         _select, _swap_in, loop_kernel as _loop_kernel)
from solvers.duhl.few_select import NO_BITS, _few_block, _fit
from solvers.duhl.block_select import NO_HINT, PROBE, _next_block
from solvers.duhl.gram import (G_AT, G_COST, G_EPOCHS, G_EVERY, G_ON, G_SINCE, G_START_GAP, G_WORK, _gram_block_end,
                               _gram_epoch, _round_certify)
from solvers.duhl.gap_memory import MARGIN, ROUNDING, _proven, _step
from solvers.duhl.gap_select import FEW
from solvers.duhl.round_pass import SORT_FEW, _bits_pass, _round_lists, _round_pass, _stale_runs
from solvers.duhl.inmemory import _epoch
from solvers.duhl.selection import stream
from solvers.duhl.stale_plan import A_BUDGET, A_ESTIMATE, A_ON, _start_row, auto_state
from solvers.duhl.swaps import MAX_PASSES_PER_ROUND, _child, refresh_first, round_epochs
from solvers.glm.certificates import tight_lasso
from solvers.glm.models import shrink_cut
from solvers.kernels import cpu

POLICIES = {"gap": 0, "sequential": 1, "random": 2}
# proofs (solvers.duhl.gap_memory) run when their dual step's reads of u (three a round) are at most this
# share of the stale data they may spare a round; measured at memory_budget 0.25: w8a[20000] dual SVM (u:
# 2.4 KB) 18% less CPU to 1e-6, w8a[20000] Lasso (u: 160 KB, 0.23) even, diabetes (3.5 KB, 0.4) 19% more
PROOF_SHARE = 0.1
# rows a slice can record before it returns (a row per round at most; a return costs their Python,
HISTORY = 4096  # a few us each): enough for a slice's rounds on small problems
# a benchmark's np.zeros(len(PARTS)) times every compiled swap loop's parts (wall clock, in cycles:
CLOCK = None  # compiled_parts.cycles_per_second), np.zeros(len(PARTS) + 1) the thread's CPU seconds
# the slice's deadline read (~30 ns) every CLOCK_EVERY rounds while they take < SHORT_ROUNDS_S in all
CLOCK_EVERY, SHORT_ROUNDS_S = 16, 20e-6  # (diabetes's rounds: ~1 us), else every round
_NO_CLOCK = np.zeros(0)


def routes(solver, problem, rset):
    """Whether DuHL runs this loop: the data in RAM on device "cpu", no staging memory (prefetch 0: nothing to
    overlap on a CPU), a gap, sequential or random selection, refresh "all" or "auto" (solvers.duhl.stale_plan).
    Side by side (pipelines.bench.swap_loop --full) it took less time than the Python loop on every problem of
    ``make bench`` at memory_budget 0.05, 0.25 and 0.5 (README, "Where a round of DuHL spends its time")."""
    return (solver.device == "cpu" and not problem.on_disk and not rset.staging_bytes
            and solver.selection in POLICIES and solver.refresh in ("all", "auto"))


# where run_swap_slice's time goes (its ``clock``): the kernels (the swap's copies, the stale gaps with the
# certificate, the epochs, the block's gaps); outside them the selection, "other" (bookkeeping), "block lists"
# (round_pass's, and the stale gaps' list) and "round set-up" (working set, passes); "slice": the compiled calls' time
PARTS = ("selection", "swap", "stale gaps and certificate", "epochs", "block gaps", "other", "block lists",
         "round set-up", "slice")


@_loop_kernel(inline="always")
def _lap(clock, part, t, timed):
    """Time since ``t`` added to ``clock[part]``; the clock now."""
    if not timed:
        return 0.0
    now = _clock(timed)
    clock[part] += now - t
    return now


@_loop_kernel(inline="always")
def _lap_total(clock, code, t_start, timed):
    """The slice's time added to its entry; returns ``code``."""
    if timed:
        clock[len(PARTS) - 1] += _clock(timed) - t_start
    return code


@_loop_kernel
def run_swap_slice(A, B, row_coord, pos, coord_bytes, budget, policy, a, z, off, mu, sqnorm, c, b, theta,
                   tight, l1, carry_dual, tol_abs, max_updates, deadline, local_epochs, max_passes, shrinking,
                   orders, picks, gaps, s, resident, counters, history, iterates, clock, proof, proof_arrays, gram,
                   auto, first):
    """Rounds until a certified tolerance, ``max_updates``, ``deadline`` (perf_counter seconds) or a full
    ``history``. Carried between calls: the block (B, row_coord, pos: each coordinate's row or -1), the gap memory
    (gaps, s), ``resident`` and ``counters`` (updates, rounds, swaps, bytes moved, rows of this slice, rows of the
    run, sequential cursor, dual_best, 2: no gap known yet (the first call's row 0 comes from a full pass), 1: every
    gap fresh, 0: the last round's block's). Each history row (see _row) is a round's start state; ``iterates``
    receives a copy of a at the first rows of the run. ``proof`` = (proving, centred) and ``proof_arrays`` = (norms,
    |mu|, path, at, proven, z scratch): the gap memory's proofs (proving False: none; see solvers.duhl.gap_memory),
    carried between calls. ``gram`` = (G, dots, a_ref, gstate): the Gram matrix of the coordinates and its state
    (see _round_certify; gstate[G_ON] 0: none, every stale gap read from the data), and ``auto`` refresh "auto"'s
    plan and certifier (see solvers.duhl.stale_plan), carried between calls; ``first``: the stale gaps refreshed
    before the selection, else after it (swaps.refresh_first). ``clock``
    accumulates where the rounds' time goes, by PARTS (when it has that many entries; the thread's CPU time with one
    more; else nothing is timed). Returns status: 1 converged, 2 max_updates, 3 deadline or full history, 4 the
    round to build the Gram matrix (gstate[G_AT])."""
    n = a.shape[0]
    chosen, keys = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint64)
    keep = np.zeros(n, dtype=np.bool_)
    fresh = np.zeros(n, dtype=np.bool_)  # with G: the last block's mask, whose gaps are not stale
    joined, visit, order = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    stale = np.empty(n + 1, dtype=np.int64)  # + 1: the round's pass writes one past a list the proofs made
    positions = np.empty(row_coord.shape[0], dtype=np.int64)
    block = np.empty(n + 1, dtype=np.int64)  # + 1: the pass below writes one past the block
    out_g, out_s = np.empty(n), np.empty(n)
    t_gram = np.empty(n)  # the block's <A_i, z> in its epochs from G (gram.py)
    timed = 0 if clock.shape[0] < len(PARTS) else (2 if clock.shape[0] > len(PARTS) else 1)
    proving, centred = proof
    norms, mu_abs, path, at, proven, z_old = proof_arrays
    G, dots, a_ref, gstate = gram
    everyone = np.arange(n)
    fit = _fit(coord_bytes, budget)
    zero_off, shift_old, m = np.zeros(1), 0.0, -1  # m: the block's size (block[:m]); -1: not listed yet
    model, gram_dots = (mu, c, b, theta, tight, l1, carry_dual), (dots, a_ref, zero_off, gstate)  # (_start_row's)
    proofs, rows = (proving, path, at), (history, iterates)
    n_stale, stale_ready = 0, False  # stale[:n_stale] listed for the round ahead (by the proofs)
    unread, read_at, hint = 1, _now(), NO_HINT  # how the last block came (block_select._next_block)
    t_start = _clock(timed) if timed else 0.0
    if counters[8] == 2.0:  # row 0: every gap at the start state (none fresh)
        gstate[G_SINCE] = gstate[G_EVERY]  # a data pass: the Gram's dots start there
        primal, dual, gap = _round_certify(A, G, everyone, everyone, fresh, a, z, off, mu, c, b, theta, tight, l1,
                                           carry_dual, gaps, s, counters, dots, a_ref, zero_off, gstate, out_g,
                                           out_s, tol_abs)
        _row(history, iterates, counters, a, primal, dual, gap, 0, 0, True)
        counters[8], gstate[G_START_GAP], auto[A_ESTIMATE] = 1.0, gap, gap
        _lap(clock, 2, t_start, timed)
        if gap <= tol_abs:
            return _lap_total(clock, 1, t_start, timed)
    while True:
        t = _clock(timed) if timed else 0.0
        if counters[8] == 0.0:  # the stale gaps: not in the last block, not proven
            if gstate[G_ON] == 1.0:  # with G: those not in the last block (a mask: ~0.2 us a round of w8a[20000])
                fresh[:] = resident
            elif not stale_ready:  # (else listed by the last round's proofs)
                n_stale = _stale_runs(block, m, resident, proven, proving, stale)
            t = _lap(clock, 6, t, timed)
            if first:  # (the plan: in the stale gaps' part)
                gap, full = _start_row(counters[1] + 1, A, G, everyone, stale[:n_stale], fresh, a, z, off, model, gaps,
                                       s, counters, gram_dots, out_g, out_s, tol_abs, auto, coord_bytes, joined, proofs,
                                       rows, resident)
                t = _lap(clock, 2, t, timed)
                if full and gap <= tol_abs:
                    return _lap_total(clock, 1, t_start, timed)
        # the block as the mask ``keep`` or the list ``chosen``; ``held``: the block that stayed
        # (block[:m], the resident mask, the buffers as they were: most rounds of w8a's dual SVM)
        held, listed = False, True
        by_bits, bits, was = False, NO_BITS, NO_BITS  # a few coordinates' new and last block as bits
        if policy == 0:
            if n <= FEW:  # by their ranks or the fit-th gap (few_select), unless a gap is NaN
                k, held, listed, bits, was = _few_block(gaps, resident, coord_bytes, budget, fit, keep, m, order)
                by_bits = k >= 0
            if not by_bits:  # more than FEW coordinates, or a NaN gap
                k, held, listed, hint = _next_block(gaps, resident, coord_bytes, budget, keep, m, chosen, keys, order,
                                                    hint if counters[1] % PROBE else NO_HINT)
        else:
            k = _select(policy, gaps, resident, coord_bytes, budget, picks, int(counters[6]), chosen, order, keys)
        if policy == 1:
            counters[6] = (counters[6] + k) % n
        if listed:  # keep: the last block's mask when listed (m >= 0)
            keep[: n if m < 0 else 0] = False
            for j in range(max(m, 0)):
                keep[block[j]] = False
            n_in = 0
            for j in range(k):
                keep[chosen[j]] = True
                n_in += resident[chosen[j]]
            held = n_in == k and k == m
        t = _lap(clock, 0, t, timed)
        n_joined, moved, m_was = 0, 0, m  # the block, those that join it, the resident mask
        if not held:
            if by_bits:  # its work: the block's and the changes' size (diabetes at budget 0.25: ~30 -> ~15 ns)
                m, n_joined, moved = _bits_pass(bits, was, resident, coord_bytes, block, joined)
            elif m >= 0 and n > SORT_FEW:  # the last block listed: O(k + m) (a few coordinates: one pass)
                m, n_joined, moved = _round_lists(keep, chosen, k, listed, resident, coord_bytes, block, m, joined)
            else:
                m, n_joined, moved = _round_pass(keep, resident, coord_bytes, block, joined)
            held = n_joined == 0 and m == m_was  # none joined, as many: the same block (buffers, rows as they were)
        counters[2] += n_joined
        counters[3] += moved
        t = _lap(clock, 6, t, timed)
        if not held:
            _swap_in(A, B, row_coord, pos, keep, joined, n_joined)
        t = _lap(clock, 1, t, timed)
        cut = 0.0  # or a small share of the block's gap (logistic)
        if shrink_cut(theta) > 0.0:
            for j in range(m):
                cut += gaps[block[j]]
            cut = shrink_cut(theta) * cut / max(1, k)
        n_gap, planning, block_bytes, gap_bytes = 0, auto[A_ON] == 1.0, 0, 0  # gaps above the cut; a plan's bytes
        for j in range(m):
            i = block[j]
            if not held:  # else as they were
                positions[j] = pos[i]
            visit[n_gap] = positions[j]
            n_gap += gaps[i] > cut
            if planning:
                block_bytes += coord_bytes[i]
                gap_bytes += coord_bytes[i] if gaps[i] > cut else 0
        use_gap = shrinking and 0 < n_gap < k  # a working set inside the block
        n_active = n_gap if use_gap else m
        passes = local_epochs * (1 if n_active >= k else min(max_passes, k // max(1, n_active)))
        for j in range(m if n_gap < m and not use_gap else 0):  # (else visit is positions already)
            visit[j] = positions[j]
        counters[1] += 1
        auto[A_BUDGET] = passes * (gap_bytes if use_gap else block_bytes) + block_bytes  # the plan (stale_plan)
        t = _lap(clock, 7, t, timed)
        if counters[8] == 0.0 and not first:  # refreshed after the selection (swaps.refresh_first)
            gap, full = _start_row(counters[1], A, G, everyone, stale[:n_stale], fresh, a, z, off, model, gaps, s,
                                   counters, gram_dots, out_g, out_s, tol_abs, auto, coord_bytes, joined, proofs, rows,
                                   resident)
            t = _lap(clock, 2, t, timed)
            if full and gap <= tol_abs:
                return _lap_total(clock, 1, t_start, timed)
        on_gram = gstate[G_ON] == 1.0 and gstate[G_EPOCHS] > 0 and counters[8] == 0.0  # fresh dots: epochs from G
        passes *= int(gstate[G_EPOCHS]) if on_gram else 1
        if proving:
            z_old[:] = z
            shift_old = c * off[0] * z.shape[0]
        for j in range(m if on_gram else 0):
            t_gram[block[j]] = dots[block[j]]
        for _ in range(passes):  # the epoch's order as the Python loop draws it: a copy, shuffled
            order[:n_active] = visit[:n_active]
            cpu.shuffle(order[:n_active], orders)
            if on_gram:
                counters[0] += _gram_epoch(G, row_coord, order[:n_active], block[:m], a, off, mu, sqnorm, c, theta,
                                           t_gram, z.shape[0])
            else:
                counters[0] += _epoch(B, row_coord, order[:n_active], a, z, off, mu, sqnorm, c, theta)
        t = _lap(clock, 3, t, timed)
        # the block's gaps at the new state (the others are stale now)
        if on_gram:  # z moves by the block's moves, its gaps from t_gram
            _gram_block_end(B, positions[:m], block[:m], a, a_ref, z, off, mu, c, theta, t_gram, gaps, s)
        else:
            _block_gaps(B, positions[:m], block[:m], a, z, off, mu, c, theta, out_g[:m], out_s[:m])
            for j in range(m):
                gaps[block[j]] = out_g[j]
                s[block[j]] = out_s[j]
        counters[8] = 0.0
        if proving:  # how far u moved; the gaps outside the block it proves 0 (GapMemory.moved); the
            u_norm = _step(z_old, z, shift_old, c * off[0] * z.shape[0], centred, path)  # others: next round's stale
            n_stale = 0
            for i in range(n):
                if keep[i]:
                    at[i, 0], at[i, 1] = path[0], path[1]
                    proven[i] = False
                else:
                    proven[i] = _proven(theta, a[i], s[i], norms[i], mu_abs[i], path, at[i], u_norm, MARGIN,
                                        ROUNDING)
                    if proven[i]:
                        gaps[i] = 0.0
                    else:
                        stale[n_stale] = i
                        n_stale += 1
            stale_ready = True
        t = _lap(clock, 4, t, timed)
        if counters[0] >= max_updates:
            return _lap_total(clock, 2, t_start, timed)
        if counters[4] >= history.shape[0]:
            return _lap_total(clock, 3, t_start, timed)
        unread -= 1
        if unread <= 0:  # the deadline: a clock reading (~30 ns) every CLOCK_EVERY rounds while they are short
            now = _now()
            if now >= deadline:
                return _lap_total(clock, 3, t_start, timed)
            unread, read_at = CLOCK_EVERY if now - read_at < SHORT_ROUNDS_S else 1, now
        if gstate[G_AT] > 0.0 and counters[1] >= gstate[G_AT]:
            return _lap_total(clock, 4, t_start, timed)


def solve_compiled_swaps(solver, problem, rset, a, z, off, rng, trace, t0, iterates, slice_s=0.2, clock=None):
    """The loop of :class:`solvers.duhl.solver.DuHL` with the resident set ``rset`` (whose
    buffers hold the block), compiled; as :func:`solvers.duhl.swaps.solve_with_swaps`.
    ``clock``: an array of len(PARTS) seconds to add the loop's time to, by part (a benchmark's;
    None: CLOCK, usually None: untimed). Returns (status, rounds, (updates, best dual value))."""
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
    history = np.empty((HISTORY, 10))
    # the epochs' orders and the random policy's picks, as the Python loop draws them: xorshift states, not
    # Generators (a Generator argument costs ~7 us a call to unbox)
    orders = stream(rng)
    picks = stream(_child(rng)) if solver.selection == "random" else orders

    def record(rnd, time_s, updates, P_form, D_form, gap, bytes_h2d, swaps, n_resident, certified=1):
        """Trace rows from a slice's history columns (or one row's scalars)."""
        primal, dual = (-D_form, -P_form) if problem.dual_form else (P_form, D_form)
        count = lambda x: np.asarray(x).astype(np.int64)  # noqa: E731 - the counters are float64 there
        trace.extend(round=count(rnd), time_s=time_s, epoch=np.divide(updates, n), primal=primal, dual=dual, gap=gap,
                     rel_gap=np.divide(gap, problem.P0) if problem.P0 > 0 else np.zeros_like(gap),
                     certified=count(certified), bytes_h2d=count(bytes_h2d), swaps=count(swaps),
                     n_resident=count(n_resident), prefetch_hits=0, bytes_prefetched=0)

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
    epochs = round_epochs(solver.local_epochs)
    loop_params = (epochs, int(MAX_PASSES_PER_ROUND), bool(solver.shrinking))
    tight, l1, carry, tol_abs = bool(tight), float(l1), bool(carry), float(tol_abs)
    clock = clock if clock is not None else (CLOCK if CLOCK is not None else _NO_CLOCK)
    # the gap memory's proofs, with refresh "auto" ("all" computes every gap: nothing to prove, the kernels'
    # values decide the selection, as in the Python loop), where they pay: their dual step reads u (PROOF_SHARE)
    stale_bytes = int(coord_bytes.sum()) - int(rset.capacity_bytes)
    pays = 3 * z.nbytes <= PROOF_SHARE * stale_bytes
    # the Gram matrix (built in the solve, after gstate[G_AT] rounds, or at once) and its state (see
    # _round_certify); the proofs stop when it is built
    gstate = np.zeros(gram.G_SIZE)
    gstate[G_EVERY], gstate[G_EPOCHS] = float(gram.ANCHOR_EVERY), float(gram.GRAM_EPOCHS)
    gstate[gram.G_ROWS_EVERY] = float(gram.rows_every(problem, rset.capacity_bytes))
    gram_state = (np.zeros((0, 0)), np.zeros(n), a.copy(), gstate)
    if gram.uses_gram(solver, problem):
        gstate[G_AT] = max(1, gram.gram_after(problem, stale_bytes / max(1, int(coord_bytes.sum()))))
        gstate[G_COST], gstate[G_WORK] = gram.gram_cost(problem), gram.stale_entries(problem, stale_bytes)
    at_once = 0 < gstate[G_AT] <= gram.GRAM_AT_ONCE
    proving = not at_once and solver.refresh == "auto" and pays and problem.model.zero_gap is not None
    proof, proof_arrays = (bool(proving), bool(problem.mu.any())), _proof_arrays(problem, z.shape[0], proving)
    if at_once:
        gram_state, proof = gram.gram_now(problem, a, gram_state, proof, proof_arrays)
    # refresh "auto" plans its refreshes where no Gram matrix keeps the stale gaps (solvers.duhl.stale_plan)
    auto = auto_state(solver.refresh == "auto" and not gram.uses_gram(solver, problem))
    status = None
    while status is None:
        deadline = time.perf_counter() + slice_s
        if solver.max_time is not None:
            deadline = min(deadline, t0 + solver.max_time)
        counters[4] = 0
        code = run_swap_slice(full, block, row_coord, pos, coord_bytes, *scalars, a, z, off, problem.mu, problem.sqnorm,
                              problem.c, problem.b, problem.theta, tight, l1, carry, tol_abs, max_updates, deadline,
                              *loop_params, orders, picks, gaps, s, resident, counters, history, iterates, clock,
                              proof, proof_arrays, gram_state, auto, refresh_first(solver, problem))
        if counters[4]:
            t, updates, P, D, gap, rnd, bytes_h2d, swaps, n_resident, certified = history[: int(counters[4])].T
            record(rnd, t - t0, updates, P, D, gap, bytes_h2d, swaps, n_resident, certified)
        if code == 1:
            status = "converged"
        elif code == 2:
            status = "max_epochs"
        elif code == 4:
            gram_state, proof = gram.gram_now(problem, a, gram_state, proof, proof_arrays)
        elif solver.max_time is not None and time.perf_counter() - t0 >= solver.max_time:
            status = "max_time"
    _hand_back(rset, problem, block, row_coord, resident, counters)
    if status != "converged":  # the last round's end state: one more pass certifies it
        certify_here(counters[1], counters[0], counters[2], np.count_nonzero(resident))
    return status, int(counters[1]), (float(counters[0]), counters[7])
