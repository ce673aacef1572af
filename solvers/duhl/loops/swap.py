"""DuHL with part of the data resident on the CPU, in RAM: the round loop compiled.

The Python loop (:mod:`solvers.duhl.loops.python`) spends interpreter time on every round
(selection, swap bookkeeping, a trace row): on a small problem most of the round. Here one
compiled call runs many rounds of the same algorithm:

1. the stale gaps are refreshed at the round's start state, which with the block's gaps of the last
   round gives that state's exact gap: a certified row. With refresh "auto", for the Lasso family
   with few coordinates, from dots <A_i, z> kept by the Gram matrix (:mod:`solvers.duhl.accel.gram`;
   a certified row at most every ROWS_EVERY rounds); else only the oldest that fit the device's
   reads, a row of the memory's estimate, but on the certifier's schedule
   (:mod:`solvers.duhl.gaps.memory`). For the Lasso family before the selection, which then sees
   them (:func:`solvers.duhl.loops.rounds.refresh_first`);
2. the block is chosen from the gap memory by the policy's rule (gap: :mod:`solvers.duhl.block.gap_block`;
   sequential; random);
3. a swap copies the coordinates that joined the block into the block's buffer (dense rows, or a
   CSR buffer compacted in place), counted as the resident set counts them;
4. ``passes`` epochs over the block (its coordinates with a positive gap when shrinking), in the
   orders the Python loop draws (``cpu.shuffle`` from the same state), then the block's gaps.

With refresh="all" (and with "auto" when both prove the same gaps and no Gram matrix is used) it
gives the Python loop's iterates, bytes, swaps and trace rows, bit for bit: the same kernels in the
same order, and the gap sum as NumPy sums (pairwise).
"""

import time
from typing import NamedTuple

import numpy as np
from numba.extending import overload

from solvers.duhl.accel import gram as gram_settings
from solvers.duhl.accel.gram import (GRAM_AT_ONCE, gram_after, gram_block_end, gram_cost, gram_epoch, gram_fits,
                                     gram_matrix, gram_pays, rows_every, stale_entries)
from solvers.duhl.budget import update_budget
from solvers.duhl.block.gap_block import block_keys, gap_block
from solvers.duhl.block.policies import child, stream
from solvers.duhl.gaps.memory import (certified, certify_due, dual_step, new_plan, plan_refresh, proven)
from solvers.duhl.gaps.schedule import rounds_left
from solvers.duhl.loops import driver
from solvers.duhl.loops.driver import BUILD_GRAM, CONVERGED, MAX_UPDATES, SLICE_END, pairwise_sum, write_row
from solvers.duhl.loops.rounds import MAX_PASSES_PER_ROUND, refresh_first, round_epochs
from solvers.glm.certificates import certificate
from solvers.glm.models import coord_gap, shrink_cut
from solvers.kernels import cpu
from solvers.kernels.cache import compiled
from solvers.kernels.layouts import epoch, gaps_of, is_csr

POLICIES = {"gap": 0, "sequential": 1, "random": 2}
GAP, SEQUENTIAL, RANDOM = 0, 1, 2
# proofs run ("auto") when their dual step's reads of u (three a round) are at most this share of
# the stale data they may spare a round (docs/explanation/design-decisions/round-loop.md)
PROOF_SHARE = 0.1
# what the memory knows at a round's start: no gap yet (row 0 comes first), every gap (after row 0),
# or the last block's gaps only (the others stale)
NONE_KNOWN, ALL_KNOWN, BLOCK_KNOWN = 2, 1, 0

STATE = np.dtype([
    ("updates", np.float64),     # coordinate updates
    ("rounds", np.int64),
    ("swaps", np.int64),         # coordinates that joined the block
    ("bytes_h2d", np.int64),     # their bytes
    ("rows", np.int64),          # rows of this slice
    ("kept", np.int64),          # rows of the run
    ("cursor", np.int64),        # the sequential policy's
    ("dual_best", np.float64),
    ("known", np.int64),         # NONE_KNOWN, ALL_KNOWN or BLOCK_KNOWN
    ("m", np.int64),             # the block: block[:m] (coordinate order), -1 before the first
    ("n_stale", np.int64),       # stale[:n_stale], listed for the round ahead by the proofs
    ("stale_listed", np.bool_),
    ("shift_old", np.float64),   # c off m at the round's start (the proofs' dual step)
    ("slice_end", np.float64),   # the updates at which this slice ends
])

