"""DuHL's gap block: the coordinates with the largest gaps whose data fits the budget.

What it ranks (:func:`block_keys`): each coordinate's gap, where g is made finite by a bounded
support (the Lasso, L1 classifiers in the primal) with that support shrunk to the coordinate's
reach (:func:`solvers.glm.models.reach_gap`), so that a coordinate's rank follows what its step can
gain rather than the bound P(0)/l1 times its violation.

The specification (:func:`gap_block_spec`): the longest prefix of ``np.lexsort((~resident,
-gaps))`` (largest gap first, NaN last, resident first on ties, then by index) whose bytes fit
the budget. A set is all a block needs (epochs and gap sums visit it in coordinate order), so
:func:`gap_block`, the one compiled entry point, finds it in O(n) without a sort:

1. one pass that vectorizes checks whether the resident coordinates already are that prefix
   (often so near the optimum: the block *holds*, nothing moves);
2. when the residents' lowest gap is 0 and the prefix ends among the gaps of 0 (the dual
   SVM's samples outside the margin, round after round), two or three passes that vectorize
   write the block as a mask: the ties join resident first, then by index;
3. else radix selection on the gaps' bits: each gap as an unsigned key in the same order,
   histograms of bytes by the keys' next bits find the bucket where the budget runs out,
   those above it join, and only that bucket's coordinates go on to the next bits, down to a
   few (sorted) or to equal gaps (taken resident first, by index).
"""

import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from solvers.glm.models import has_reach, reach_gap
from solvers.kernels.cache import compiled
from solvers.kernels.cpu import copy_to

MAX_BITS = 12       # a radix level's histogram has at most 2^MAX_BITS buckets ...
MIN_LEVEL_BITS = 5  # ... and at least 2^MIN_LEVEL_BITS (a histogram costs its size)
SORTED = 8          # candidates sorted (an insertion sort) rather than split further
ZERO_KEY = np.uint64(1 << 63)  # the key of a gap of 0


@compiled
def block_keys(theta, gaps, a, s, sqnorm, curv, tol_abs, out):
    """What the gap block ranks: ``out``, each positive gap as its reach gap at L = curv * sqnorm[i]
    (from the coordinate's a and s, which the gap memory keeps with its gap), the others (0: proven,
    NaN: unknown) as they are. ``gaps`` itself for a model without a bounded support, and once the
    reach gaps sum to at most ``tol_abs``: the steps have little left to gain, and what is left of
    the gap is the bounded support's violations, which only the gaps rank (a violation of e at 0
    has the reach gap e^2 / L, under the block's round-off long before its gap, P(0)/l1 e, meets
    the target)."""
    if not has_reach(theta):
        return gaps
    total = 0.0
    for i in range(gaps.shape[0]):
        g = gaps[i]
        if g > 0.0:
            out[i] = reach_gap(theta, a[i], s[i], curv * sqnorm[i])
            total += max(out[i], 0.0)
        else:
            out[i] = g
    return out if total > tol_abs else gaps


def gap_block_spec(gaps, resident, coord_bytes, budget):
    """The gap block by its definition, in coordinate order (a sort: the reference the compiled
    :func:`gap_block` is tested against)."""
    gaps = np.where(gaps == 0.0, 0.0, gaps)  # -0.0 ties with 0.0
    order = np.lexsort((~np.asarray(resident, dtype=bool), -gaps))  # -NaN sorts last, as NaN does
    used = np.cumsum(np.asarray(coord_bytes, dtype=np.int64)[order])
    return np.sort(order[: int(np.searchsorted(used, budget, side="right"))])


@compiled(inline="always")
def _key(bits, g):
    """The gap g (``bits``: its bits) as an unsigned integer in the same order: -0.0 as 0.0
    (a tie, as np.lexsort sees them), NaN lowest (last)."""
    sign = np.uint64(1 << 63)
    b = np.uint64(0) if bits == sign else bits
    u = b ^ (np.uint64(np.int64(b) >> 63) | sign)
    return u if g == g else np.uint64(0)


@compiled(inline="always")
def _bit_length(x):
    """int.bit_length of an unsigned x (0 for 0)."""
    return 64 - np.int64(leading_zeros(np.uint64(x))) if x else 0


