"""The compiled swap loop's pieces (solvers.duhl.compiled_swaps): the clock, NumPy's
pairwise sum, the block's buffers (a swap, the block's gaps) and the block selection.

The block is the resident set's own buffer: dense rows (``row_coord[r]``: the
coordinate row r holds, -1 none) or a CSR buffer of entries, with ``pos[i]``
the row of coordinate i (-1: not in the block).
"""

import hashlib
import time
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from solvers.duhl.gap_select import _gap_block
from solvers.duhl.inmemory import _csr, _now, _thread_cpu_ns  # noqa: F401 (compiled_swaps takes _now from here)
from solvers.kernels import cpu


# Numba's cache keys a function on its own file only (numba#1833): the loops' cache files
# (compiled_swaps, gram) are named after the code they compile in from other files, so an
# edit there recompiles
_SOURCES = ("duhl/compiled_parts.py", "duhl/gap_memory.py", "duhl/gap_select.py", "duhl/block_select.py",
            "duhl/few_select.py", "duhl/inmemory.py", "duhl/gram.py", "duhl/round_pass.py", "duhl/stale_plan.py",
            "kernels/cpu.py", "glm/certificates.py")
_DIGEST = hashlib.sha1(b"".join((Path(__file__).parents[1] / f).read_bytes() for f in _SOURCES)).hexdigest()[:12]


def loop_kernel(fn=None, *, inline="never"):
    """A compiled loop's function, cached under a name that changes with the code it compiles in;
    ``inline="always"``: compiled into its callers (a call passing arrays costs ~30 ns here)."""
    if fn is None:
        return lambda f: loop_kernel(f, inline=inline)
    fn.__name__ = f"{fn.__name__}__{_DIGEST}"
    return cpu.model_kernel(nogil=True, cache=True, error_model="numpy", inline=inline)(fn)


@intrinsic
def _cycles(typingctx):
    """The CPU's time-stamp counter (llvm.readcyclecounter): a wall clock in cycles at a constant
    rate, ~10 ns a reading here where clock_gettime's costs ~30 (a profile of 0.1 us parts)."""
    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(fn, [])
    return types.int64(), codegen


@njit(nogil=True, cache=True)
def _clock(kind):
    """The profile's clock: 1 wall, in the time-stamp counter's cycles (see cycles_per_second),
    2 this thread's CPU time in seconds."""
    return np.float64(_cycles()) if kind == 1 else _thread_cpu_ns() * 1e-9


def cycles_per_second(seconds=0.05):
    """The time-stamp counter's rate, against perf_counter over ``seconds``."""
    _clock(1)  # compiled first
    c0, t0 = _clock(1), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass
    hz = (_clock(1) - c0) / (time.perf_counter() - t0)
    if hz <= 0:  # llvm.readcyclecounter reads 0 where the target has no counter
        raise RuntimeError("this CPU has no time-stamp counter LLVM can read: the parts' wall clock is not available")
    return hz


@njit(nogil=True, cache=True)
def _block_sum(x, lo, n):
    """NumPy's sum of a leaf of its pairwise tree (n <= 128): eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3], x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    while i < n - n % 8:  # scalars, not a copy of x[lo:lo + 8]: an allocation a call (~40 ns at n = 10)
        k = lo + i
        r0, r1, r2, r3 = r0 + x[k], r1 + x[k + 1], r2 + x[k + 2], r3 + x[k + 3]
        r4, r5, r6, r7 = r4 + x[k + 4], r5 + x[k + 5], r6 + x[k + 6], r7 + x[k + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
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
                # an element loop from 0 over slices (a slice assignment costs ~3x; a loop over
                # range(lo, hi) compiles to a slower one: see cpu.sparse_dot)
                src_i, src_d = A[1][lo:hi], A[2][lo:hi]
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
                src = A[0][joined[k]]
                for e in range(rows.shape[1]):  # an element loop: a slice assignment costs ~3x (diabetes)
                    rows[r, e] = src[e]
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
def _fill(order, m, coord_bytes, budget, chosen):
    """The longest prefix of ``order[:m]`` that fits ``budget`` into ``chosen``; its length."""
    used, k = 0, 0
    while k < m and used + coord_bytes[order[k]] <= budget:
        used += coord_bytes[order[k]]
        chosen[k] = order[k]
        k += 1
    return k


@loop_kernel  # it compiles in gap_select's and cpu's code: cached under their digest
def _select(policy, gaps, resident, coord_bytes, budget, stream, cursor, chosen, order, keys):
    """The next block into ``chosen`` (Policy.select's rule: the longest prefix of the
    policy's order that fits ``budget``; ``order``, ``keys`` (uint64): scratch); returns
    its size. The gap policy's block comes as a set (see _gap_block)."""
    n = gaps.shape[0]
    if policy == 0:
        return _gap_block(gaps, resident, coord_bytes, budget, chosen, keys, order)
    if policy == 1:  # round robin from the cursor
        for i in range(n):
            order[i] = (i + cursor) % n
    else:  # a random order from the policy's stream (Policy's)
        for i in range(n):
            order[i] = i
        cpu.shuffle(order, stream)
    return _fill(order, n, coord_bytes, budget, chosen)


@njit(nogil=True, cache=True)
def _row(history, iterates, counters, a, primal, dual, gap, rnd, n_resident, certified):
    """A row for the state a: (time, updates, P_form, D_form, gap, round, bytes, swaps,
    n_resident, certified); a copy of a when the caller keeps iterates."""
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
    history[row, 9] = certified
    if counters[5] < iterates.shape[0]:
        iterates[int(counters[5])] = a
    counters[4] += 1
    counters[5] += 1


def _proof_arrays(problem, m, proving):
    """(norms, |mu|, path, at, proven, z scratch) of the proofs (see run_swap_slice); where none will
    run, empty ones but ``proven`` (the round's pass reads it): a solve's set-up, ~5 us less."""
    n = problem.n_coords
    if not proving:
        return np.empty(0), np.empty(0), np.zeros(2), np.empty((0, 2)), np.zeros(n, dtype=bool), np.empty(0)
    return (np.sqrt(problem.sqnorm), np.abs(problem.mu), np.zeros(2), np.zeros((n, 2)), np.zeros(n, dtype=bool),
            np.empty(m))


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
        rset.reindex()


def _form(problem, a, z, off, gap_sum, s_max, dual_best):
    """Problem.certify's numbers in the form's orientation (P_form, D_form, gap, dual_best)."""
    P, D, gap, best = problem.certify(a, z, off, gap_sum=gap_sum, s_max=s_max, dual_best=dual_best)
    return (-D, -P, gap, best) if problem.dual_form else (P, D, gap, best)
