"""The compiled swap loop's certificates (solvers.duhl.compiled_swaps): a round's start state
certified from the data (``_certify``) or, for the Lasso family with few coordinates, from dots
<A_i, z> kept by the Gram matrix G = A A^T (``_round_certify``), and the host's
side of G: where it applies, when to build it, how.
"""

import numpy as np

from solvers.duhl.compiled_parts import _pairwise, loop_kernel
from solvers.duhl.covariance import _add, gram_cost, gram_matrix, gram_pays
from solvers.duhl.covariance import cov_epoch as _gram_epoch  # noqa: F401 - the block's epochs (compiled_swaps)
from solvers.duhl.inmemory import _gaps
from solvers.glm.certificates import form_certificate, residual_stats
from solvers.glm.models import coord_gap
from solvers.kernels import cpu

# the Lasso family (coordinates = features) with the data in RAM: refresh "auto" keeps the stale
# gaps' dots <A_i, z> up to date from the Gram matrix A A^T (|stale| x |changed| flops a round, not
# a read of the stale data; scikit-learn's Lasso uses a precomputed Gram the same way), when G is at
# most GRAM_BYTES_SHARE of the data's bytes (8 p^2: few coordinates); True: also with refresh "all"
# (whose default reads every stale gap from the data: the Python loop's twin); False: never
GRAM = "auto"
GRAM_BYTES_SHARE = 1.0
# rows between two data passes that re-anchor the dots (and measure the Gram's drift, gstate[G_DRIFT]);
# the row that stops the solve always comes from a data pass
ANCHOR_EVERY = 16
# G costs many rounds' stale reads (w8a[20000] Lasso: 24 passes over the data; dense 2000x1000: 75),
# and a solve may end first (the dense Lasso in 5 rounds), so the loop reads the stale gaps from the
# data until it has read about as much as G costs (GRAM_AFTER times the estimate), then builds G:
# a ski rental, at most twice the better choice's cost (the estimate: solvers.duhl.covariance.gram_cost)
GRAM_AFTER = 1.0
# ... except when G costs at most this many rounds' stale reads: then it is built before the first
# round, since the loop's return to Python to build it later costs more (diabetes: G after 2 rounds,
# the return ~0.15 ms, the rounds ~2 us each)
GRAM_AT_ONCE = 4
# with G on, the block's epochs from G too (_gram_epoch), GRAM_EPOCHS times as many as from the data:
# an epoch costs m^2 flops for m coordinates there, and the block's subproblem solved further takes
# fewer rounds (swap_loop at budget 0.25, 2 / 4 / 8 times: w8a[20000] Lasso 0.91 / 0.97 / 1.18 the time
# of 1, 167 -> 114 / 76 / 57 rounds; diabetes 0.82 / 0.94 / 1.26; dense 2000x1000 0.81 / 0.77 / 0.78);
# 0 (False): the epochs read the block's data (benchmarks, tests)
GRAM_EPOCHS = 2
# with G on, every round refreshes the stale gaps from the dots (the selection's), but where a certified
# row (the certificate's pass over z's m entries, a trace row, an anchor every ANCHOR_EVERY of them) costs
# at least ROW_SHARE of a round's pass over the block's entries, a row comes at most every ROWS_EVERY
# rounds, sooner as the gap nears tol: after half the rounds the last two rows' rate predicts to tol
# (diabetes at memory_budget 0.25: ~240 rounds of ~1.2 us, a row ~0.2 of it; the default experiment's
# rounds, 5000 x 1000 entries, hardly see a row and would see a stop up to 7 rounds late: 0.22 -> 0.37 s)
ROWS_EVERY = 8
ROW_SHARE = 0.1


def uses_gram(solver, problem):
    """Whether the compiled loop may keep the stale dots from the Gram matrix (see GRAM)."""
    if GRAM is False or problem.dual_form or problem.on_disk or solver.device != "cpu":
        return False
    if GRAM == "auto" and solver.refresh == "all":
        return False
    n = problem.n_coords
    return 8 * n * n <= GRAM_BYTES_SHARE * int(problem.coord_bytes.sum())


def stale_entries(problem, stale_bytes):
    """The data entries a round's stale gaps read (``stale_bytes`` of the data's bytes)."""
    A = problem.A
    entries = float(A.nnz) if problem.sparse else float(A.shape[0] * A.shape[1])
    return stale_bytes / max(1, int(problem.coord_bytes.sum())) * entries


def gram_after(problem, stale_share):
    """The rounds after which the loop builds G at the latest (see GRAM_AFTER; sooner: _gram_due): G's
    estimated cost over the stale entries a round reads (``stale_share`` of the data's)."""
    stale = stale_entries(problem, stale_share * int(problem.coord_bytes.sum()))
    return int(np.ceil(GRAM_AFTER * gram_cost(problem) / max(1.0, stale)))


