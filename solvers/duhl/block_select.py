"""The compiled swap loop's next block (solvers.duhl.compiled_swaps): the gap policy's block as gap_select defines
it (np.lexsort's prefix that fits the budget), by the cheapest way that answers (a few coordinates': by their
ranks, in solvers.duhl.few_select, called by the loop first): a small block (the last one at most TOP / 2) among
the TOP best of the order, from a floor (_top_block); the resident block again (gap_select._holds); where the
last block ended, at a gap of 0 (gap_select._edge_mask); else by the bits (from gap_select.BIG coordinates
as a mask: _radix_mask)."""

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from solvers.duhl.gap_select import (BIG, MAX_BITS, ZERO_KEY, _boundary, _edge_mask, _holds, _key, _list, _radix_block,
                                     _radix_levels, _resident_keys, _take)

# Numba's cache keys a function on its own file (numba#1833): the functions here call gap_select's
_DIGEST = hashlib.sha1((Path(__file__).parent / "gap_select.py").read_bytes()).hexdigest()[:12]
TOP = 16  # a block of at most this many coordinates (of more than FEW) by one pass keeping the best
# after a block by the bits that ends among gaps above 0 the next comes by the bits at once, and after one that
# ends among the gaps of 0 the next is tried there first (_next_block's hints), but every PROBE-th round asks
PROBE = 8  # in full (the shortcuts' pass: on w8a's logistic at budget 0.05 ~12 us of ~130, never answering)
NO_HINT, BY_BITS, AT_ZERO = 0, 1, 2  # how the last block came (_next_block)
FLOOR_TRIES = 4  # _floor_bits's gaps tried: half the largest, then an eighth of the last, ...
EXPONENT_ONE = np.int64(1 << 52)  # a float's bits plus this: the float times 2
INF_BITS = np.int64(0x7FF0000000000000)  # +inf's bits (NaN's are more)


def _with_digest(fn):
    fn.__qualname__ = f"{fn.__name__}__{_DIGEST}"  # the cache file's name
    return fn


@njit(nogil=True, cache=True, inline="always")
@_with_digest
def _next_block(gaps, resident, coord_bytes, budget, keep, m, chosen, keys, cand, hint=NO_HINT):
    """The compiled swap loop's gap block: (k, held, listed, how it came). The resident block again
    (held when the loop lists it already, ``m`` >= 0; else ``keep`` set to it), the block in ``keep``
    (where it ended, or by the bits from BIG coordinates), or in ``chosen[:k]`` (listed). The loop asks
    few_select._few_block first for a few coordinates (at most FEW), and here only with a NaN gap.
    How it came, the ``hint`` for the next round (the same block whatever the hint: it only saves
    time): BY_BITS, by the bits (as a mask) ending among gaps above 0, where the resident block and its
    edge at a gap of 0 did not answer and will likely not next round, so the next comes by the bits at
    once; AT_ZERO, at the gaps of 0 (gap_select._edge_mask), so the next tries there first, without the
    residents' pass (w8a's dual SVM at budget 0.05: ~12 us of ~60 a round; the loop finds a held block
    from its lists)."""
    if 0 <= m <= TOP // 2:  # the last block small: this one likely among the TOP best (the loop finds
        k = _top_block(gaps, resident, coord_bytes, budget, chosen, keys, cand)  # whether it is the last)
        if k >= 0:
            return k, False, True, NO_HINT
    if hint == AT_ZERO:
        k = _edge_mask(gaps, resident, coord_bytes, budget, ZERO_KEY, keep)
        if k >= 0:
            return k, False, False, AT_ZERO
    if hint != BY_BITS or gaps.shape[0] < BIG:
        low_in, high_out, used = _resident_keys(gaps, resident, coord_bytes)
        if _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
            if m >= 0:
                return m, True, False, NO_HINT
            keep[:] = resident
            return _list(resident, chosen), False, False, NO_HINT
        if low_in == ZERO_KEY and hint != AT_ZERO:  # (see ZERO_KEY; tried already with the hint)
            k = _edge_mask(gaps, resident, coord_bytes, budget, low_in, keep)
            if k >= 0:
                return k, False, False, AT_ZERO
    if gaps.shape[0] >= BIG:  # by the bits: the block as a mask (the loop lists it), a list when few
        k, above = _radix_mask(gaps, resident, coord_bytes, budget, keep, chosen, keys, cand)
        return k, False, False, BY_BITS if above else NO_HINT
    return _radix_block(gaps, resident, coord_bytes, budget, chosen, keys, cand), False, True, NO_HINT