GRAM = np.dtype([
    ("on", np.bool_),            # G built: the stale gaps' dots come from it
    ("anchor_every", np.float64),  # certified rows between two data passes that re-anchor the dots
    ("epochs", np.float64),      # the block's epochs from G per epoch from the data (0: from the data)
    ("build_at", np.float64),    # the round after which the slice returns to build G (0: never)
    ("since", np.float64),       # certified rows since the last anchor (a data pass)
    ("drift", np.float64),       # the largest drift of G's dots from the data's at an anchor
    ("anchors", np.float64),
    ("gram_rows", np.float64),   # certified rows from G's dots
    ("rows_every", np.float64),  # at most this many rounds between rows
    ("skip", np.float64),        # rounds left without a row
    ("calls", np.float64),       # certificates asked for
    ("row_at", np.float64),      # the last row's call, and its gap
    ("row_gap", np.float64),
    ("start_gap", np.float64),   # row 0's gap (round 0): the rate's start
    ("cost", np.float64),        # G's cost and a round's stale reads, in entries
    ("work", np.float64),
])


class Settings(NamedTuple):
    budget: int
    policy: int
    tol_abs: float
    max_updates: float
    local_epochs: int
    max_passes: int
    shrinking: bool
    first: bool         # the stale gaps refreshed before the selection, else after it
    proving: bool       # the gap memory's proofs
    centred: bool       # an intercept: u moves by its mean too
    curv: float         # Problem.step_curvature (the gap block's keys)


class Buffers(NamedTuple):
    """The block (``row_coord``: the coordinate row r holds, -1 none; ``pos``: each coordinate's
    row, -1 none; ``block[:m]``, coordinate order), the gap memory (``gaps``, ``s``; ``resident``
    mask), the proofs' memory (||A_i|| centred, |mu_i|, the dual path, its length when each s_i was
    computed, which are proven), the epochs' and the random policy's streams; and scratch."""
    row_coord: np.ndarray
    pos: np.ndarray
    block: np.ndarray
    gaps: np.ndarray
    s: np.ndarray
    resident: np.ndarray
    stale: np.ndarray
    norms: np.ndarray
    mu_abs: np.ndarray
    path: np.ndarray
    at: np.ndarray
    proven: np.ndarray
    z_old: np.ndarray
    orders: np.ndarray
    picks: np.ndarray
    keep: np.ndarray
    fresh: np.ndarray
    joined: np.ndarray
    visit: np.ndarray
    order: np.ndarray
    positions: np.ndarray
    chosen: np.ndarray
    keys: np.ndarray
    cand: np.ndarray
    out_g: np.ndarray
    out_s: np.ndarray
    t_gram: np.ndarray
    everyone: np.ndarray
    zero_off: np.ndarray
    rank: np.ndarray             # the gap block's keys


# ------------------------------------------------------------------- the block's buffer ---
def _swap_in(A, B, row_coord, pos, keep, joined, n_joined):
    """Make the block B hold the coordinates with ``keep`` set: rows of the others leave,
    ``joined[:n_joined]`` are copied in from A."""


@overload(_swap_in)
def _swap_in_for(A, B, row_coord, pos, keep, joined, n_joined):
    if is_csr(B):
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
                if fill < lo:  # fill <= lo: copying forward never overwrites a source (equal: in place)
                    for e in range(lo, hi):
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
                src_i, src_d = A[1][lo:hi], A[2][lo:hi]  # slices, then a loop from 0: a tight copy
                dst_i, dst_d = bind[fill:fill + hi - lo], bdat[fill:fill + hi - lo]
                for e in range(hi - lo):
                    dst_i[e] = src_i[e]
                    dst_d[e] = src_d[e]
                fill += hi - lo
                row_coord[rows] = i
                pos[i] = rows
                rows += 1
                bptr[rows] = fill
            row_coord[rows:] = -1
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
                src = A[0][joined[k]]
                for e in range(rows.shape[1]):  # an element loop: a slice assignment costs more
                    rows[r, e] = src[e]
                row_coord[r] = joined[k]
                pos[joined[k]] = r
                k += 1
        for r in range(row_coord.shape[0]):
            i = row_coord[r]
            if i >= 0 and not keep[i]:  # left the block, no one took its row
                pos[i] = -1
                row_coord[r] = -1
    return dense