@compiled(inline="always")
def _boundary(hist, remaining):
    """The highest bucket whose bytes, after all those above it, pass ``remaining`` (-1: none),
    and the bytes left for it."""
    for b in range(hist.shape[0] - 1, -1, -1):
        if hist[b] > remaining:
            return b, remaining
        remaining -= hist[b]
    return -1, remaining


@compiled
def _resident_keys(gaps, resident, coord_bytes):
    """One branch-free pass that vectorizes: the residents' lowest key (all ones: none), the
    others' highest (0: none), the residents' bytes and count."""
    bits = gaps.view(np.uint64)
    none = ~np.uint64(0)
    low_in, high_out, used, count = none, np.uint64(0), 0, 0
    for i in range(gaps.shape[0]):
        u = _key(bits[i], gaps[i])
        r = resident[i]
        low_in = min(low_in, u if r else none)
        high_out = max(high_out, np.uint64(0) if r else u)
        used += coord_bytes[i] * np.int64(r)
        count += np.int64(r)
    return low_in, high_out, used, count


@compiled(inline="always")
def _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
    """Whether the resident coordinates are the block: each resident's gap at least each other's
    (on a tie the resident comes first), their bytes within ``budget``, and the first of the others
    in the order (largest gap, lowest index) not fitting in what is left."""
    if low_in < high_out or used > budget:
        return False
    bits = gaps.view(np.uint64)
    for i in range(gaps.shape[0]):
        if not resident[i] and _key(bits[i], gaps[i]) == high_out:
            return coord_bytes[i] > budget - used
    return True


@compiled
def _tie_cut(gaps, resident, coord_bytes, edge, on_resident, room):
    """The index of the first coordinate with key ``edge`` (resident ones, or the others) whose
    bytes, after those of the same kind before it, pass ``room``; n when none does."""
    bits = gaps.view(np.uint64)
    used = 0
    for i in range(gaps.shape[0]):
        if resident[i] == on_resident and _key(bits[i], gaps[i]) == edge:
            used += coord_bytes[i]
            if used > room:
                return i
    return gaps.shape[0]