@njit(nogil=True, cache=True)
@_with_digest
def _radix_mask(gaps, resident, coord_bytes, budget, keep, chosen, keys, cand):
    """gap_select._radix_block's block (at least BIG coordinates) into ``keep``: (its size, whether it
    ends among gaps above 0). The first level's histogram of the keys' top bits (sign, exponent) in
    the keys' pass; then one pass that vectorizes writes the mask above the edge bucket and finds that
    bucket's key range, and one lists its coordinates for the next levels. The list's partition of
    every coordinate, and the loop's mask from the list, cost more: w8a's logistic at budget 0.05,
    ~45,000 distinct gaps, the selection and the mask ~156 -> ~128 us a round on captured states."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    top_shift = np.uint64(64 - MAX_BITS)
    hist = np.zeros(2 << MAX_BITS, dtype=np.int64)  # odd and even coordinates: no chain of adds to a bucket
    for i in range(n):
        u = _key(bits[i], gaps[i])
        keys[i] = u
        hist[(i & 1) * (1 << MAX_BITS) + np.int64(u >> top_shift)] += coord_bytes[i]
    hist[: 1 << MAX_BITS] += hist[1 << MAX_BITS:]
    top, remaining = _boundary(hist[: 1 << MAX_BITS], budget)
    if top < 0:  # everything fits
        keep[:] = True
        return n, False
    edge, k = np.uint64(top), 0
    low, high = ~np.uint64(0), np.uint64(0)
    for i in range(n):
        h = keys[i] >> top_shift
        keep[i] = h > edge
        k += h > edge
        low = min(low, keys[i] if h == edge else ~np.uint64(0))
        high = max(high, keys[i] if h == edge else np.uint64(0))
    m = 0
    for i in range(n):  # branch-free: which coordinates are in the edge bucket is unpredictable
        cand[m] = i
        m += (keys[i] >> top_shift) == edge
    k = _radix_levels(keys, cand, m, low, high, hist, remaining, coord_bytes, resident, chosen, k, keep, True)
    return k, edge > (ZERO_KEY >> top_shift)  # (the edge bucket's gaps above 0: the block's too)


@njit(nogil=True, cache=True)
def _floor_bits(gaps, coord_bytes, budget):
    """A gap every coordinate of the block has, as the bits of a positive float (0: none found):
    half the largest gap, or an eighth of that, down FLOOR_TRIES times, the first whose coordinates'
    bytes (those of gaps at or above it) pass ``budget``, so that the block's prefix ends among them.
    Passes on the gaps' bits as integers, which vectorize (~0.1 ns a coordinate; the floats' max
    does not: ~0.45): a positive float's bits order as it does; none with a NaN gap (its bits are
    above +inf's)."""
    ib = gaps.view(np.int64)
    top = np.int64(0)
    for i in range(ib.shape[0]):
        top = max(top, ib[i])
    floor = top - EXPONENT_ONE
    for _ in range(FLOOR_TRIES if top <= INF_BITS else 0):
        if floor <= 0:
            break
        total = 0
        for i in range(ib.shape[0]):
            total += coord_bytes[i] * np.int64(ib[i] >= floor)
        if total > budget:
            return floor
        floor -= 3 * EXPONENT_ONE
    return np.int64(0)


@njit(nogil=True, cache=True, inline="always")
def _keep_top(i, u, resident, keys, cand, filled):
    """Coordinate i (key u) into the TOP first, sorted in ``cand`` (their keys in ``keys``), when
    it comes before the last kept; how many are kept."""
    t = filled
    if filled == TOP:  # i comes after the kept ones of its key and residency (a higher index)
        if not (u > keys[TOP - 1] or (u == keys[TOP - 1] and resident[i] and not resident[cand[TOP - 1]])):
            return filled
        t = TOP - 1
    else:
        filled += 1
    while t > 0 and (u > keys[t - 1] or (u == keys[t - 1] and resident[i] and not resident[cand[t - 1]])):
        keys[t], cand[t] = keys[t - 1], cand[t - 1]
        t -= 1
    keys[t], cand[t] = u, i
    return filled


@njit(nogil=True, cache=True)
@_with_digest
def _top_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The block into ``chosen`` when it is among the order's TOP first, its size (-1: all TOP fit):
    the TOP first kept sorted in ``cand``, their keys in ``keys``, from the coordinates at or above
    _floor_bits's gap (listed first, branch-free, into ``chosen``: on w8a[20000] at budget 0.05
    ~17 of 300) or, with no floor, from one pass where one enters when it comes before the last kept
    (most coordinates: no key). w8a[20000]'s 300 features at budget 0.05: ~1.1 us a call with the
    pass, ~0.6 with the floor."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    floor = _floor_bits(gaps, coord_bytes, budget)
    filled = 0
    if floor > 0:
        ib = gaps.view(np.int64)
        m = 0
        for i in range(n):
            chosen[m] = i
            m += ib[i] >= floor
        for t in range(m):
            i = chosen[t]
            filled = _keep_top(i, _key(bits[i], gaps[i]), resident, keys, cand, filled)
    else:
        below = -np.inf
        for i in range(n):
            if gaps[i] < below:  # after the last kept
                continue
            filled = _keep_top(i, _key(bits[i], gaps[i]), resident, keys, cand, filled)
            below = gaps[cand[TOP - 1]] if filled == TOP else below
    k, _, short = _take(cand[:filled], coord_bytes, budget, chosen, 0)
    return k if short or filled == n else -1
