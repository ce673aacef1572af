"""The compiled swap loop's block of a few coordinates (n <= gap_select.FEW: diabetes's 10), by
ranks: at 10 coordinates a round's kernels take ~0.1-0.2 us each, and the gap selection's keys and
sort (gap_select._radix_block) took ~0.17 us of a ~1 us round. The same block as np.lexsort's prefix
(largest gap first, resident first on ties, then by index; see gap_select)."""

from numba import njit


@njit(nogil=True, cache=True)
def _fit(coord_bytes, budget):
    """How many coordinates fit the budget when all have the same bytes (dense data; -1: not so)."""
    each = coord_bytes[0] if coord_bytes.shape[0] else 0
    for i in range(coord_bytes.shape[0]):
        each = each if coord_bytes[i] == each else -1
    return coord_bytes.shape[0] if each == 0 else (budget // each if each > 0 else -1)


@njit(nogil=True, cache=True, inline="always")
def _few_mask(gaps, resident, coord_bytes, budget, fit, keep, order):
    """The block of a few coordinates as the mask ``keep``: (its size, how many of it resident), or
    (-1, 0) with a NaN gap (``fit``: _fit's; ``order``: n int64 scratch). A coordinate's place in
    the order ends at the count of gaps at or above its own (comparisons that vectorize, one a pair:
    diabetes, 10 coordinates, ~40 ns apart, ~60 in the loop); when every coordinate has the same bytes (dense data) the
    prefix that fits is a count: a coordinate is in it when that count is within ``fit``, which
    takes its whole group of equal gaps. When they are fewer than fit (a group cut by the count),
    or the bytes differ, the order on ties (residents first, then by index) and the bytes in that
    order decide. Inlined into the loop: a call passing these arrays costs ~30 ns."""
    n = gaps.shape[0]
    nan, k, n_in = False, 0, 0
    for i in range(n):
        g, ge = gaps[i], 0
        for j in range(n):
            ge += gaps[j] >= g
        nan |= ge == 0  # NaN: not even equal to itself (the keys order it)
        kept = ge <= fit
        keep[i] = kept
        k += kept
        n_in += kept & resident[i]
    if nan:
        return -1, 0
    if fit >= 0 and k == min(fit, n):
        return k, n_in
    for i in range(n):
        g, r, rank = gaps[i], resident[i], 0
        for j in range(n):
            rank += (gaps[j] > g) | ((gaps[j] == g) & ((resident[j] > r) | ((resident[j] == r) & (j < i))))
        order[rank] = i
    used, k, n_in = 0, 0, 0
    for t in range(n):
        i = order[t]
        used += coord_bytes[i]
        keep[i] = used <= budget
        k += keep[i]
        n_in += keep[i] & resident[i]
    return k, n_in


@njit(nogil=True, cache=True, inline="always")
def _few_block(gaps, resident, coord_bytes, budget, fit, keep, m, order):
    """The compiled swap loop's gap block of a few coordinates by _few_mask (same arguments; ``m``:
    the size of the block the loop lists, -1 none), as block_select._next_block answers: (its size,
    held: the last block again, every one resident; listed: False, the block is in ``keep``), or
    k = -1 with a NaN gap (_next_block then). A function of its own, inlined alone: inlined with
    _next_block's other paths, _few_mask cost diabetes ~25 ns more a round (of ~0.65 us)."""
    k, n_in = _few_mask(gaps, resident, coord_bytes, budget, fit, keep, order)
    return k, k >= 0 and m >= 0 and n_in == k and k == m, False
