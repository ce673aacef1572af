"""The compiled swap loop's block of a few coordinates (n <= gap_select.FEW: diabetes's 10), by
ranks or by the fit-th largest gap, as a mask and as the bits of an integer (for
round_pass._bits_pass): at 10 coordinates a round's kernels take ~0.1-0.2 us each, and the gap
selection's keys and sort (gap_select._radix_block) took ~0.17 us of a ~1 us round. The same block as
np.lexsort's prefix (largest gap first, resident first on ties, then by index; see gap_select)."""

import numpy as np
from numba import njit

NO_BITS = np.uint64(0)  # a mask of at most 64 coordinates as the bits of an integer (FEW: 32)
INF_BITS = np.int64(0x7FF0000000000000)  # +inf's bits (NaN's are more)


@njit(nogil=True, cache=True)
def _fit(coord_bytes, budget):
    """How many coordinates fit the budget when all have the same bytes (dense data; -1: not so)."""
    each = coord_bytes[0] if coord_bytes.shape[0] else 0
    for i in range(coord_bytes.shape[0]):
        each = each if coord_bytes[i] == each else -1
    return coord_bytes.shape[0] if each == 0 else (budget // each if each > 0 else -1)


@njit(nogil=True, cache=True, inline="always")
def _fit_floor(gaps, fit):
    """The fit-th largest gap (counted with its equals) as a float's bits, and how many gaps are at or
    above it; (-1, 0) when the gaps' bits do not order them as they do (a NaN gap, a negative one, -0.0)
    or fit < 0 (the bytes differ). On the bits as integers: their max vectorizes, the floats' does not.
    Its fit - 1 passes at most (fewer with equal gaps), each a max and a count over the gaps, replace the
    ranks' n^2 comparisons."""
    ib, n = gaps.view(np.int64), gaps.shape[0]
    top, low = np.int64(-1), np.int64(0)
    for j in range(n):
        top, low = max(top, ib[j]), min(low, ib[j])
    if fit < 0 or low < 0 or top > INF_BITS:
        return np.int64(-1), 0
    if fit >= n:
        return np.int64(0), n  # every gap (all at or above +0.0)
    t, count = top, 0
    for j in range(n):
        count += ib[j] >= t
    while count < fit:  # the next smaller gap
        below = np.int64(-1)
        for j in range(n):
            below = max(below, ib[j] if ib[j] < t else np.int64(-1))
        t = below
        for j in range(n):
            count += ib[j] == t
    return t, count


@njit(nogil=True, cache=True, inline="always")
def _few_mask(gaps, resident, coord_bytes, budget, fit, keep, order):
    """The block of a few coordinates as the mask ``keep`` and as bits: (its size, its bits, the
    resident mask's bits), or (-1, 0, 0) with a NaN gap (``fit``: _fit's; ``order``: n int64 scratch).
    When every coordinate has the same bytes (dense data) the prefix that fits is a count: a
    coordinate is in it when the count of gaps at or above its own is within ``fit``, which takes its
    whole group of equal gaps. With fit below half the coordinates, that is the gaps at or above the
    fit-th largest (_fit_floor: diabetes at memory_budget 0.25, fit 2 of 10, ~45 -> ~37 ns in the
    loop); else each coordinate's count (comparisons that vectorize, one a pair). When they are fewer
    than fit (a group cut by the count), or the bytes differ, the order on ties (residents first,
    then by index) and the bytes in that order decide. Inlined into the loop: a call passing these
    arrays costs ~30 ns."""
    n = gaps.shape[0]
    t, count = _fit_floor(gaps, fit) if 2 * fit < n else (np.int64(-1), 0)  # (else the ranks cost less)
    if t >= 0 and count <= fit:  # by the fit-th largest gap
        ib, k, bits, was = gaps.view(np.int64), 0, NO_BITS, NO_BITS
        for i in range(n):
            kept = ib[i] >= t
            keep[i] = kept
            k += kept
            bits |= np.uint64(kept) << np.uint64(i)
            was |= np.uint64(resident[i]) << np.uint64(i)
        return k, bits, was
    nan, k, bits, was = False, 0, NO_BITS, NO_BITS
    for i in range(n):
        g, ge = gaps[i], 0
        for j in range(n):
            ge += gaps[j] >= g
        nan |= ge == 0  # NaN: not even equal to itself (the keys order it)
        kept = ge <= fit
        keep[i] = kept
        k += kept
        bits |= np.uint64(kept) << np.uint64(i)
        was |= np.uint64(resident[i]) << np.uint64(i)
    if nan:
        return -1, NO_BITS, NO_BITS
    if fit >= 0 and k == min(fit, n):
        return k, bits, was
    for i in range(n):
        g, r, rank = gaps[i], resident[i], 0
        for j in range(n):
            rank += (gaps[j] > g) | ((gaps[j] == g) & ((resident[j] > r) | ((resident[j] == r) & (j < i))))
        order[rank] = i
    used, k, bits = 0, 0, NO_BITS
    for t in range(n):
        i = order[t]
        used += coord_bytes[i]
        keep[i] = used <= budget
        k += keep[i]
        bits |= np.uint64(keep[i]) << np.uint64(i)
    return k, bits, was


@njit(nogil=True, cache=True, inline="always")
def _few_block(gaps, resident, coord_bytes, budget, fit, keep, m, order):
    """The compiled swap loop's gap block of a few coordinates by _few_mask (same arguments; ``m``:
    the size of the block the loop lists, -1 none), as block_select._next_block answers, and the
    masks' bits for round_pass._bits_pass: (its size, held: the last block again, every one
    resident; listed: False, the block is in ``keep``; its bits; the resident mask's bits), or
    k = -1 with a NaN gap (_next_block then). A function of its own, inlined alone: inlined with
    _next_block's other paths, _few_mask cost diabetes ~25 ns more a round (of ~0.65 us)."""
    k, bits, was = _few_mask(gaps, resident, coord_bytes, budget, fit, keep, order)
    return k, k >= 0 and m >= 0 and bits == was and k == m, False, bits, was