@compiled
def _round_pass(keep, resident, coord_bytes, block, joined):
    """The new block ``keep`` in coordinate order (as the resident set visits it) into ``block``,
    those that join it into ``joined``, ``resident`` set to ``keep``; branch-free (which coordinates
    are in the block is unpredictable). Returns (the block's size, how many join, their bytes)."""
    m, n_joined, moved = 0, 0, 0
    for i in range(keep.shape[0]):
        r, kept = resident[i], keep[i]
        block[m] = i
        m += kept
        new = kept & (not r)
        joined[n_joined] = i
        n_joined += new
        moved += coord_bytes[i] if new else 0
        resident[i] = kept
    return m, n_joined, moved


@compiled
def _fill(order, m, coord_bytes, budget, chosen):
    """The longest prefix of ``order[:m]`` that fits ``budget`` into ``chosen``; its length."""
    used, k = 0, 0
    while k < m and used + coord_bytes[order[k]] <= budget:
        used += coord_bytes[order[k]]
        chosen[k] = order[k]
        k += 1
    return k


@compiled
def _ordered_block(policy, n, coord_bytes, budget, picks, cursor, chosen, order):
    """The sequential (round robin from the cursor) or random (from the policy's stream) block
    into ``chosen``: the longest prefix of the policy's order that fits; its size."""
    if policy == SEQUENTIAL:
        for i in range(n):
            order[i] = (i + cursor) % n
    else:
        for i in range(n):
            order[i] = i
        cpu.shuffle(order, picks)
    return _fill(order, n, coord_bytes, budget, chosen)


# ---------------------------------------------------------------- the round's certificate ---
@compiled
def _state_row(a, z, off, form, gaps, s, st):
    """(P_form, D_form, gap) of the state whose every gap and s are in ``gaps`` and ``s``; the
    best dual value of the rows carried in ``st``."""
    s_max = 0.0
    for i in range(gaps.shape[0]):
        s_max = max(s_max, abs(s[i]))
    primal, dual, gap, st.dual_best = certificate(form.theta, z, off, form.c, form.b, cpu.sum_g(a, form.theta),
                                                  pairwise_sum(gaps), s_max if form.tight else 0.0, form.l1,
                                                  form.tight, st.dual_best if form.carry_dual else -np.inf)
    return primal, dual, gap


@compiled
def _gram_schedule(gram, gap, tol_abs):
    """The rounds until the next row from G (gram.skip) after a row of ``gap``: half those the rate
    since the last row predicts to ``tol_abs``, at most rows_every - 1; rows_every - 1 when the gap
    did not fall, 0 after the first row."""
    last, since = gram.row_gap, gram.calls - gram.row_at
    skip = 0.0
    if last > 0.0 and since > 0.0:
        skip = gram.rows_every - 1.0
        if gap > tol_abs:
            left = rounds_left(0.0, last, since, gap, tol_abs)
            if left == left:
                skip = min(skip, np.floor(0.5 * left) - 1.0)
    gram.skip = max(0.0, skip)
    gram.row_at, gram.row_gap = gram.calls, gap


