"""The compiled swap loop's next block (solvers.duhl.compiled_swaps): the gap policy's block as gap_select defines
it (np.lexsort's prefix that fits the budget), by the cheapest way that answers (a few coordinates': by their
ranks, in solvers.duhl.few_select, called by the loop first): a small block (the last one at most TOP / 2) among
the TOP best of the order, from a floor (_top_block); the resident block again (gap_select._holds); where the
last block ended, at a gap of 0 (gap_select._edge_mask); else by the bits (from gap_select.BIG coordinates
as a mask: _radix_mask; below, from a floor when the block is small: _floor_block)."""

import hashlib
from pathlib import Path

import numpy as np
from numba import njit

from solvers.duhl.gap_select import (BIG, MAX_BITS, MIN_LEVEL_BITS, ZERO_KEY, _bit_length, _boundary, _edge_mask,
                                     _holds, _key, _list, _radix_block, _radix_levels, _resident_keys, _take)

# Numba's cache keys a function on its own file (numba#1833): the functions here call gap_select's
_DIGEST = hashlib.sha1((Path(__file__).parent / "gap_select.py").read_bytes()).hexdigest()[:12]
TOP = 16  # a block of at most this many coordinates (of more than FEW) by one pass keeping the best
# after a block by the bits that ends among gaps above 0 the next comes by the bits at once, and after one that
# ends among the gaps of 0 the next is tried there first (_next_block's hints), but every PROBE-th round asks
PROBE = 8  # in full (the shortcuts' pass: on w8a's logistic at budget 0.05 ~12 us of ~130, never answering)
NO_HINT, BY_BITS, AT_ZERO = 0, 1, 2  # how the last block came (_next_block)
FLOOR_PASSES = 3  # _floor_bits's passes, four gaps each: half the largest, a quarter, ... down to 1/4096
FLOOR_SHARE = 8  # _floor_block for a block of at most this share of the bytes (more: many coordinates at the floor)
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
    if hint != BY_BITS:
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
    k = _floor_block(gaps, resident, coord_bytes, budget, chosen, keys, cand)
    if k >= 0:  # (a floor above 0: the block ends among gaps above 0)
        return k, False, True, BY_BITS
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
def _floor_bits(gaps, coord_bytes, budget, share=1):
    """A gap every coordinate of the block has, as the bits of a positive float (0: none found, or the
    block more than a ``share``-th of the bytes): half the largest gap, a quarter, ... down 4 *
    FLOOR_PASSES times, the first whose coordinates' bytes (those of gaps at or above it) pass
    ``budget``, so that the block's prefix ends among them. Passes on the gaps' bits as integers, four
    floors each, which vectorize (~0.05 ns a coordinate a floor; the floats' max does not: ~0.45): a
    positive float's bits order as it does; none with a NaN gap (its bits are above +inf's). (Starting
    from the last round's floor saved no pass: breast cancer's moved by up to 5 halvings a round.)"""
    ib = gaps.view(np.int64)
    top, total = np.int64(0), 0
    for i in range(ib.shape[0]):
        top = max(top, ib[i])
        total += coord_bytes[i]
    floor, one = top - EXPONENT_ONE, EXPONENT_ONE
    for _ in range(FLOOR_PASSES if top <= INF_BITS and budget * share <= total else 0):
        f1, f2, f3, f4 = floor, floor - one, floor - 2 * one, floor - 3 * one
        s1, s2, s3, s4 = 0, 0, 0, 0
        for i in range(ib.shape[0]):
            x, b = ib[i], coord_bytes[i]
            s1 += b * np.int64(x >= f1)
            s2 += b * np.int64(x >= f2)
            s3 += b * np.int64(x >= f3)
            s4 += b * np.int64(x >= f4)
        for f, s in ((f1, s1), (f2, s2), (f3, s3), (f4, s4)):
            if f <= 0:  # (below the smallest positive float: none)
                return np.int64(0)
            if s > budget:
                return f
        floor -= 4 * one
    return np.int64(0)


@njit(nogil=True, cache=True, inline="always")
def _at_or_above(gaps, floor, out):
    """The coordinates whose gaps' bits are at or above ``floor`` (_floor_bits's) into ``out``, in
    order, branch-free (which ones is unpredictable); their count."""
    ib, m = gaps.view(np.int64), 0
    for i in range(ib.shape[0]):
        out[m] = i
        m += ib[i] >= floor
    return m


@njit(nogil=True, cache=True)
@_with_digest
def _floor_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The block into ``chosen`` from the coordinates at or above _floor_bits's gap (listed,
    branch-free, in ``cand``) by the keys' bits (gap_select._radix_levels), in coordinate order when
    they are at most half the coordinates (the loop's lists then sort nothing: breast cancer's ~28,
    ~0.25 us a round), its size; -1 (none found) when it is more than a FLOOR_SHARE-th of the bytes,
    or its gaps span more than _floor_bits's floors. Breast cancer's dual logistic at budget 0.05
    (569 coordinates, ~28 in the block, ~50 from the floor): ~1.0 us a call on recorded states,
    where _radix_block's first level over every coordinate took ~1.8."""
    floor = _floor_bits(gaps, coord_bytes, budget, FLOOR_SHARE)
    if floor <= 0:
        return -1
    bits = gaps.view(np.uint64)
    m = _at_or_above(gaps, floor, cand)
    low, high = ~np.uint64(0), np.uint64(0)
    for t in range(m):
        i = cand[t]
        u = _key(bits[i], gaps[i])
        keys[i] = u
        low, high = min(low, u), max(high, u)
    n, marked = gaps.shape[0], ~np.uint64(0)  # (no gap's key: see _key)
    if 2 * m <= n:  # the candidates in coordinate order, kept
        cand[n - m:] = cand[:m]
    hist = np.empty(1 << min(MAX_BITS, max(MIN_LEVEL_BITS, _bit_length(np.uint64(m)) - 2)), np.int64)  # (level 1's)
    k = _radix_levels(keys, cand, m, low, high, hist, budget, coord_bytes, resident, chosen, 0, resident[:0], False)
    if 2 * m <= n:  # the block in coordinate order (the loop's lists sort nothing): marked, from the candidates
        for j in range(k):
            keys[chosen[j]] = marked
        k = 0
        for t in range(n - m, n):
            i = cand[t]
            chosen[k] = i
            k += keys[i] == marked
    return k


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
        for t in range(_at_or_above(gaps, floor, chosen)):
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
