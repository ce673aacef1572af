"""What the compiled round loops share: the form of the problem as the kernels see it, NumPy's pairwise sum, the rows they record and the slices they
run in.

A compiled loop runs many rounds per call (a *slice*) and hands its rows back at the end of
each. A slice ends by work done, never by the clock: after ``slice_updates`` coordinate updates
(about SLICE_ENTRIES data entries), when its history is full, or when the loop needs Python (the
Gram matrix to build). The loop's state is carried whole between slices, so where a slice ends
changes no iterate; the caller checks ``max_time`` between slices.
"""

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from solvers.kernels.cache import compiled
from solvers.kernels.cpu import copy_to

# a slice's work: about this many data entries of epochs (tens of ms on this project's machines), so
# that trace rows stream, Ctrl-C and max_time are seen a few times a second however large the data
SLICE_ENTRIES = 1 << 25
HISTORY_ROWS = 1024  # rows a slice can record before it returns
CONVERGED, MAX_UPDATES, SLICE_END, BUILD_GRAM = 1, 2, 3, 4  # how a slice ended
STATUS = {CONVERGED: "converged", MAX_UPDATES: "max_epochs"}

# a row: a state's certificate (the form's primal and dual: see Problem.certify) and the counters then
ROW = np.dtype([("time", np.float64), ("updates", np.float64), ("primal", np.float64), ("dual", np.float64),
                ("gap", np.float64), ("round", np.int64), ("bytes_h2d", np.int64), ("swaps", np.int64),
                ("n_resident", np.int64), ("certified", np.int64)])


class Form(NamedTuple):
    """The problem as the kernels see it: coordinate means ``mu`` and squared norms ``sqnorm``,
    f's ``c`` and ``b`` (a loss model's: 1 and the labels, unused), the model's ``theta``; ``tight``:
    the rescaled certificate of a pure L1 penalty with its ``l1``; ``carry_dual``: the best dual value of earlier states certifies later ones (the
    coordinates are the model's coefficients)."""
    mu: np.ndarray
    sqnorm: np.ndarray
    c: float
    b: np.ndarray
    theta: tuple
    tight: bool
    l1: float
    carry_dual: bool


def form_of(problem):
    """The kernels' :class:`Form` of a :class:`solvers.glm.problems.Problem`."""
    from solvers.glm.certificates import tight_l1

    tight = bool(tight_l1(problem.theta))
    return Form(problem.mu, problem.sqnorm, float(problem.c), problem.b, problem.theta, tight,
                float(problem.theta.l1) if tight else 0.0, not problem.dual_form)


def data_of(A, sparse):
    """The compiled loops' data: (indptr, indices, data) of a CSR matrix, or (rows,)."""
    return (A.indptr, A.indices, A.data) if sparse else (A,)


def slice_updates(problem):
    """Coordinate updates per slice: about SLICE_ENTRIES entries of data, at least one epoch."""
    A = problem.A
    entries = A.nnz if problem.sparse else A.shape[0] * A.shape[1]
    per_coordinate = max(1.0, entries / max(1, problem.n_coords))
    return float(max(problem.n_coords, int(SLICE_ENTRIES / per_coordinate)))


def new_history():
    return np.zeros(HISTORY_ROWS, dtype=ROW)


def record_history(trace, problem, rows, t0, **fixed):
    """Trace rows from a slice's ``rows`` (ROW records), in the user's orientation."""
    if rows.shape[0] == 0:
        return
    primal, dual = (-rows["dual"], -rows["primal"]) if problem.dual_form else (rows["primal"], rows["dual"])
    P0 = problem.P0
    trace.extend(round=rows["round"], time_s=rows["time"] - t0, epoch=rows["updates"] / problem.n_coords,
                 primal=primal, dual=dual, gap=rows["gap"],
                 rel_gap=rows["gap"] / P0 if P0 > 0 else np.zeros(rows.shape[0]), certified=rows["certified"],
                 bytes_h2d=rows["bytes_h2d"], swaps=rows["swaps"], n_resident=rows["n_resident"], **fixed)


# ------------------------------------------------------------------------ the clock ---
def _clock_gettime_ns(clock_id):
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
    """CLOCK_MONOTONIC in ns, perf_counter's clock on Linux (an object-mode call costs ~1 us)."""
    return types.int64(), _clock_gettime_ns(1)


@compiled
def now():
    """perf_counter's seconds, for the rows' times (the clock decides nothing)."""
    return _monotonic_ns() * 1e-9


# ------------------------------------------------------------------------ the rows ---
@compiled
def write_row(history, row, iterates, kept, a, updates, primal, dual, gap, rnd, bytes_h2d, swaps, n_resident,
              certified):
    """Row ``row`` of ``history``; a copy of a into ``iterates[kept]`` while the caller keeps them."""
    r = history[row]
    r.time = now()
    r.updates = updates
    r.primal = primal
    r.dual = dual
    r.gap = gap
    r.round = rnd
    r.bytes_h2d = bytes_h2d
    r.swaps = swaps
    r.n_resident = n_resident
    r.certified = certified
    if kept < iterates.shape[0]:
        copy_to(a, iterates[kept])


@compiled(inline="always")
def _leaf_sum(x, lo, n):
    """NumPy's sum of a leaf of its pairwise tree (n <= 128): eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3], x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    while i < n - n % 8:
        k = lo + i
        r0, r1, r2, r3 = r0 + x[k], r1 + x[k + 1], r2 + x[k + 2], r3 + x[k + 3]
        r4, r5, r6, r7 = r4 + x[k + 4], r5 + x[k + 5], r6 + x[k + 6], r7 + x[k + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return res


@compiled
def pairwise_sum(x):
    """np.sum(x) bit for bit: NumPy's pairwise tree (halves cut at multiples of 8, leaves of at
    most 128), walked with a stack (a recursive function breaks Numba's cache: numba#6061). The
    compiled loops sum the gaps as the Python loop does, so both give the same rows."""
    if x.shape[0] <= 128:
        return _leaf_sum(x, 0, x.shape[0])
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)
    vals = np.empty(64)
    los[0], ns[0], top, n_vals = 0, x.shape[0], 0, 0
    while top >= 0:
        lo, n = los[top], ns[top]
        if n <= 128:
            vals[n_vals] = _leaf_sum(x, lo, n)
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