# the Gram matrix's state (run_swap_slice's ``gram``): gstate entries (G_AT: the round after which
# the loop returns (4) for the caller to build G; 0: none; G_EPOCHS: 1 for the block's epochs from G)
G_ON, G_EVERY, G_SINCE, G_DRIFT, G_ANCHORS, G_ROWS, G_AT, G_EPOCHS = range(8)
# ... and the rows' schedule (G_ROWS_EVERY: ROWS_EVERY's value; G_SKIP: rounds left without a row; the
# last row's call G_ROW_AT and its gap)
G_ROWS_EVERY, G_SKIP, G_CALLS, G_ROW_AT, G_ROW_GAP = range(8, 13)
# ... and the rate's: row 0 (its round, 0, and gap), G's cost and a round's stale reads, in entries (_gram_due)
G_START_ROUND, G_START_GAP, G_COST, G_WORK = range(13, 17)
G_SIZE = 17


def rows_every(problem, block_bytes):
    """At most how many rounds apart the rows come (gstate[G_ROWS_EVERY]): ROWS_EVERY where a row's
    pass over z costs ROW_SHARE of the block's entries or more, else 1."""
    A = problem.A
    per_entry = A.data.itemsize + A.indices.itemsize if problem.sparse else A.itemsize
    return ROWS_EVERY if A.shape[1] >= ROW_SHARE * block_bytes / per_entry else 1


def gram_now(problem, a, gram_state, proof, proof_arrays):
    """The Gram matrix built: (gram_state, proof) from here on; the next row anchors its dots (a
    data pass); every stale gap from the dots, none proven (their gaps are 0, valid)."""
    _, dots, _, gstate = gram_state
    gstate[G_ON], gstate[G_AT], gstate[G_SINCE] = 1.0, 0.0, float(ANCHOR_EVERY)
    proof_arrays[4][:] = False
    return (gram_matrix(problem), dots, a.copy(), gstate), (False, proof[1])


@loop_kernel
def _state_row(a, z, off, c, b, theta, tight, l1, carry_dual, gaps, s, counters):
    """(P_form, D_form, gap) of the state whose every gap and s are in ``gaps`` and ``s``; the
    best dual value of the rows carried in counters[7]."""
    s_max = 0.0
    for i in range(gaps.shape[0]):
        s_max = max(s_max, abs(s[i]))
    q, ub = residual_stats(z, c * off[0], b)
    primal, dual, gap, dual_best = form_certificate(q, ub, c, cpu.sum_g(a, theta), _pairwise(gaps),
                                                    s_max if tight else 0.0, l1, tight,
                                                    counters[7] if carry_dual else -np.inf)
    counters[7] = dual_best
    return primal, dual, gap


@loop_kernel
def _certify(A, stale, a, z, off, mu, c, b, theta, tight, l1, carry_dual, gaps, s, counters, out_g, out_s):
    """The stale gaps refreshed at the state (a, z, off); with the others (fresh) its
    certificate (P_form, D_form, gap), dual_best updated in counters[7]."""
    n_stale = stale.shape[0]
    _gaps(A, stale, a, z, off, mu, c, theta, out_g[:n_stale], out_s[:n_stale])
    for j in range(n_stale):
        gaps[stale[j]] = out_g[j]
        s[stale[j]] = out_s[j]
    return _state_row(a, z, off, c, b, theta, tight, l1, carry_dual, gaps, s, counters)


