"""The compiled swap loop's pieces (solvers.duhl.compiled_swaps): the clock, NumPy's
pairwise sum, the block's buffers (a swap, the block's gaps) and the block selection.

The block is the resident set's own buffer: dense rows (``row_coord[r]``: the
coordinate row r holds, -1 none) or a CSR buffer of entries, with ``pos[i]``
the row of coordinate i (-1: not in the block).
"""

import numpy as np
from numba import njit
from numba.extending import overload

from solvers.duhl.inmemory import _csr, _now, _thread_cpu_ns  # noqa: F401 (compiled_swaps takes _now from here)
from solvers.glm.models import zero_interval
from solvers.kernels import cpu


@njit(nogil=True, cache=True)
def _clock(kind):
    """The profile's clock in seconds: 1 wall (perf_counter's), 2 this thread's CPU time."""
    return _now() if kind == 1 else _thread_cpu_ns() * 1e-9


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
def _fill(order, m, coord_bytes, budget, chosen):
    """The longest prefix of ``order[:m]`` that fits ``budget`` into ``chosen``; its length."""
    used, k = 0, 0
    while k < m and used + coord_bytes[order[k]] <= budget:
        used += coord_bytes[order[k]]
        chosen[k] = order[k]
        k += 1
    return k


# the gap policy's block is a set (epochs and gap sums visit it in coordinate order), found
# by radix selection on the gaps' bits: levels of at most MAX_BITS bits (fewer for fewer
# candidates: a histogram costs its size), each over the candidates the last one left, down
# to FEW (sorted) or to equal gaps
MAX_BITS, FEW = 12, 32


@njit(nogil=True, cache=True)
def _boundary(hist, remaining):
    """The highest bucket whose bytes, after all those above it, pass ``remaining`` (-1:
    none), and the bytes left for it."""
    for b in range(hist.shape[0] - 1, -1, -1):
        if hist[b] > remaining:
            return b, remaining
        remaining -= hist[b]
    return -1, remaining


@njit(nogil=True, cache=True)
def _bit_length(x):
    bits = 0
    while x:
        x >>= np.uint64(1)
        bits += 1
    return bits


