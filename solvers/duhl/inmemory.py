"""All data resident on the CPU: the whole DuHL round loop compiled, in time slices.

With every coordinate in memory there is nothing to select or swap, and a round's
Python costs more than its epochs on small problems (diabetes: ~50 us of Python
against ~6 us of kernel per round). Here one compiled call runs many rounds:

- a global gap pass gives every coordinate's gap and s_i, and the certificate
  (:mod:`solvers.glm.certificates`): stop at the tolerance. It reads only the
  coordinates whose gap no bound proves 0 (a coordinate at a bound whose s_i, as
  last read, lies deeper inside its zero-gap interval than ||A_i|| times how far u
  has moved since: the gap memory's proof, :mod:`solvers.duhl.gap_memory`): on
  w8a's dual SVM the passes read 7 epochs' worth of rows instead of 26;
- shrinking (a working set): the next rounds visit only the coordinates whose gap
  is positive (those at a bound with optimality holding have gap 0 exactly), or for
  a model with no such bound (logistic) above a share of the mean gap
  (Math.shrink_cut), when that leaves at most half of them; the first round visits all,
  except for the Lasso, whose working set grows as celer's and skglm's do: its non-zero
  coordinates and the largest gaps of the rest, twice as many as non-zeros (at least
  WS_LEAST), from the gaps at 0 on (sparse Lasso 5000x5000: 0.85 epochs to 1e-6, not 2.0);
- a round is ``local_epochs`` epochs' worth of updates over the working set, in a
  fresh random order per pass (with Anderson extrapolation, :mod:`solvers.duhl.anderson`,
  per window of the K + 1 passes it extrapolates from); rounds repeat until the working
  set's own gap (|W| dot products: cheap) is at most ``inner`` times the last global
  gap, then the next global pass certifies;
- covariance updates (the Lasso family, :mod:`solvers.duhl.covariance`): once the rate
  of the certificates predicts more data work to the tolerance than twice the Gram
  matrix's cost, the call returns for G = A A^T, and from then on a round's passes keep
  the working set's dots from G (no reads; as many passes as the catch-up of z costs),
  z catches up once a round, and the working set's gap comes from the dots (w8a's
  Lasso, 49,749 x 300: 47.0 -> 23.1 ms to 1e-6, G's 13 ms included); Anderson goes on
  from G (anderson.extrapolate_gram) without an intercept.

A call returns at the tolerance, at the epoch cap, when its history buffer is full,
or when its time slice is spent, so the caller streams trace rows (and checks
``max_time``) a few times a second however long the solve.
"""

import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from solvers.duhl.anderson import extrapolate, extrapolate_gram
from solvers.duhl.covariance import _csr, catch_up, cov_epoch, fits, gram_cost, gram_matrix, gram_pays, work_entries
from solvers.duhl.gap_memory import MARGIN, ROUNDING
from solvers.duhl.working_set import _grow_cap, _plan_next_pass, _same_set
from solvers.glm.certificates import form_certificate, residual_stats, tight_lasso
from solvers.glm.models import coord_gap, shrink_cut, zero_interval
from solvers.kernels import cpu

HISTORY = 256  # rows a slice can record before it returns
COVARIANCE = True  # covariance updates where they pay (solvers.duhl.covariance); False: never (benchmarks)
COV_ROUNDS = 16  # with them, a global pass at least this many rounds after the last (G's rounding drift)
WS_LEAST = 100  # the Lasso's smallest working set (celer's and skglm's p0 is 10: 100 measured faster)


def _clock_gettime_ns(clock_id):
    """Code for clock_gettime(clock_id) in ns, called by name (no GIL, ~50 ns)."""
    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        spec = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, spec.as_pointer()]),
                                            "clock_gettime")
        ts = cgutils.alloca_once(builder, spec)
        builder.call(fn, [ir.Constant(i32, clock_id), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(i64, 10**9)), nsec)
    return codegen


@intrinsic
def _monotonic_ns(typingctx):
    """CLOCK_MONOTONIC in ns, perf_counter's clock on Linux (a row per round; an object-mode
    perf_counter costs ~1 us)."""
    return types.int64(), _clock_gettime_ns(1)


@intrinsic
def _thread_cpu_ns(typingctx):
    """CLOCK_THREAD_CPUTIME_ID in ns: this thread's CPU time (a benchmark's clock on a shared
    machine: time the thread waits for a core is not counted)."""
    return types.int64(), _clock_gettime_ns(3)