@loop_kernel(inline="always")
def _round_certify(A, G, everyone, stale, fresh, a, z, off, mu, c, b, theta, tight, l1, carry_dual, gaps, s,
                   counters, dots, a_ref, zero_off, gstate, out_g, out_s, tol_abs):
    """The round's certificate: without the Gram matrix the stale gaps (listed) from the data (_certify);
    with it, those not ``fresh`` (a mask: the last block's), their s_i = <A_i, z> - c off m mu_i from
    ``dots`` (dots_i = <A_i, z> at the state a_ref) brought to the state a by G = A A^T: z moved by c
    (a_j - a_ref_j) A_j for every j updated since (the kernels' update), so dots_i moves by c (a_j -
    a_ref_j) G[j, i]. Every gstate[G_EVERY] rows, and for a row at or below tol_abs (the row that stops
    the solve), the dots are read from the data instead (one pass over A: every gap, the block's too),
    and how far the Gram's dots had drifted from them (max |difference| over max |dot|) is kept in
    gstate[G_DRIFT]. The best dual value of the rows is carried (counters[7]) as by _certify: a Gram
    row's within its dots' rounding of its state's (tests/solvers/duhl/test_gram.py). A row comes when
    _schedule says so; a round without one refreshes the stale gaps alone (returns (nan, nan, inf)). One
    function, not one per case, compiled into the loop: a call passing these arrays cost ~0.1 us
    (diabetes: a round ~0.7)."""
    if gstate[G_ON] == 0.0:
        return _certify(A, stale, a, z, off, mu, c, b, theta, tight, l1, carry_dual, gaps, s, counters, out_g,
                        out_s)
    n = a.shape[0]
    for j in range(n):
        d = a[j] - a_ref[j]
        if d != 0.0:
            cd = c * d
            for i in range(n):
                dots[i] += cd * G[j, i]
            a_ref[j] = a[j]
    gstate[G_CALLS] += 1.0
    due = gstate[G_SKIP] <= 0.0  # else (ROWS_EVERY) the stale gaps only, and no certificate (gap inf)
    gstate[G_SKIP] -= 0.0 if due else 1.0
    carried = counters[7]
    anchor = due and gstate[G_SINCE] + 1.0 >= gstate[G_EVERY]
    while True:
        if anchor:
            _gaps(A, everyone, a, z, zero_off, mu, c, theta, out_g, out_s)  # out_s: <A_i, z> (off 0: no shift)
            top, diff = 0.0, 0.0
            for i in range(n):
                top = max(top, abs(out_s[i]))
                diff = max(diff, abs(out_s[i] - dots[i]))
                dots[i] = out_s[i]
            if gstate[G_ANCHORS] > 0 and top > 0:
                gstate[G_DRIFT] = max(gstate[G_DRIFT], diff / top)
            gstate[G_ANCHORS] += 1
            gstate[G_SINCE] = 0.0
        elif due:
            gstate[G_SINCE] += 1.0
            gstate[G_ROWS] += 1.0
        shift = c * off[0] * z.shape[0]
        for i in range(n):  # an anchor: the block's gaps from the data too (_gram_epoch's)
            if anchor or not fresh[i]:
                s[i] = dots[i] - shift * mu[i]
                gaps[i] = coord_gap(theta, a[i], s[i])
        if not due:
            return np.nan, np.nan, np.inf
        primal, dual, gap = _state_row(a, z, off, c, b, theta, tight, l1, carry_dual, gaps, s, counters)
        if anchor or gap > tol_abs:
            _schedule(gstate, gap, tol_abs)
            return primal, dual, gap
        counters[7] = carried  # the stopping row's dual point from the data, not from this state's Gram dots
        anchor = True


@loop_kernel(inline="always")
def _gram_due(gstate, rounds, gap, tol_abs):
    """G's round brought forward to now (gstate[G_AT]) when the rate since row 0 predicts stale reads
    to ``tol_abs`` of at least covariance.GRAM_PAYS times G's cost (gstate[G_COST], 0: the ski rental's
    round alone): a long solve builds G in its first rounds, not after as many reads as G costs."""
    if gstate[G_ON] == 0.0 and gstate[G_AT] > rounds and gram_pays(
            gstate[G_COST], gstate[G_START_ROUND:G_START_GAP + 1], rounds, gap, tol_abs, gstate[G_WORK]):
        gstate[G_AT] = rounds


@loop_kernel
def _schedule(gstate, gap, tol_abs):
    """The rounds until the next row (gstate[G_SKIP]) after a row of ``gap``: half those the rate since
    the last row predicts to ``tol_abs`` (at least 0, at most ROWS_EVERY - 1, gstate[G_ROWS_EVERY]'s);
    ROWS_EVERY - 1 when the gap did not fall, 0 after the first row."""
    last, since = gstate[G_ROW_GAP], gstate[G_CALLS] - gstate[G_ROW_AT]
    skip = 0.0
    if last > 0.0 and since > 0.0:
        skip = gstate[G_ROWS_EVERY] - 1.0
        if gap < last and gap > tol_abs:
            skip = min(skip, np.floor(0.5 * np.log(tol_abs / gap) / (np.log(gap / last) / since)) - 1.0)
    gstate[G_SKIP] = max(0.0, skip)
    gstate[G_ROW_AT], gstate[G_ROW_GAP] = gstate[G_CALLS], gap


# ------------------------------------------------------- the block's epochs ---
# With G and the dots fresh at the round's start (a certificate just brought them to the state a), the
# block's epochs need no data: coordinate i's s = t_i - c off m mu_i, where t_i = <A_i, z> moves by
# c d G[j, i] when coordinate j moves by d (m^2 flops an epoch over the block's m coordinates, not a
# read of its data); z then moves once by the block's moves (one read of the block), and the block's
# gaps come from t. The same updates in the same order as the kernels' epochs (up to rounding).
# The epochs are covariance.cov_epoch (here _gram_epoch), as the all-resident loop's passes from G.


@loop_kernel(inline="always")
def _gram_block_end(B, positions, block, a, a_ref, z, off, mu, c, theta, t, gaps, s):
    """After _gram_epoch's epochs: z moved by the block's moves since a_ref (the round's start state:
    the certificate's), and the block's gaps and s from t."""
    shift = c * off[0] * z.shape[0]
    for jj in range(block.shape[0]):
        i = block[jj]
        d = a[i] - a_ref[i]
        if d != 0.0:
            _add(B, positions[jj], c * d, z)
        s[i] = t[i] - shift * mu[i]
        gaps[i] = coord_gap(theta, a[i], s[i])
