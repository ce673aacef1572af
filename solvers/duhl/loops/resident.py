"""All data resident on the CPU: the whole DuHL round loop compiled.

With every coordinate in memory there is nothing to select or swap, and a round's Python
would cost more than its epochs on small problems. One compiled call runs many rounds:

- a global gap pass gives every coordinate's gap and s_i, and the certificate
  (:mod:`solvers.glm.certificates`): stop at the tolerance. It reads only the coordinates
  whose gap no bound proves 0 (the gap memory's proof, :func:`solvers.duhl.gaps.memory.proven`:
  a coordinate at a bound whose s_i, as last read, lies deeper inside its zero-gap interval
  than ||A_i|| times how far u has moved since);
- shrinking (a working set): the next rounds visit only the coordinates whose gap is positive
  (those at a bound with optimality holding have gap 0 exactly), or for a model with no such
  bound (logistic) above a share of the mean gap (``shrink_cut``), when that leaves at most half
  of them; the first round visits all, except for the Lasso, whose working set grows as celer's
  and skglm's do: its non-zero coordinates and the largest gaps of the rest, twice as many as
  all of a's non-zeros (at least WS_LEAST), from the gaps at 0 on;
- a round is ``local_epochs`` epochs' worth of updates over the working set (at most
  MAX_PASSES_PER_ROUND passes; NEWTON_PASSES where each pass is a Newton step from the working
  set's Hessian, a loss's over few coordinates), in a fresh random order per pass (with Anderson
  extrapolation, :mod:`solvers.duhl.accel.anderson`, one order per window of the K + 1 passes it
  extrapolates from, except for those Newton steps); rounds repeat until the working set's own gap
  (|W| dot products: cheap) is at most ``inner`` times the last global gap, then the next global
  pass certifies. A loss's Newton passes converge a small working set in a few passes, far
  faster than the round's budget assumes: every NEWTON_PASSES passes its gap is taken, and the
  round ends once it is SOLVED times that target;
- covariance updates (the Lasso family, :mod:`solvers.duhl.accel.gram`): once the certificates'
  rate predicts more data work to the tolerance than twice the Gram matrix's cost, the slice
  returns for G = A A^T, and from then on a round's passes keep the working set's dots from G (no
  reads), z catches up once a round, and the working set's gap comes from the dots; Anderson goes
  on from G without an intercept.

The loop runs in slices (:mod:`solvers.duhl.loops.driver`) that end by work done.
"""

import time
from typing import NamedTuple

import numpy as np

from solvers.duhl.budget import update_budget
from solvers.duhl.accel.anderson import extrapolate, extrapolate_gram
from solvers.duhl.accel.gram import COV_ROUNDS, catch_up, gram_cost, gram_epoch, gram_fits, gram_matrix, gram_pays, \
    work_entries
from solvers.duhl.gaps.memory import proven
from solvers.duhl.gaps.schedule import next_pass
from solvers.duhl.loops import driver
from solvers.duhl.loops.driver import BUILD_GRAM, CONVERGED, MAX_UPDATES, SLICE_END, write_row
from solvers.glm.certificates import certificate, rescaled_fy_gap
from solvers.glm.models import coord_gap, has_loss, shrink_cut
from solvers.kernels import cpu
from solvers.kernels.cache import compiled
from solvers.kernels.layouts import epoch, gaps_of, hessian_steps

WS_LEAST = 100  # the Lasso's smallest working set (celer's and skglm's p0 is 10: 100 measured faster)
INNER = 0.3  # a global pass once the working set's gap is this share of the last global gap
NEWTON_PASSES = 4  # a round's passes where each is a Newton step from the working set's Hessian: a few converge it
SOLVED = 0.1  # a loss's round of Newton passes ends at this share of its set's target (at the target: more global passes)

STATE = np.dtype([
    ("updates", np.float64),    # coordinate updates
    ("rounds", np.int64),
    ("passes", np.int64),       # global gap passes
    ("reads", np.int64),        # coordinates the global passes read (the others proven)
    ("rows", np.int64),         # rows of this slice
    ("kept", np.int64),         # rows of the run
    ("n_work", np.int64),       # the working set: work[:n_work]
    ("fresh", np.bool_),        # a global pass is due first
    ("target", np.float64),     # the working set's gap that calls for the next global pass
    ("dual_best", np.float64),
    ("slice_end", np.float64),  # the updates at which this slice ends
    ("shift", np.float64),      # c off m at the last global pass (the intercept's share of the path)
])