@compiled
def _edge_mask(gaps, resident, coord_bytes, budget, edge, keep):
    """The block as the mask ``keep`` when the order's prefix ends among the gaps of key ``edge``,
    its size; -1 (``keep`` untouched) when it ends elsewhere. One pass sums the bytes above the
    edge and of the ties (resident and not); the ties join resident first, then by index, up to
    the first that does not fit; one more pass writes the mask."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    above, tie_in, tie_out, below = 0, 0, 0, np.uint64(0)  # below: 1 + the highest key under the edge, 0: none
    for i in range(n):
        u = _key(bits[i], gaps[i])
        b = coord_bytes[i]
        r = np.int64(resident[i])
        tie = np.int64(u == edge)
        above += b * np.int64(u > edge)
        tie_in += b * tie * r
        tie_out += b * tie * (1 - r)
        below = max(below, u + np.uint64(1) if u < edge else np.uint64(0))
    if above > budget:
        return -1
    room = budget - above
    if tie_in > room:  # the prefix ends among the resident ties
        cut_in, cut_out = _tie_cut(gaps, resident, coord_bytes, edge, True, room), 0
    elif tie_in + tie_out > room:  # among the others
        cut_in, cut_out = n, _tie_cut(gaps, resident, coord_bytes, edge, False, room - tie_in)
    else:  # every tie fits: the block ends here when the next in the order (the first of the
        cut_in, cut_out = n, n  # highest key under the edge, resident first) does not fit
        if below > 0:
            nxt, room = below - np.uint64(1), room - tie_in - tie_out
            first_in, first_out = -1, -1
            for i in range(n):
                if _key(bits[i], gaps[i]) == nxt:
                    if resident[i]:
                        first_in = i
                        break
                    first_out = i if first_out < 0 else first_out
            if coord_bytes[first_in if first_in >= 0 else first_out] <= room:
                return -1
    k = 0
    for i in range(n):
        u = _key(bits[i], gaps[i])
        inside = (u > edge) | ((u == edge) & (i < (cut_in if resident[i] else cut_out)))
        keep[i] = inside
        k += inside
    return k


@compiled
def _take(order, coord_bytes, remaining, chosen, k):
    """Appends ``order``'s coordinates to ``chosen`` from ``k`` while their bytes fit: (k, the
    bytes left, whether one did not fit)."""
    for t in range(order.shape[0]):
        i = np.int64(order[t])
        if coord_bytes[i] > remaining:
            return k, remaining, True
        remaining -= coord_bytes[i]
        chosen[k] = i
        k += 1
    return k, remaining, False


@compiled
def _sorted_take(keys, cand, m, resident, coord_bytes, remaining, chosen, k):
    """A few candidates ``cand[:m]`` (in index order) sorted by a stable insertion sort by (key
    descending, resident first), appended to ``chosen`` from ``k`` while they fit; the size."""
    for j in range(1, m):
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


@compiled
def _radix_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The block into ``chosen`` (in no particular order) by the keys' bits, its size: each level
    splits the candidates ``cand[:m]`` (index order; keys in [low, high]) by their next bits,
    those above the edge bucket join, the edge bucket's go on; a few are sorted, equal gaps taken
    resident first, by index."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    low, high = ~np.uint64(0), np.uint64(0)
    for i in range(n):
        u = _key(bits[i], gaps[i])
        keys[i] = u
        cand[i] = i
        low, high = min(low, u), max(high, u)
    hist = np.empty(1 << MAX_BITS, dtype=np.int64)
    k, m, remaining = 0, n, budget
    while m > SORTED and low != high:
        bits_left = _bit_length(low ^ high)  # the bits below the candidates' common prefix
        nb = min(bits_left, MAX_BITS, max(MIN_LEVEL_BITS, _bit_length(np.uint64(m)) - 2))
        shift = np.uint64(bits_left - nb)
        mask = np.uint64((1 << nb) - 1)
        hist[: 1 << nb] = 0
        for t in range(m):
            hist[(keys[cand[t]] >> shift) & mask] += coord_bytes[cand[t]]
        top, remaining = _boundary(hist[: 1 << nb], remaining)
        if top < 0:  # every candidate fits
            copy_to(cand[:m], chosen[k:])
            return k + m
        edge = np.uint64(top)
        m_next = 0
        low, high = ~np.uint64(0), np.uint64(0)
        for t in range(m):  # branch-free: which side of the edge a coordinate falls is unpredictable
            i = cand[t]
            h = (keys[i] >> shift) & mask
            chosen[k] = i
            k += h > edge
            cand[m_next] = i
            m_next += h == edge
        m = m_next
        for t in range(m):
            low, high = min(low, keys[cand[t]]), max(high, keys[cand[t]])
    if m > SORTED:  # equal gaps: resident first, then by index (cand is in index order; keys now scratch)
        n_res, n_out = 0, 0
        for t in range(m):
            i = cand[t]
            cand[n_res] = i
            n_res += resident[i]
            keys[n_out] = i
            n_out += not resident[i]
        end, remaining, full = _take(cand[:n_res], coord_bytes, remaining, chosen, k)
        if not full:
            end = _take(keys[:n_out], coord_bytes, remaining, chosen, end)[0]
        return end
    return _sorted_take(keys, cand, m, resident, coord_bytes, remaining, chosen, k)


@compiled
def gap_block(gaps, resident, coord_bytes, budget, keep, chosen, keys, cand):
    """The gap block (see the module's docstring) as the mask ``keep``: (its size, held). Held:
    the resident coordinates are the block (``keep`` untouched). ``chosen``, ``keys`` (uint64) and
    ``cand``: n scratch entries each."""
    low_in, high_out, used, count = _resident_keys(gaps, resident, coord_bytes)
    if _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
        return count, True
    if low_in == ZERO_KEY:  # the prefix may end among the gaps of 0, as the residents' did
        k = _edge_mask(gaps, resident, coord_bytes, budget, low_in, keep)
        if k >= 0:
            return k, False
    k = _radix_block(gaps, resident, coord_bytes, budget, chosen, keys, cand)
    keep[:] = False
    for j in range(k):
        keep[chosen[j]] = True
    return k, False


def gap_block_coords(gaps, resident, coord_bytes, budget):
    """:func:`gap_block` for the Python loop: the block's coordinates in coordinate order."""
    n = gaps.shape[0]
    gaps = np.ascontiguousarray(gaps, dtype=np.float64)
    resident = np.ascontiguousarray(resident, dtype=np.bool_)
    keep = np.zeros(n, dtype=np.bool_)
    _, held = gap_block(gaps, resident, np.ascontiguousarray(coord_bytes, dtype=np.int64), int(budget), keep,
                        np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.int64))
    return np.flatnonzero(resident if held else keep)