@njit(nogil=True, cache=True)
def _now():
    return _monotonic_ns() * 1e-9


def _epoch(D, coords, order, a, z, off, mu, sqnorm, c, theta):
    """An epoch on the data D: (indptr, indices, data) of a CSR matrix, or (rows,)."""


def _gaps(D, rows, a, z, off, mu, c, theta, gaps, s):
    """The gaps and s of ``rows`` of the data D."""


@overload(_epoch)
def _epoch_for(D, coords, order, a, z, off, mu, sqnorm, c, theta):
    if _csr(D):
        return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.scd_epoch_sparse(
            D[0], D[1], D[2], coords, order, a, z, off, mu, sqnorm, c, theta)
    return lambda D, coords, order, a, z, off, mu, sqnorm, c, theta: cpu.scd_epoch_dense(
        D[0], coords, order, a, z, off, mu, sqnorm, c, theta)


@overload(_gaps)
def _gaps_for(D, rows, a, z, off, mu, c, theta, gaps, s):
    if _csr(D):
        return lambda D, rows, a, z, off, mu, c, theta, gaps, s: cpu.gaps_sparse(
            D[0], D[1], D[2], rows, rows, a, z, off, mu, c, theta, gaps, s)
    return lambda D, rows, a, z, off, mu, c, theta, gaps, s: cpu.gaps_dense(
        D[0], rows, rows, a, z, off, mu, c, theta, gaps, s)


@njit(nogil=True)
def _global_gaps(D, a, z, off, mu, c, theta, gaps, s, memo, proof, z_last, norms, todo):
    """Every coordinate's gap and s at the state, reading the data only of those whose gap
    no bound proves 0 (:mod:`solvers.duhl.gap_memory`'s proof, per coordinate: its s at the
    pass that last read it, ``memo[i] = (s, path lengths then)``, moves by at most ||A_i||
    times how far u has travelled since; ``proof = [path, intercept path, shift, centred,
    passes]``; ``todo`` holds 0..n-1 before the first pass, then the coordinates read).
    A proven coordinate gets gap 0, what a read gives, and its last s (inside its interval,
    so below l1 for the Lasso's rescaling). Returns how many coordinates were read."""
    n = a.shape[0]
    m = z.shape[0]
    shift = c * off[0] * m
    total = 0.0
    for k in range(m):
        total += z[k] - z_last[k]
    mean = total / m if proof[3] else 0.0
    step = 0.0
    norm_u = 0.0
    for k in range(m):
        d = z[k] - z_last[k] - mean
        step += d * d
        u = z[k] - c * off[0]
        norm_u += u * u
        z_last[k] = z[k]
    proof[0] += np.sqrt(step)
    if proof[3]:
        proof[1] += abs(total - (shift - proof[2]))
    proof[2] = shift
    norm_u = np.sqrt(norm_u)
    if proof[4] == 0.0:  # the first pass: nothing read yet, nothing to prove
        _gaps(D, todo, a, z, off, mu, c, theta, gaps, s)
        k = n
    else:
        k = 0
        for i in range(n):
            lo, hi = zero_interval(theta, a[i])
            if lo <= hi:
                drift = (norms[i, 0] * (proof[0] - memo[i, 1] + ROUNDING * norm_u)
                         + norms[i, 1] * (proof[1] - memo[i, 2]))
                last = memo[i, 0]
                if (last - drift >= lo + MARGIN * (abs(lo) if np.isfinite(lo) else 0.0)
                        and last + drift <= hi - MARGIN * (abs(hi) if np.isfinite(hi) else 0.0)):
                    gaps[i] = 0.0
                    s[i] = last
                    continue
            todo[k] = i
            k += 1
        read_gaps, read_s = np.empty(k), np.empty(k)  # the kernel writes the j-th read at j
        _gaps(D, todo[:k], a, z, off, mu, c, theta, read_gaps, read_s)
        for j in range(k):
            gaps[todo[j]] = read_gaps[j]
            s[todo[j]] = read_s[j]
    proof[4] += 1.0
    for j in range(k):
        i = todo[j]
        memo[i, 0] = s[i]
        memo[i, 1] = proof[0]
        memo[i, 2] = proof[1]
    return k