@njit(nogil=True, cache=True)
def _gap_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The gap policy's block into ``chosen`` (in no particular order), its size returned:
    the coordinates of the longest prefix of np.lexsort((~resident, -gaps)) (largest gap
    first, NaN last, resident first on ties, then by index) whose bytes fit ``budget``,
    without sorting: each gap's bits as an unsigned key in the same order (``keys``); a
    histogram of bytes by the keys' next bits finds the bucket where the budget runs out,
    those above it join, and only that bucket's coordinates (``cand``) go on to the next
    bits, down to a few (sorted) or to equal gaps (taken resident first, by index). O(n):
    a sorted prefix was 1.4 ms of a 5.8 ms round on w8a[20000]'s dual logistic (~8,000
    distinct gaps), this ~0.1 ms."""
    n = gaps.shape[0]
    one = np.empty(1)
    one_bits = one.view(np.uint64)
    sign = np.uint64(1 << 63)
    low, high = ~np.uint64(0), np.uint64(0)
    big = n >= 4 << MAX_BITS  # the first level's histogram (the top bits: sign, exponent) in this pass
    # two first-level histograms, odd and even coordinates: no chain of adds to one bucket (many equal gaps)
    hist = np.zeros(2 << MAX_BITS, dtype=np.int64) if big else np.empty(1 << MAX_BITS if n > FEW else 1, np.int64)
    top_shift = np.uint64(64 - MAX_BITS)
    for i in range(n):
        g = gaps[i]
        one[0] = g + 0.0  # -0.0 -> 0.0: a tie, as np.lexsort sees them
        b = one_bits[0]
        u = b ^ (np.uint64(np.int64(b) >> 63) | sign)  # the float order as unsigned integers
        if g != g:
            u = np.uint64(0)  # NaN last
        keys[i] = u
        cand[i] = i
        low, high = min(low, u), max(high, u)
        if big:
            hist[((i & 1) << MAX_BITS) + (u >> top_shift)] += coord_bytes[i]
    k, m, remaining = 0, n, budget
    if big and low != high:
        hist[: 1 << MAX_BITS] += hist[1 << MAX_BITS:]
        top, remaining = _boundary(hist[: 1 << MAX_BITS], remaining)
        if top < 0:  # everything fits
            chosen[:n] = cand[:n]
            return n
        edge = np.uint64(top)
        m = 0
        for i in range(n):  # branch-free: which side of the edge a coordinate falls is unpredictable
            h = keys[i] >> top_shift
            chosen[k] = i
            k += h > edge
            cand[m] = i
            m += h == edge
        low, high = ~np.uint64(0), np.uint64(0)
        for t in range(m):
            low, high = min(low, keys[cand[t]]), max(high, keys[cand[t]])
    while m > FEW and low != high:
        bits_left = _bit_length(low ^ high)  # the bits below the candidates' common prefix
        bits = min(bits_left, MAX_BITS, max(4, _bit_length(np.uint64(m)) - 2))
        shift = np.uint64(bits_left - bits)
        mask = np.uint64((1 << bits) - 1)
        hist[: 1 << bits] = 0
        for t in range(m):
            hist[(keys[cand[t]] >> shift) & mask] += coord_bytes[cand[t]]
        top, remaining = _boundary(hist[: 1 << bits], remaining)
        if top < 0:  # every candidate fits
            chosen[k:k + m] = cand[:m]
            return k + m
        edge = np.uint64(top)
        m_next = 0
        low, high = ~np.uint64(0), np.uint64(0)
        for t in range(m):  # branch-free: which side of the edge a coordinate falls is unpredictable
            i = cand[t]
            u = keys[i]
            h = (u >> shift) & mask
            chosen[k] = i
            k += h > edge
            cand[m_next] = i
            m_next += h == edge
        m = m_next
        for t in range(m):
            low, high = min(low, keys[cand[t]]), max(high, keys[cand[t]])
    if m > FEW:  # equal gaps: resident first, then by index (cand is in index order; keys now scratch)
        n_res, n_out = 0, 0
        for t in range(m):  # branch-free split (often most of the coordinates: w8a's dual SVM's zeros)
            i = cand[t]
            cand[n_res] = i
            n_res += resident[i]
            keys[n_out] = i
            n_out += not resident[i]
        for t in range(n_res + n_out):
            i = cand[t] if t < n_res else np.int64(keys[t - n_res])
            if coord_bytes[i] > remaining:
                return k
            remaining -= coord_bytes[i]
            chosen[k] = i
            k += 1
        return k
    for j in range(1, m):  # a few: a stable insertion sort by (gap descending, resident first)
        item = cand[j]
        q = j
        while q > 0:
            prev = cand[q - 1]
            if keys[prev] > keys[item] or (keys[prev] == keys[item] and (resident[prev] or not resident[item])):
                break
            cand[q] = prev
            q -= 1
        cand[q] = item
    for t in range(m):
        i = cand[t]
        if coord_bytes[i] > remaining:
            return k
        remaining -= coord_bytes[i]
        chosen[k] = i
        k += 1
    return k


@njit(nogil=True, cache=True)
def _select(policy, gaps, resident, coord_bytes, budget, rng, cursor, chosen, order, keys):
    """The next block into ``chosen`` (Policy.select's rule: the longest prefix of the
    policy's order that fits ``budget``; ``order``, ``keys`` (uint64): scratch); returns
    its size. The gap policy's block comes as a set (see _gap_block)."""
    n = gaps.shape[0]
    if policy == 0:
        return _gap_block(gaps, resident, coord_bytes, budget, chosen, keys, order)
    if policy == 1:  # round robin from the cursor
        for i in range(n):
            order[i] = (i + cursor) % n
    else:  # rng.permutation(n)
        for i in range(n):
            order[i] = i
        rng.shuffle(order)
    return _fill(order, n, coord_bytes, budget, chosen)


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


# the gap memory's proofs (solvers.duhl.gap_memory) in the compiled loop, by the model's
# compiled zero_interval (the twin of its zero_gap, tested in test_proven_gaps.py)
@njit(nogil=True, cache=True)
def _proven(theta, a, s, norm, mu, path, at, u_norm, margin, rounding):
    """GapMemory.prove for one coordinate: whether its gap is 0 now, its s (computed when the
    dual path's length was ``at``) kept inside the model's zero interval at a
    (solvers.glm.models.zero_interval) by more than how far it can have moved since
    (``path``: the length now), plus its rounding."""
    lo, hi = zero_interval(theta, a)
    if not lo <= hi:
        return False
    drift = norm * (path[0] - at[0] + rounding * u_norm)
    drift += mu * (path[1] - at[1])
    lo_margin = margin * abs(lo) if np.isfinite(lo) else 0.0
    hi_margin = margin * abs(hi) if np.isfinite(hi) else 0.0
    return s - drift >= lo + lo_margin and s + drift <= hi - hi_margin


@njit(nogil=True, cache=True)
def _step(z_old, z, shift_old, shift, centred, path):
    """dual_step (solvers.duhl.gap_memory) added to ``path``; returns ||z|| (for s's rounding)."""
    m = z.shape[0]
    total = 0.0
    for k in range(m):
        total += z[k] - z_old[k]
    mean = total / m if centred else 0.0
    sq, zz = 0.0, 0.0
    for k in range(m):
        d = z[k] - z_old[k] - mean
        sq += d * d
        zz += z[k] * z[k]
    path[0] += np.sqrt(sq)
    if centred:
        path[1] += abs(total - (shift - shift_old))
    return np.sqrt(zz)
