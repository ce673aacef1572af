"""DuHL's gap selection, compiled: the block as a set, by radix selection on the gaps' bits.

The gap policy's block is the longest prefix of np.lexsort((~resident, -gaps)) (largest gap
first, NaN last, resident first on ties, then by index) whose bytes fit the budget. A set is
all a block needs (epochs and gap sums visit it in coordinate order), so no sort: each gap as
an unsigned key in the same order, histograms of bytes by the keys' bits find where the budget
runs out (levels of at most MAX_BITS bits, fewer for fewer candidates: a histogram costs its
size), down to FEW candidates (sorted) or to equal gaps. Before that, one pass checks whether
the block the coordinates hold already is that prefix (_same_block; often so on the dual SVM,
whose gaps are mostly zeros).
"""

import numpy as np
from numba import njit

MAX_BITS, FEW = 12, 32


@njit(nogil=True, cache=True)
def _key(bits, g):
    """The gap g (``bits``: its bits) as an unsigned integer in the same order: -0.0 as 0.0
    (a tie, as np.lexsort sees them), NaN lowest (last)."""
    sign = np.uint64(1 << 63)
    b = np.uint64(0) if bits == sign else bits
    u = b ^ (np.uint64(np.int64(b) >> 63) | sign)
    return u if g == g else np.uint64(0)


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
def _same_block(gaps, resident, coord_bytes, budget, chosen):
    """Whether the resident coordinates are the block already (then in ``chosen``: their count
    returned, else -1): each resident's gap at least each other's (on a tie the resident comes
    first), their bytes within ``budget``, and the first of the others in the order (largest
    gap, lowest index) not fitting in what is left. A branch-free pass that vectorizes (~0.5 ns
    a coordinate; tracking that first one, or listing the residents, in it: 5x), a scan for the
    first one, then the list."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    none = ~np.uint64(0)
    low_in, high_out, used = none, np.uint64(0), 0
    for i in range(n):
        u = _key(bits[i], gaps[i])
        r = resident[i]
        low_in = min(low_in, u if r else none)
        high_out = max(high_out, np.uint64(0) if r else u)
        used += coord_bytes[i] * np.int64(r)
    if low_in < high_out or used > budget:
        return -1
    for i in range(n):
        if not resident[i] and _key(bits[i], gaps[i]) == high_out:
            if coord_bytes[i] <= budget - used:
                return -1
            break
    k = 0
    for i in range(n):
        chosen[k] = i
        k += resident[i]
    return k


@njit(nogil=True, cache=True)
def _take(order, coord_bytes, remaining, chosen, k):
    """Appends ``order``'s coordinates to ``chosen`` from ``k`` while their bytes fit:
    (k, the bytes left, whether one did not fit)."""
    for t in range(order.shape[0]):
        i = np.int64(order[t])
        if coord_bytes[i] > remaining:
            return k, remaining, True
        remaining -= coord_bytes[i]
        chosen[k] = i
        k += 1
    return k, remaining, False


@njit(nogil=True, cache=True)
def _gap_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The gap policy's block into ``chosen`` (in no particular order), its size returned (see
    the module's docstring): each gap's key (``keys``); a histogram of bytes by the keys' next
    bits finds the bucket where the budget runs out, those above it join, and only that
    bucket's coordinates (``cand``) go on to the next bits, down to a few (sorted) or to equal
    gaps (taken resident first, by index). O(n): a sorted prefix was 1.4 ms of a 5.8 ms round
    on w8a[20000]'s dual logistic (~8,000 distinct gaps), this ~0.1 ms."""
    k = _same_block(gaps, resident, coord_bytes, budget, chosen)
    if k >= 0:
        return k
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    low, high = ~np.uint64(0), np.uint64(0)
    big = n >= 4 << MAX_BITS  # the first level's histogram (the top bits: sign, exponent) in this pass
    # two first-level histograms, odd and even coordinates: no chain of adds to one bucket (many equal gaps)
    hist = np.zeros(2 << MAX_BITS, dtype=np.int64) if big else np.empty(1 << MAX_BITS if n > FEW else 1, np.int64)
    top_shift = np.uint64(64 - MAX_BITS)
    for i in range(n):
        u = _key(bits[i], gaps[i])
        keys[i] = u
        cand[i] = i
        low, high = min(low, u), max(high, u)
        if big:
            hist[(i & 1) * (1 << MAX_BITS) + np.int64(u >> top_shift)] += coord_bytes[i]
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
        for i in range(n):  # the edge bucket's key range: a pass that vectorizes (through cand: 4x slower)
            at = (keys[i] >> top_shift) == edge
            low = min(low, keys[i] if at else ~np.uint64(0))
            high = max(high, keys[i] if at else np.uint64(0))
    while m > FEW and low != high:
        bits_left = _bit_length(low ^ high)  # the bits below the candidates' common prefix
        nb = min(bits_left, MAX_BITS, max(4, _bit_length(np.uint64(m)) - 2))
        shift = np.uint64(bits_left - nb)
        mask = np.uint64((1 << nb) - 1)
        hist[: 1 << nb] = 0
        for t in range(m):
            hist[(keys[cand[t]] >> shift) & mask] += coord_bytes[cand[t]]
        top, remaining = _boundary(hist[: 1 << nb], remaining)
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
        k, remaining, full = _take(cand[:n_res], coord_bytes, remaining, chosen, k)
        if not full:
            k = _take(keys[:n_out], coord_bytes, remaining, chosen, k)[0]
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
    return _take(cand[:m], coord_bytes, remaining, chosen, k)[0]