@njit(nogil=True)
def _working_gap(D, work, a, z, off, mu, c, theta, b, tight, l1, gaps, s, G, dots):
    """The certificate of the problem restricted to the working set (the rest fixed); with G
    (covariance updates) its s from the dots the passes kept, not from the data."""
    n = work.shape[0]
    if G.shape[0] > 0:
        shift = c * off[0] * z.shape[0]
        for k in range(n):
            s[k] = dots[work[k]] - shift * mu[work[k]]
            gaps[k] = coord_gap(theta, a[work[k]], s[k])
    else:
        _gaps(D, work, a, z, off, mu, c, theta, gaps[:n], s[:n])
    total = 0.0
    s_max = 0.0
    lin = 0.0
    for k in range(n):
        total += gaps[k]
        s_max = max(s_max, abs(s[k]))
        lin += a[work[k]] * s[k]
    if not tight:
        return total
    q, ub = residual_stats(z, c * off[0], b)
    t = 1.0 if s_max <= l1 else l1 / s_max
    l1_norm = 0.0
    for k in range(n):
        l1_norm += l1 * abs(a[work[k]])
    # sum over W of l1|a_i| + t a_i s_i, plus the Fenchel-Young gap of f at t u
    return min(total, l1_norm + t * lin + (1.0 - t) * (1.0 - t) * q / (2.0 * c))


@njit(nogil=True)
def _fresh_dots(D, work, a, z, off, mu, c, theta, s, was_read, dots, a_ref, read, redo, zero_off, out_g, out_s):
    """dots_i = <A_i, z> of the working set after a global pass: from its s where the pass read
    coordinate i (``was_read``), else from the data (a gap the proofs gave has an old s); a_ref = a."""
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
        _gaps(D, redo[:n_redo], a, z, zero_off, mu, c, theta, out_g[:n_redo], out_s[:n_redo])
        for k in range(n_redo):
            dots[redo[k]] = out_s[k]