class Settings(NamedTuple):
    tol_abs: float
    max_updates: float
    local_epochs: int
    max_passes: int
    shrinking: bool
    ws_least: int          # > 0: the Lasso's working set grows from that size, from the first round on
    solved: float          # a loss's round of Newton passes ends at this share of its working set's target (0: never early)
    centred: bool          # an intercept: u moves by its mean too
    g_cost: float          # the Gram matrix's cost (0: never built)
    total_bytes: int       # the data's bytes (loaded once, logically, for the first round)


class Buffers(NamedTuple):
    """Carried between slices: the working set (``work`` ascending, so its gap reads rows in memory
    order; ``order``: it in the epochs' random order), the gaps, the proofs' memory (each
    coordinate's last read s and the path lengths then, ``at``; ||A_i|| centred and |mu_i|; the
    dual path ``path`` and z at the last pass), the schedule of global passes (round and gap of the
    last, round of the next), the shuffles' stream; and scratch."""
    work: np.ndarray
    order: np.ndarray
    gaps: np.ndarray
    s: np.ndarray
    last_s: np.ndarray
    at: np.ndarray
    norms: np.ndarray
    mu_abs: np.ndarray
    path: np.ndarray
    z_last: np.ndarray
    todo: np.ndarray
    schedule: np.ndarray
    rng: np.ndarray
    read: np.ndarray
    redo: np.ndarray
    out_g: np.ndarray
    out_s: np.ndarray
    zero_off: np.ndarray


@compiled
def grow_cap(work, n_work, a, gaps, least):
    """celer's and skglm's growing working set: keep every coordinate of ``work[:n_work]`` that is
    non-zero, and of the rest the largest gaps, up to max(least, 2 x the non-zeros of all of a) in
    all, when that is at most a quarter of all n coordinates (beyond, the growth's extra global
    passes cost more than they save). Returns the new size (the kept coordinates first, in their
    order). The non-zeros are counted over all of a, as celer's 2 ||w||_0: a non-zero whose gap the
    shrinking cut left out of ``work`` still counts, or the set stays under the support's size."""
    nnz = 0
    for k in range(n_work):
        if a[work[k]] != 0.0:
            nnz += 1
    support = 0
    for i in range(a.shape[0]):
        if a[i] != 0.0:
            support += 1
    size = max(least, 2 * support)
    if n_work <= size or 4 * size > a.shape[0]:
        return n_work
    zeros = np.empty(n_work - nnz)
    m = 0
    for k in range(n_work):
        if a[work[k]] == 0.0:
            zeros[m] = gaps[work[k]]
            m += 1
    room = size - nnz
    threshold = _kth_smallest(zeros, m - room)  # the room-th largest gap at 0
    kept = 0
    for k in range(n_work):
        i = work[k]
        if a[i] != 0.0 or (gaps[i] >= threshold and room > 0):
            if a[i] == 0.0:
                room -= 1
            work[kept] = i
            kept += 1
    return kept