@compiled
def _round_certify(A, G, dots, a_ref, gram, stale, fresh, a, z, off, form, st, buf, tol_abs):
    """The round's certificate. Without G the ``stale`` gaps from the data, then the state's row.
    With G, those not ``fresh`` (a mask: the last block's) from ``dots`` (dots_i = <A_i, z> at the
    state a_ref) brought to the state a by G: z moved by c (a_j - a_ref_j) A_j for every j updated
    since, so dots_i moves by c (a_j - a_ref_j) G[j, i]. Every ANCHOR_EVERY rows, and for a row at
    or below tol_abs (the row that stops the solve), the dots are read from the data instead (every
    gap, the block's too), and how far G's dots had drifted is kept. A row comes when the schedule
    says so; a round without one refreshes the stale gaps alone (returns (nan, nan, inf))."""
    c, mu, theta = form.c, form.mu, form.theta
    gaps, s, out_g, out_s = buf.gaps, buf.s, buf.out_g, buf.out_s
    if not gram.on:
        n_stale = stale.shape[0]
        gaps_of(A, stale, stale, a, z, off, mu, c, theta, out_g[:n_stale], out_s[:n_stale])
        for j in range(n_stale):
            gaps[stale[j]] = out_g[j]
            s[stale[j]] = out_s[j]
        return _state_row(a, z, off, form, gaps, s, st)
    n = a.shape[0]
    for j in range(n):
        d = a[j] - a_ref[j]
        if d != 0.0:
            cd = c * d
            for i in range(n):
                dots[i] += cd * G[j, i]
            a_ref[j] = a[j]
    gram.calls += 1.0
    due = gram.skip <= 0.0  # else the stale gaps only, and no certificate
    gram.skip -= 0.0 if due else 1.0
    carried = st.dual_best
    anchor = due and gram.since + 1.0 >= gram.anchor_every
    while True:
        if anchor:
            everyone = buf.everyone
            gaps_of(A, everyone, everyone, a, z, buf.zero_off, mu, c, theta, out_g, out_s)  # out_s: <A_i, z>
            top, diff = 0.0, 0.0
            for i in range(n):
                top = max(top, abs(out_s[i]))
                diff = max(diff, abs(out_s[i] - dots[i]))
                dots[i] = out_s[i]
            if gram.anchors > 0 and top > 0:
                gram.drift = max(gram.drift, diff / top)
            gram.anchors += 1
            gram.since = 0.0
        elif due:
            gram.since += 1.0
            gram.gram_rows += 1.0
        shift = c * off[0] * z.shape[0]
        for i in range(n):  # an anchor: the block's gaps from the data too
            if anchor or not fresh[i]:
                s[i] = dots[i] - shift * mu[i]
                gaps[i] = coord_gap(theta, a[i], s[i])
        if not due:
            return np.nan, np.nan, np.inf
        primal, dual, gap = _state_row(a, z, off, form, gaps, s, st)
        if anchor or gap > tol_abs:
            _gram_schedule(gram, gap, tol_abs)
            return primal, dual, gap
        st.dual_best = carried  # the stopping row's dual point from the data, not from G's dots
        anchor = True


@compiled
def _start_row(rnd, A, G, dots, a_ref, gram, stale, a, z, off, form, cfg, plan, coord_bytes, st, buf, history,
               iterates):
    """Round ``rnd``'s start state: the ``stale`` gaps refreshed, all of them (with the block's,
    its certificate) or refresh "auto"'s plan (the oldest that fit plan.budget: a row of the
    memory's estimate), then its row. Returns (the gap, whether it is certified)."""
    full, todo = True, stale
    if plan.planning:
        full = certify_due(plan, rnd, stale, coord_bytes, cfg.tol_abs)
        if not full:
            todo = buf.joined[: plan_refresh(stale, coord_bytes, plan.budget, plan, buf.joined)]
    path, at = buf.path, buf.at
    for j in range(todo.shape[0] if cfg.proving else 0):  # refreshed at u's path now
        at[todo[j], 0], at[todo[j], 1] = path[0], path[1]
    carried = st.dual_best
    if not full:
        st.dual_best = -np.inf  # an estimate: its own dual point ...
    primal, dual, gap = _round_certify(A, G, dots, a_ref, gram, todo, buf.fresh, a, z, off, form, st, buf,
                                       cfg.tol_abs)
    if not full:
        st.dual_best = carried  # ... that never feeds the best dual value
    if gap < np.inf:  # a row (with G, not every round)
        write_row(history, st.rows, iterates, st.kept, a, st.updates, primal, dual, gap, rnd - 1, st.bytes_h2d,
                  st.swaps, np.sum(buf.resident), full)
        st.rows += 1
        st.kept += 1
        if not gram.on and gram.build_at > rnd and gram_pays(gram.cost, 0.0, gram.start_gap, rnd, gap, cfg.tol_abs,
                                                           gram.work):
            gram.build_at = rnd  # a long solve builds G in its first rounds, not after as many reads as G costs
        plan.estimate = gap
    if full and plan.planning:
        certified(plan, rnd)
    return gap, full