@cpu.model_kernel(nogil=True, cache=True, error_model="numpy")
def run_slice(D, a, z, off, mu, sqnorm, c, b, theta, tight, l1, carry_dual, tol_abs, max_updates, deadline,
              local_epochs, max_passes, inner, shrinking, ws_least, work, n_work, fresh, target, gaps, s, dual_best,
              counters, schedule, history, iterates, accel, accel_state, memo, proof, z_last, norms, todo, order, rng,
              cov):
    """Rounds until the tolerance, ``max_updates``, ``deadline`` (perf_counter seconds) or a
    full ``history``. Carried between calls: ``counters`` (updates, rounds, gap passes, rows
    of this slice, rows of the run, coordinates the gap passes read), the working set
    ``work[:n_work]``, ``fresh`` (a global pass is due first), ``target`` (the working
    set's gap that calls for the next global pass), ``schedule`` (with no working set:
    round and gap of the last global pass, round of the next) and ``dual_best``. Each
    history row: (time, updates, P_form, D_form, gap, rounds); ``iterates`` receives a
    copy of a at the first rows. ``ws_least`` > 0: the Lasso's working set grows from that size
    (:func:`_grow_cap`), from the first round on. ``carry_dual``: whether the best dual value of
    earlier states certifies later ones (not with w(a), in the dual: Problem.certify). ``accel``:
    (K + 1, n) iterates for Anderson extrapolation every K passes (:mod:`solvers.duhl.anderson`), (0, n) for
    none: then the working set's random order is drawn once per window of K + 1 passes, not per pass;
    ``accel_state``: its [stored, tries, kept]. ``memo``, ``proof``, ``z_last``, ``norms`` (||A_i|| centred,
    |mu_i|): what proves gaps 0 in a global pass (:func:`_global_gaps`); ``todo``: its buffer.
    ``order[:n_work]``: the working set in the epochs' random order; ``work[:n_work]`` stays ascending, so its
    gap reads rows in memory order (w8a: 30-40% cheaper); ``rng``: the shuffles' stream (cpu.shuffle). ``cov``
    = (G, dots, a_ref, G's cost): covariance updates (:mod:`solvers.duhl.covariance`; G (0, 0): none yet, built
    when gram_pays says so at a cost > 0), the working set's dots <A_i, z> and a at the last catch-up of z.
    Returns (n_work, fresh, target, dual_best, status): status 1 converged, 2 max_updates, 3 deadline or full,
    4 build G (then dots <A_i, z> of every i, a_ref = a, and call again)."""
    n = a.shape[0]
    everyone = np.arange(n)
    G, dots, a_ref, g_cost = cov
    from_g = accel.shape[0] > 1 and proof[3] == 0.0  # Anderson from G: no intercept (its objective needs z then)
    read, redo, zero_off, out_g, out_s = np.zeros(n, np.bool_), np.empty(n, np.int64), np.zeros(1), np.empty(n), np.empty(n)
    while True:
        if fresh:  # a global pass: certificate, then the next working set
            n_read = _global_gaps(D, a, z, off, mu, c, theta, gaps, s, memo, proof, z_last, norms, todo)
            counters[5] += n_read
            counters[2] += 1
            gap_sum = 0.0
            s_max = 0.0
            for i in range(n):
                gap_sum += gaps[i]
                s_max = max(s_max, abs(s[i]))
            q, ub = residual_stats(z, c * off[0], b)
            primal, dual, gap, dual_best = form_certificate(q, ub, c, cpu.sum_g(a, theta), gap_sum, s_max,
                                                            l1, tight, dual_best if carry_dual else -np.inf)
            row = int(counters[3])
            history[row, 0] = _now()
            history[row, 1] = counters[0]
            history[row, 2] = primal
            history[row, 3] = dual
            history[row, 4] = gap
            history[row, 5] = counters[1]
            kept = int(counters[4])
            if kept < iterates.shape[0]:
                iterates[kept] = a
            counters[3] += 1
            counters[4] += 1
            if gap <= tol_abs:
                return n_work, fresh, target, dual_best, 1
            build = G.shape[0] == 0 and g_cost > 0.0 and gram_pays(  # the last round's data work, predicted on
                g_cost, schedule, counters[1], gap, tol_abs,
                (2 * local_epochs * min(max_passes, max(1, n // n_work)) + 1) * work_entries(D, work[:n_work]))
            _plan_next_pass(schedule, counters[1], gap, tol_abs)
            if counters[0] >= max_updates:
                return n_work, fresh, target, dual_best, 2
            previous = work[:n_work].copy()
            n_work = 0
            grow = tight and ws_least > 0  # the Lasso's gaps at 0 already rank the coordinates
            if shrinking and (counters[1] > 0 or grow):
                cut = shrink_cut(theta) * gap_sum / n  # 0, or leaves out at most that share of the gap
                for i in range(n):
                    if gaps[i] > cut:
                        work[n_work] = i
                        n_work += 1
                if grow:
                    n_work = _grow_cap(work, n_work, a, gaps, ws_least)
            if n_work == 0 or n_work > n // 2:  # shrinking would save little: visit all
                work[:] = everyone
                n_work = n
            target = max(inner * gap, 0.5 * tol_abs)
            fresh = False
            if not _same_set(previous, work[:n_work], n):  # else the same passes: Anderson's iterates carry on
                order[:n_work] = work[:n_work]
                accel_state[0] = 0  # extrapolate from iterates of one working set only
            if G.shape[0] > 0:  # the working set's dots: the pass's s where it read the data, else a read
                _fresh_dots(D, work[:n_work], a, z, off, mu, c, theta, s, todo[:n_read], dots, a_ref, read, redo,
                            zero_off, out_g, out_s)
            if build:
                return n_work, fresh, target, dual_best, 4
            if counters[3] >= history.shape[0] or history[row, 0] >= deadline:
                return n_work, fresh, target, dual_best, 3
        active = order[:n_work]
        passes = local_epochs * min(max_passes, max(1, n // max(1, n_work)))
        if G.shape[0] > 0:  # passes from G as long as the data's catch-up of z (a pass from G: |W|^2 flops)
            passes = local_epochs * min(max_passes, max(1, n // n_work, work_entries(D, work[:n_work]) // n_work**2))
            for _ in range(passes):
                if not from_g or accel_state[0] == 0:  # with Anderson: one order per window
                    cpu.shuffle(active, rng)
                counters[0] += cov_epoch(G, everyone, active, work[:n_work], a, off, mu, sqnorm, c, theta, dots,
                                         z.shape[0])
                if from_g:
                    extrapolate_gram(G, active, a, dots, c, theta, accel, accel_state, out_g)
            catch_up(D, work[:n_work], a, a_ref, z, c)
            passes = 0
        for _ in range(passes):
            if accel.shape[0] <= 1 or accel_state[0] == 0:  # with Anderson: one order per window
                cpu.shuffle(active, rng)
            counters[0] += _epoch(D, everyone, active, a, z, off, mu, sqnorm, c, theta)
            if accel.shape[0] > 1:
                extrapolate(D, active, a, z, off, mu, c, b, theta, accel, accel_state)
        counters[1] += 1
        if counters[0] >= max_updates:
            fresh = True
        elif n_work == n:  # no working set: the next global pass when the rate predicts it matters
            fresh = counters[1] >= schedule[2]
        else:  # (from G, a working set's gap that rounding keeps above a tight target: a pass at the latest
            fresh = (_working_gap(D, work[:n_work], a, z, off, mu, c, theta, b, tight, l1, gaps, s, G, dots) <= target
                     or (G.shape[0] > 0 and counters[1] - schedule[0] >= COV_ROUNDS))  # COV_ROUNDS rounds on)
        if counters[1] % 8 == 0 and not fresh and _now() >= deadline:  # between passes too (Ctrl-C, max_time)
            return n_work, fresh, target, dual_best, 3


def solve_in_memory(problem, a, z, off, *, local_epochs, max_epochs, max_time, shrinking, tol_abs, seed_value,
                    record, t0, slice_s=0.2, inner=0.3, max_passes=16, iterates=None, anderson=0,
                    accel_state=None):
    """Run :func:`run_slice` until it stops; ``record(history rows, counters)`` streams each
    slice's rows. ``anderson``: K > 0 extrapolates every K passes (the Lasso family only; the
    caller checks); ``accel_state`` receives [stored, tries, kept] of the extrapolation.
    Returns (status, the best dual value of the run)."""
    n = problem.n_coords
    A = problem.A
    D = (A.indptr, A.indices, A.data) if problem.sparse else (A,)
    tight = tight_lasso(problem.theta)
    l1 = float(problem.theta.l1) if tight else 0.0
    work, order = np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    gaps, s = np.empty(n), np.empty(n)
    z_last, todo = z.copy(), np.arange(n, dtype=np.int64)
    counters = np.zeros(6)  # updates, rounds, gap passes, rows of this slice, rows of the run, reads
    memo = np.empty((n, 3))  # each coordinate's last s and the path lengths then
    proof = np.array([0.0, 0.0, problem.c * off[0] * z.shape[0], float(np.any(problem.mu)), 0.0])
    norms = np.column_stack([np.sqrt(problem.sqnorm), np.abs(problem.mu)])
    iterates = np.empty((0, n)) if iterates is None else iterates
    schedule = np.array([0.0, np.inf, 0.0])
    history = np.empty((HISTORY, 6))
    accel = np.empty((anderson + 1 if anderson > 0 else 0, n))
    accel_state = np.zeros(3) if accel_state is None else accel_state
    state = (n, True, 0.0, -np.inf)
    rng = cpu.random_state(seed_value)  # the shuffles' stream
    g_cost = gram_cost(problem) if COVARIANCE and fits(problem) else 0.0
    cov = (np.zeros((0, 0)), np.zeros(n), a.copy(), g_cost)
    while True:
        deadline = time.perf_counter() + slice_s
        if max_time is not None:
            deadline = min(deadline, t0 + max_time)
        counters[3] = 0
        n_work, fresh, target, dual_best, code = run_slice(
            D, a, z, off, problem.mu, problem.sqnorm, problem.c, problem.b, problem.theta, tight, l1,
            not problem.dual_form, tol_abs, float(max_epochs * n), deadline, local_epochs, max_passes, inner, shrinking,
            WS_LEAST, work, state[0], state[1], state[2], gaps, s, state[3], counters, schedule, history, iterates,
            accel, accel_state, memo, proof, z_last, norms, todo, order, rng, cov)
        state = (n_work, fresh, target, dual_best)
        record(history[: int(counters[3])], counters)
        if code == 1:
            return "converged", dual_best
        if code == 2:
            return "max_epochs", dual_best
        if code == 4:  # covariance updates from here on: G, and every coordinate's <A_i, z> from the data
            cov = (gram_matrix(problem), np.asarray(A @ z, dtype=np.float64), a.copy(), g_cost)
        if max_time is not None and time.perf_counter() - t0 >= max_time:
            return "max_time", dual_best