@compiled
def _kth_smallest(x, k):
    """np.partition(x, k)[k] (x reordered): Hoare's selection, a few lines that compile in a small
    part of np.partition's time."""
    lo, hi = 0, x.shape[0] - 1
    while lo < hi:
        pivot = x[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while x[i] < pivot:
                i += 1
            while x[j] > pivot:
                j -= 1
            if i <= j:
                x[i], x[j] = x[j], x[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return x[k]
    return x[k]


@compiled
def _same_set(old, new, n):
    if old.shape[0] != new.shape[0]:
        return False
    member = np.zeros(n, np.bool_)
    for i in old:
        member[i] = True
    for i in new:
        if not member[i]:
            return False
    return True


@compiled
def global_gaps(D, a, z, off, form, centred, st, buf):
    """Every coordinate's gap and s at the state, reading the data only of those whose gap no
    bound proves 0 (a proven one gets gap 0, what a read gives, and its last s); ``buf.todo``
    holds 0..n-1 before the first pass, then the coordinates read. Returns how many were read."""
    n, m = a.shape[0], z.shape[0]
    c, mu, theta = form.c, form.mu, form.theta
    gaps, s, z_last, path = buf.gaps, buf.s, buf.z_last, buf.path
    shift = c * off[0] * m
    total = 0.0
    for k in range(m):
        total += z[k] - z_last[k]
    mean = total / m if centred else 0.0
    step = 0.0
    norm_u = 0.0
    for k in range(m):
        d = z[k] - z_last[k] - mean
        step += d * d
        u = z[k] - c * off[0]
        norm_u += u * u
        z_last[k] = z[k]
    path[0] += np.sqrt(step)
    if centred:
        path[1] += abs(total - (shift - st.shift))
    st.shift = shift
    norm_u = np.sqrt(norm_u)
    todo = buf.todo
    if st.passes == 0:  # the first pass: nothing read yet, nothing to prove
        gaps_of(D, todo, todo, a, z, off, mu, c, theta, gaps, s)
        k = n
    else:
        k = 0
        for i in range(n):
            if proven(theta, a[i], buf.last_s[i], buf.norms[i], buf.mu_abs[i], path, buf.at[i], norm_u):
                gaps[i] = 0.0
                s[i] = buf.last_s[i]
                continue
            todo[k] = i
            k += 1
        read_gaps, read_s = buf.out_g[:k], buf.out_s[:k]  # the kernel writes the j-th read at j
        gaps_of(D, todo[:k], todo[:k], a, z, off, mu, c, theta, read_gaps, read_s)
        for j in range(k):
            gaps[todo[j]] = read_gaps[j]
            s[todo[j]] = read_s[j]
    st.passes += 1
    for j in range(k):
        i = todo[j]
        buf.last_s[i] = s[i]
        buf.at[i, 0] = path[0]
        buf.at[i, 1] = path[1]
    return k


@compiled
def _working_gap(D, work, a, z, off, form, gaps, s, G, dots):
    """The certificate of the problem restricted to the working set (the rest fixed); with G
    (covariance updates) its s from the dots the passes kept, not from the data."""
    c, mu, theta, tight, l1 = form.c, form.mu, form.theta, form.tight, form.l1
    n = work.shape[0]
    if G.shape[0] > 0:
        shift = c * off[0] * z.shape[0]
        for k in range(n):
            s[k] = dots[work[k]] - shift * mu[work[k]]
            gaps[k] = coord_gap(theta, a[work[k]], s[k])
    else:
        gaps_of(D, work, work, a, z, off, mu, c, theta, gaps[:n], s[:n])
    total = 0.0
    s_max = 0.0
    lin = 0.0
    for k in range(n):
        total += gaps[k]
        s_max = max(s_max, abs(s[k]))
        lin += a[work[k]] * s[k]
    if not tight:
        return total
    t = 1.0 if s_max <= l1 else l1 / s_max
    l1_norm = 0.0
    for k in range(n):
        l1_norm += l1 * abs(a[work[k]])
    # sum over W of l1|a_i| + t a_i s_i, plus the Fenchel-Young gap of f at t u
    return min(total, l1_norm + t * lin + rescaled_fy_gap(theta, z, off, c, form.b, t))


@compiled
def _fresh_dots(D, work, a, z, off, form, buf, was_read, dots, a_ref):
    """dots_i = <A_i, z> of the working set after a global pass: from its s where the pass read
    coordinate i (``was_read``), else from the data (a gap the proofs gave has an old s); a_ref = a."""
    c, mu = form.c, form.mu
    read, redo, s = buf.read, buf.redo, buf.s
    shift = c * off[0] * z.shape[0]
    for i in was_read:
        read[i] = True
    n_redo = 0
    for i in work:
        a_ref[i] = a[i]
        dots[i] = s[i] + shift * mu[i]
        redo[n_redo] = i
        n_redo += not read[i]
    for i in was_read:
        read[i] = False
    if n_redo:  # with off 0 the kernel's s is <A_i, z>
        gaps_of(D, redo[:n_redo], redo[:n_redo], a, z, buf.zero_off, mu, c, form.theta, buf.out_g[:n_redo],
                buf.out_s[:n_redo])
        for k in range(n_redo):
            dots[redo[k]] = buf.out_s[k]


@compiled
def run_resident_slice(D, a, z, off, form, cfg, st, buf, history, iterates, accel, accel_state, cov):
    """Rounds until the tolerance, ``cfg.max_updates``, the slice's end (``st.slice_end`` updates)
    or a full ``history``; ``st`` and ``buf`` carry the loop between slices. ``accel``: (K + 1, n)
    iterates for Anderson extrapolation every K passes, (0, n) for none; ``accel_state``: its
    [stored, tries, kept]. ``cov`` = (G, dots, a_ref): G (0, 0) until built, the working set's dots
    <A_i, z> and a at the last catch-up of z. Returns how the slice ended: CONVERGED, MAX_UPDATES,
    SLICE_END or BUILD_GRAM (then the caller sets cov and calls again)."""
    n = a.shape[0]
    everyone = np.arange(n)
    G, dots, a_ref = cov
    c, mu, sqnorm, theta = form.c, form.mu, form.sqnorm, form.theta
    work, order, gaps, s, rng = buf.work, buf.order, buf.gaps, buf.s, buf.rng
    from_g = accel.shape[0] > 1 and not cfg.centred  # Anderson from G: no intercept (its objective needs z)
    while True:
        if st.fresh:  # a global pass: certificate, then the next working set
            n_read = global_gaps(D, a, z, off, form, cfg.centred, st, buf)
            st.reads += n_read
            gap_sum = 0.0
            s_max = 0.0
            for i in range(n):
                gap_sum += gaps[i]
                s_max = max(s_max, abs(s[i]))
            primal, dual, gap, st.dual_best = certificate(
                theta, z, off, c, form.b, cpu.sum_g(a, theta), gap_sum, s_max, form.l1, form.tight,
                st.dual_best if form.carry_dual else -np.inf)
            loaded = st.rounds > 0  # the data is loaded (once, logically) for the first round
            write_row(history, st.rows, iterates, st.kept, a, st.updates, primal, dual, gap, st.rounds,
                      cfg.total_bytes if loaded else 0, n if loaded else 0, n, 1)
            st.rows += 1
            st.kept += 1
            if gap <= cfg.tol_abs:
                return CONVERGED
            n_work = st.n_work
            build = G.shape[0] == 0 and gram_pays(  # the last round's data work, predicted on
                cfg.g_cost, buf.schedule[0], buf.schedule[1], st.rounds, gap, cfg.tol_abs,
                (2 * cfg.local_epochs * min(cfg.max_passes, max(1, n // n_work)) + 1) * work_entries(D, work[:n_work]))
            next_pass(buf.schedule, st.rounds, gap, cfg.tol_abs)
            if st.updates >= cfg.max_updates:
                return MAX_UPDATES
            previous = work[:n_work].copy()
            n_work = 0
            grow = form.tight and cfg.ws_least > 0  # the Lasso's gaps at 0 already rank the coordinates
            if cfg.shrinking and (st.rounds > 0 or grow):
                cut = shrink_cut(theta) * gap_sum / n  # 0, or leaves out at most that share of the gap
                for i in range(n):
                    if gaps[i] > cut:
                        work[n_work] = i
                        n_work += 1
                if grow:
                    n_work = grow_cap(work, n_work, a, gaps, cfg.ws_least)
            if n_work == 0 or n_work > n // 2:  # shrinking would save little: visit all
                cpu.copy_to(everyone, work)
                n_work = n
            st.n_work = n_work
            st.target = max(INNER * gap, 0.5 * cfg.tol_abs)
            st.fresh = False
            if not _same_set(previous, work[:n_work], n):  # else the same passes: Anderson's iterates carry on
                cpu.copy_to(work[:n_work], order)
                accel_state[0] = 0  # extrapolate from iterates of one working set only
            if G.shape[0] > 0:  # the working set's dots: the pass's s where it read the data, else a read
                _fresh_dots(D, work[:n_work], a, z, off, form, buf, buf.todo[:n_read], dots, a_ref)
            if build:
                return BUILD_GRAM
            if st.rows >= history.shape[0] or st.updates >= st.slice_end:
                return SLICE_END
        n_work = st.n_work
        active = order[:n_work]
        passes = cfg.local_epochs * min(cfg.max_passes, max(1, n // max(1, n_work)))
        if G.shape[0] > 0:  # passes from G as long as the data's catch-up of z (a pass from G: |W|^2 flops)
            passes = cfg.local_epochs * min(cfg.max_passes, max(1, n // n_work,
                                                                 work_entries(D, work[:n_work]) // n_work**2))
            for _ in range(passes):
                left = int(cfg.max_updates - st.updates)
                if left <= 0:
                    break
                if not from_g or accel_state[0] == 0:  # with Anderson: one order per window
                    cpu.shuffle(active, rng)
                st.updates += gram_epoch(G, everyone, active[:left], work[:n_work], a, off, mu, sqnorm, c, theta,
                                         dots, z.shape[0])
                if from_g and left >= n_work:
                    extrapolate_gram(G, active, a, dots, c, theta, accel, accel_state, buf.out_g)
            catch_up(D, work[:n_work], a, a_ref, z, c)
            passes = 0
        newton = passes > 0 and hessian_steps(D, theta, active, z.shape[0])
        if newton:
            passes = min(passes, cfg.local_epochs * NEWTON_PASSES)
        extrapolating = passes > 0 and accel.shape[0] > 1 and not newton  # (Newton steps: a fresh order each)
        solved = False
        checks = has_loss(theta) and n_work < n and G.shape[0] == 0  # (a check costs the set's dot products)
        for p in range(passes):
            left = int(cfg.max_updates - st.updates)  # the epoch budget: a last pass cut short
            if left <= 0:
                break
            if not extrapolating or accel_state[0] == 0:  # with Anderson: one order per window
                cpu.shuffle(active, rng)
            st.updates += epoch(D, everyone, active[:left], a, z, off, mu, sqnorm, c, theta)
            if extrapolating and left >= n_work:
                extrapolate(D, active, a, z, off, mu, c, form.b, theta, accel, accel_state)
            if checks and (p + 1) % NEWTON_PASSES == 0 and p + 1 < passes and cfg.solved > 0 and _working_gap(
                    D, work[:n_work], a, z, off, form, buf.out_g, buf.out_s, G, dots) <= cfg.solved * st.target:
                solved = True
                break
        st.rounds += 1
        if st.updates >= cfg.max_updates or solved:
            st.fresh = True
        elif n_work == n:  # no working set: the next global pass when the rate predicts it matters
            st.fresh = st.rounds >= buf.schedule[2]
        else:  # (from G, a working set's gap that rounding keeps above a tight target: a pass at the latest
            st.fresh = (_working_gap(D, work[:n_work], a, z, off, form, buf.out_g, buf.out_s, G, dots) <= st.target
                        or (G.shape[0] > 0 and st.rounds - buf.schedule[0] >= COV_ROUNDS))  # COV_ROUNDS rounds on)
        if not st.fresh and st.updates >= st.slice_end:
            return SLICE_END


def start(problem, z, off, seed_value=0):
    """The loop's state and buffers at the start (z, off) of a solve: every coordinate in the
    working set, a global pass due first."""
    n = problem.n_coords
    buf = Buffers(np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64), np.empty(n), np.empty(n),
                  np.empty(n), np.zeros((n, 2)), np.sqrt(problem.sqnorm), np.abs(problem.mu), np.zeros(2), z.copy(),
                  np.arange(n, dtype=np.int64), np.array([0.0, np.inf, 0.0]), cpu.random_state(seed_value),
                  np.zeros(n, np.bool_), np.empty(n, np.int64), np.empty(n), np.empty(n), np.zeros(1))
    st = np.zeros(1, dtype=STATE).view(np.recarray)[0]
    st.n_work, st.fresh, st.dual_best, st.shift = n, True, -np.inf, problem.c * off[0] * z.shape[0]
    return st, buf


def solve_resident(problem, a, z, off, *, local_epochs, max_epochs, max_time, shrinking, tol_abs, seed_value, trace,
                   t0, max_passes, iterates, anderson=0, gram=True):
    """Run :func:`run_resident_slice` until it stops, its rows into ``trace``. ``anderson``: K > 0
    extrapolates every K passes (the Lasso family only; the caller checks); ``gram``: covariance
    updates where they pay. Returns (status, rounds, updates, the best dual value, Anderson's
    [stored, tries, kept], the global passes and the coordinates they read)."""
    n = problem.n_coords
    A = problem.A
    D = driver.data_of(A, problem.sparse)
    form = driver.form_of(problem)
    centred = bool(np.any(problem.mu))
    g_cost = gram_cost(problem) if gram and gram_fits(problem) else 0.0
    cfg = Settings(float(tol_abs), update_budget(max_epochs, n), int(local_epochs), int(max_passes), bool(shrinking),
                   WS_LEAST, float(SOLVED), centred, float(g_cost), int(problem.coord_bytes.sum()))
    st, buf = start(problem, z, off, seed_value)
    history = driver.new_history()
    iterates = np.empty((0, n)) if iterates is None else iterates
    accel = np.empty((anderson + 1 if anderson > 0 else 0, n))
    accel_state = np.zeros(3)
    cov = (np.zeros((0, 0)), np.zeros(n), a.copy())
    per_slice = driver.slice_updates(problem)
    status = None
    while status is None:
        st.rows = 0
        st.slice_end = st.updates + per_slice
        code = run_resident_slice(D, a, z, off, form, cfg, st, buf, history, iterates, accel, accel_state, cov)
        driver.record_history(trace, problem, history[: st.rows], t0, prefetch_hits=0, bytes_prefetched=0)
        if code == BUILD_GRAM:  # covariance updates from here on: G, and every coordinate's <A_i, z> from the data
            cov = (gram_matrix(problem), np.asarray(A @ z, dtype=np.float64), a.copy())
        elif code != SLICE_END:
            status = driver.STATUS[code]
        elif max_time is not None and time.perf_counter() - t0 >= max_time:
            status = "max_time"
    passes = {"gap_passes": int(st.passes), "coordinates_read": int(st.reads), "gram_built": cov[0].shape[0] > 0}
    return status, int(st.rounds), float(st.updates), float(st.dual_best), accel_state, passes