# ------------------------------------------------------------------------ the loop ---
@compiled
def run_swap_slice(A, B, coord_bytes, a, z, off, form, cfg, st, buf, plan, gram, cov, history, iterates):
    """Rounds until a certified tolerance, ``cfg.max_updates``, the slice's end (``st.slice_end``
    updates), a full ``history``, or the round to build G (``gram.build_at``). ``A``: the data, ``B``:
    the block's buffer; ``st``, ``buf``, ``plan`` (refresh "auto"'s plan and certifier), ``gram`` and
    ``cov`` = (G, dots, a_ref) carry the loop between slices. Each history row is a round's start
    state. Returns how the slice ended: CONVERGED, MAX_UPDATES, SLICE_END or BUILD_GRAM."""
    n = a.shape[0]
    G, dots, a_ref = cov
    c, mu, sqnorm, theta = form.c, form.mu, form.sqnorm, form.theta
    gaps, s, resident, keep, block, stale = buf.gaps, buf.s, buf.resident, buf.keep, buf.block, buf.stale
    row_coord, pos, visit, order, positions = buf.row_coord, buf.pos, buf.visit, buf.order, buf.positions
    everyone = buf.everyone
    if st.known == NONE_KNOWN:  # row 0: every gap at the start state (none fresh)
        gram.since = gram.anchor_every  # a data pass: the dots start there
        primal, dual, gap = _round_certify(A, G, dots, a_ref, gram, everyone, buf.fresh, a, z, off, form, st, buf,
                                           cfg.tol_abs)
        write_row(history, st.rows, iterates, st.kept, a, st.updates, primal, dual, gap, 0, st.bytes_h2d, st.swaps,
                  0, 1)
        st.rows += 1
        st.kept += 1
        st.known, gram.start_gap, plan.estimate = ALL_KNOWN, gap, gap
        if gap <= cfg.tol_abs:
            return CONVERGED
    while True:
        if st.known == BLOCK_KNOWN:  # the stale gaps: not in the last block, not proven
            if gram.on:  # with G: those not in the last block (a mask)
                cpu.copy_to(resident, buf.fresh)
            elif not st.stale_listed:  # (else listed by the last round's proofs)
                n_stale = 0
                for i in range(n):
                    stale[n_stale] = i
                    n_stale += not (resident[i] | (cfg.proving and buf.proven[i]))
                st.n_stale = n_stale
            if cfg.first:
                gap, full = _start_row(st.rounds + 1, A, G, dots, a_ref, gram, stale[:st.n_stale], a, z, off, form,
                                       cfg, plan, coord_bytes, st, buf, history, iterates)
                if full and gap <= cfg.tol_abs:
                    return CONVERGED
        # the block: ``keep`` its mask; held: the block that stayed (block[:m] and the buffers as they were)
        m_was = st.m
        if cfg.policy == GAP:
            keys = block_keys(theta, gaps, a, s, sqnorm, cfg.curv, cfg.tol_abs, buf.rank)
            k, held = gap_block(keys, resident, coord_bytes, cfg.budget, keep, buf.chosen, buf.keys, buf.cand)
            if held and m_was < 0:  # (no block listed yet: the mask from the residents)
                cpu.copy_to(resident, keep)
                held = False
        else:
            k = _ordered_block(cfg.policy, n, coord_bytes, cfg.budget, buf.picks, st.cursor, buf.chosen, order)
            keep[:] = False
            n_in = 0
            for j in range(k):
                keep[buf.chosen[j]] = True
                n_in += resident[buf.chosen[j]]
            held = n_in == k and k == m_was
            if cfg.policy == SEQUENTIAL:
                st.cursor = (st.cursor + k) % n
        n_joined = 0
        if not held:
            m, n_joined, moved = _round_pass(keep, resident, coord_bytes, block, buf.joined)
            st.m = m
            st.swaps += n_joined
            st.bytes_h2d += moved
            held = n_joined == 0 and m == m_was  # none joined, as many: the same block (buffers as they were)
            if not held:
                _swap_in(A, B, row_coord, pos, keep, buf.joined, n_joined)
        m = st.m
        cut = 0.0  # or a small share of the block's gap (logistic)
        if shrink_cut(theta) > 0.0:
            for j in range(m):
                cut += gaps[block[j]]
            cut = shrink_cut(theta) * cut / max(1, k)
        n_gap, block_bytes, gap_bytes = 0, 0, 0  # gaps above the cut; the plan's bytes
        for j in range(m):
            i = block[j]
            if not held:  # else as they were
                positions[j] = pos[i]
            visit[n_gap] = positions[j]
            n_gap += gaps[i] > cut
            block_bytes += coord_bytes[i]
            gap_bytes += coord_bytes[i] if gaps[i] > cut else 0
        use_gap = cfg.shrinking and 0 < n_gap < k  # a working set inside the block
        n_active = n_gap if use_gap else m
        passes = cfg.local_epochs * (1 if n_active >= k else min(cfg.max_passes, k // max(1, n_active)))
        for j in range(m if n_gap < m and not use_gap else 0):  # (else visit is positions already)
            visit[j] = positions[j]
        st.rounds += 1
        plan.budget = passes * (gap_bytes if use_gap else block_bytes) + block_bytes  # the next plan's reads
        if st.known == BLOCK_KNOWN and not cfg.first:  # refreshed after the selection
            gap, full = _start_row(st.rounds, A, G, dots, a_ref, gram, stale[:st.n_stale], a, z, off, form, cfg, plan,
                                   coord_bytes, st, buf, history, iterates)
            if full and gap <= cfg.tol_abs:
                return CONVERGED
        on_gram = gram.on and gram.epochs > 0 and st.known == BLOCK_KNOWN  # fresh dots: the epochs from G
        passes *= int(gram.epochs) if on_gram else 1
        if cfg.proving:
            cpu.copy_to(z, buf.z_old)
            st.shift_old = c * off[0] * z.shape[0]
        for j in range(m if on_gram else 0):
            buf.t_gram[block[j]] = dots[block[j]]
        for _ in range(passes):  # the epoch's order as the Python loop draws it: a copy, shuffled
            left = min(n_active, int(cfg.max_updates - st.updates))  # the epoch budget: a last pass cut short
            if left <= 0:
                break
            cpu.copy_to(visit[:n_active], order)
            cpu.shuffle(order[:n_active], buf.orders)
            if on_gram:
                st.updates += gram_epoch(G, row_coord, order[:left], block[:m], a, off, mu, sqnorm, c, theta,
                                         buf.t_gram, z.shape[0])
            else:
                st.updates += epoch(B, row_coord, order[:left], a, z, off, mu, sqnorm, c, theta)
        # the block's gaps at the new state (the others are stale now)
        if on_gram:  # z moves by the block's moves, its gaps from t_gram
            gram_block_end(B, positions[:m], block[:m], a, a_ref, z, off, mu, c, theta, buf.t_gram, gaps, s)
        else:
            gaps_of(B, positions[:m], block[:m], a, z, off, mu, c, theta, buf.out_g[:m], buf.out_s[:m])
            for j in range(m):
                gaps[block[j]] = buf.out_g[j]
                s[block[j]] = buf.out_s[j]
        st.known = BLOCK_KNOWN
        st.stale_listed = False
        if cfg.proving:  # how far u moved; the gaps outside the block it proves 0; the others: next round's stale
            u_norm = dual_step(buf.z_old, z, st.shift_old, c * off[0] * z.shape[0], cfg.centred, buf.path)
            n_stale = 0
            for i in range(n):
                if resident[i]:
                    buf.at[i, 0], buf.at[i, 1] = buf.path[0], buf.path[1]
                    buf.proven[i] = False
                else:
                    buf.proven[i] = proven(theta, a[i], s[i], buf.norms[i], buf.mu_abs[i], buf.path, buf.at[i], u_norm)
                    if buf.proven[i]:
                        gaps[i] = 0.0
                    else:
                        stale[n_stale] = i
                        n_stale += 1
            st.n_stale, st.stale_listed = n_stale, True
        if st.updates >= cfg.max_updates:
            return MAX_UPDATES
        if gram.build_at > 0.0 and st.rounds >= gram.build_at:
            return BUILD_GRAM
        if st.rows >= history.shape[0] - 1 or st.updates >= st.slice_end:
            return SLICE_END


# ----------------------------------------------------------------------- the driver ---
def routes(solver, problem, rset):
    """Whether DuHL runs this loop: the data in RAM on device "cpu", no staging memory (prefetch 0:
    nothing to overlap on a CPU), a gap, sequential or random selection, refresh "all" or "auto"."""
    return (solver.device == "cpu" and not problem.on_disk and not rset.staging_bytes
            and solver.selection in POLICIES and solver.refresh in ("all", "auto"))


def uses_gram(solver, problem):
    """Whether the loop may keep the stale gaps' dots from the Gram matrix: DuHL's ``gram`` "auto"
    with refresh "auto" (with "all" every stale gap is read from the data: the Python loop's twin),
    or True; on the CPU, the Lasso family in RAM, G at most the data's bytes."""
    return (solver.gram is not False and solver.device == "cpu" and gram_fits(problem)
            and (solver.refresh == "auto" or solver.gram is True))


def _hand_back(rset, problem, block, row_coord, resident, st):
    """The resident set's own record of the block and its counters, as the run left them."""
    rset.device.bytes_h2d = int(st.bytes_h2d)
    if problem.sparse:
        used = int(np.count_nonzero(row_coord >= 0))
        rset.rows.coords = row_coord[:used].copy()
        rset.rows.indptr = block[0][: used + 1].copy()
        rset._indptr_dev = rset.rows.indptr
    else:
        rset.in_block = row_coord >= 0
        rset._coords_dev = None
        rset.reindex()


def _buffers(problem, rset, z, rng, selection, proving):
    n = problem.n_coords
    if problem.sparse:
        row_coord = np.full(n, -1, dtype=np.int64)
    else:
        row_coord = rset.row_coord
    orders = stream(rng)  # the epochs' orders, as the Python loop draws them
    picks = stream(child(rng)) if selection == "random" else orders
    if proving:
        norms, mu_abs, at, z_old = np.sqrt(problem.sqnorm), np.abs(problem.mu), np.zeros((n, 2)), np.empty(z.shape[0])
    else:
        norms, mu_abs, at, z_old = np.empty(0), np.empty(0), np.empty((0, 2)), np.empty(0)
    return Buffers(row_coord, np.full(n, -1, dtype=np.int64), np.empty(n + 1, dtype=np.int64), np.empty(n),
                   np.empty(n), np.zeros(n, dtype=bool), np.empty(n + 1, dtype=np.int64), norms, mu_abs, np.zeros(2),
                   at, np.zeros(n, dtype=bool), z_old, orders, picks, np.zeros(n, dtype=np.bool_),
                   np.zeros(n, dtype=np.bool_), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64),
                   np.empty(n, dtype=np.int64), np.empty(row_coord.shape[0], dtype=np.int64),
                   np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.int64),
                   np.empty(n), np.empty(n), np.empty(n), np.arange(n), np.zeros(1), np.empty(n))


def solve_swap(solver, problem, rset, a, z, off, rng, trace, t0, iterates):
    """The loop of :class:`solvers.duhl.solver.DuHL` with the resident set ``rset`` (whose buffers
    hold the block), compiled; as :func:`solvers.duhl.loops.python.solve_python`. Returns (status,
    rounds, updates, best dual value)."""
    n = problem.n_coords
    A = problem.A
    tol_abs = float(solver.tol * problem.P0)
    coord_bytes = problem.coord_bytes
    form = driver.form_of(problem)
    data = driver.data_of(A, problem.sparse)
    if problem.sparse:
        block = (np.zeros(n + 1, dtype=np.int64), rset.rows.indices, rset.rows.data)
    else:
        block = (rset.data,)
    total = int(coord_bytes.sum())
    stale_bytes = total - int(rset.capacity_bytes)
    # the Gram matrix (refresh "auto", the Lasso family, few coordinates): built after gram.build_at
    # rounds, or at once; the proofs stop when it is built
    gram = np.zeros(1, dtype=GRAM).view(np.recarray)[0]
    gram.rows_every = float(rows_every(problem, rset.capacity_bytes))
    gram.anchor_every = float(gram_settings.ANCHOR_EVERY)
    gram.epochs = float(gram_settings.GRAM_EPOCHS)
    if uses_gram(solver, problem):
        gram.build_at = max(1, gram_after(problem, stale_bytes))
        gram.cost, gram.work = gram_cost(problem), stale_entries(problem, stale_bytes)
    at_once = 0 < gram.build_at <= GRAM_AT_ONCE
    pays = 3 * z.nbytes <= PROOF_SHARE * stale_bytes  # the proofs' dual step reads u three times a round
    proofs_on = solver.gap_proofs is True or (solver.gap_proofs == "auto" and pays)
    proving = bool(not at_once and solver.refresh == "auto" and proofs_on and problem.model.zero_gap is not None)
    cfg = Settings(int(rset.capacity_bytes), POLICIES[solver.selection], tol_abs, update_budget(solver.max_epochs, n),
                   round_epochs(solver.local_epochs, model=problem.name), MAX_PASSES_PER_ROUND, bool(solver.shrinking),
                   refresh_first(solver.device, problem), proving, bool(np.any(problem.mu)),
                   problem.step_curvature)
    buf = _buffers(problem, rset, z, rng, solver.selection, proving)
    st = np.zeros(1, dtype=STATE).view(np.recarray)[0]
    st.dual_best, st.known, st.m = -np.inf, NONE_KNOWN, -1
    plan = new_plan(solver.refresh == "auto" and not uses_gram(solver, problem))
    cov = (np.zeros((0, 0)), np.zeros(n), a.copy())

    def build_gram():
        """G built: the next row anchors its dots (a data pass); every stale gap from the dots, none
        proven (their gaps are 0, valid)."""
        gram.on, gram.build_at, gram.since = True, 0.0, gram.anchor_every
        buf.proven[:] = False
        return (gram_matrix(problem), cov[1], a.copy()), cfg._replace(proving=False)

    if at_once:
        cov, cfg = build_gram()
    history = driver.new_history()
    per_slice = driver.slice_updates(problem)
    status = None
    while status is None:
        st.rows = 0
        st.slice_end = st.updates + per_slice
        code = run_swap_slice(data, block, coord_bytes, a, z, off, form, cfg, st, buf, plan, gram, cov, history,
                              iterates)
        driver.record_history(trace, problem, history[: st.rows], t0, prefetch_hits=0, bytes_prefetched=0)
        if code == BUILD_GRAM:
            cov, cfg = build_gram()
        elif code != SLICE_END:
            status = driver.STATUS[code]
        elif solver.max_time is not None and time.perf_counter() - t0 >= solver.max_time:
            status = "max_time"
    _hand_back(rset, problem, block, buf.row_coord, buf.resident, st)
    solver.gram_ = {"built": bool(gram.on), "anchors": int(gram.anchors), "drift": float(gram.drift),
                    "rows_from_gram": int(gram.gram_rows)}
    if status != "converged":  # the last round's end state: one more pass certifies it
        gaps, s = problem.coordinate_gaps(a, z, off, with_s=True)
        if len(trace.rows) < iterates.shape[0]:
            iterates[len(trace.rows)] = a
        P, D, gap, st.dual_best = problem.certify(a, z, off, gap_sum=float(gaps.sum()),
                                                  s_max=float(np.abs(s).max(initial=0.0)), dual_best=st.dual_best)
        if problem.dual_form:
            P, D = -D, -P
        row = np.zeros(1, dtype=driver.ROW)
        row[0] = (time.perf_counter(), st.updates, P, D, gap, st.rounds, st.bytes_h2d, st.swaps,
                  np.count_nonzero(buf.resident), 1)
        driver.record_history(trace, problem, row, t0, prefetch_hits=0, bytes_prefetched=0)
    return status, int(st.rounds), float(st.updates), float(st.dual_best)
