"""DuHL's gap selection, compiled: the block as a set, by radix selection on the gaps' bits.

The gap policy's block is the longest prefix of np.lexsort((~resident, -gaps)) (largest gap
first, NaN last, resident first on ties, then by index) whose bytes fit the budget. A set is
all a block needs (epochs and gap sums visit it in coordinate order), so no sort: each gap as
an unsigned key in the same order, histograms of bytes by the keys' bits find where the budget
runs out (levels of at most MAX_BITS bits, fewer for fewer candidates: a histogram costs its
size), down to SORTED candidates (sorted) or to equal gaps. Before that, one pass checks whether
the block the coordinates hold already is that prefix (_same_block; often so on the dual SVM,
whose gaps are mostly zeros), and when not, two or three passes that vectorize find the prefix
if it ends among the gaps equal to the residents' lowest (_edge_mask: the dual SVM's zeros,
when a few gaps grew; ~40 us where the bits took ~110 on w8a[20000] at memory_budget 0.25). The
compiled loop's choice among these, a small block's and a few coordinates': solvers.duhl.block_select."""

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros

MAX_BITS, FEW = 12, 32
# the radix levels go on down to SORTED candidates (then an insertion sort), each level at least
# MIN_LEVEL_BITS bits: sorting up to 32 mispredicted in the loop (breast cancer at budget 0.05, ~50
SORTED, MIN_LEVEL_BITS = 8, 5  # candidates from a floor: its selection ~1.63 -> ~1.45 us a round)
BIG = 4 << MAX_BITS  # coordinates from which the first level's histogram (sign, exponent) comes in the keys' pass
# the key of a gap of 0 (_key): _edge_mask is tried only when the residents' lowest gap is 0 (the
# dual SVM's zeros). With another edge (distinct gaps) it never found the block in the states of
# python auto runs at budget 0.05 and 0.25 (w8a logistic 24 of 24, the dense SVM 401, breast
# cancer 114), and costs a pass; with 0: 231 of 240 on w8a's SVM
ZERO_KEY = np.uint64(1 << 63)
CHUNK = 256  # coordinates a sum of _tie_cut's covers before it looks inside


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
    """int.bit_length of an unsigned x (0 for 0), by the count of leading zeros (a loop over the bits
    was ~20 ns of a level over ~50 candidates)."""
    return 64 - np.int64(leading_zeros(np.uint64(x))) if x else 0


@njit(nogil=True, cache=True)
def _resident_keys(gaps, resident, coord_bytes):
    """One branch-free pass that vectorizes (~0.5 ns a coordinate; tracking more in it, or
    listing, costs 5x): the residents' lowest key (all ones: none), the others' highest (0:
    none), the residents' bytes."""
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
    return low_in, high_out, used


@njit(nogil=True, cache=True)
def _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
    """Whether the resident coordinates are the block (by _resident_keys' numbers): each
    resident's gap at least each other's (on a tie the resident comes first), their bytes
    within ``budget``, and the first of the others in the order (largest gap, lowest index)
    not fitting in what is left (a scan to it)."""
    if low_in < high_out or used > budget:
        return False
    bits = gaps.view(np.uint64)
    for i in range(gaps.shape[0]):
        if not resident[i] and _key(bits[i], gaps[i]) == high_out:
            return coord_bytes[i] > budget - used
    return True


@njit(nogil=True, cache=True)
def _list(mask, chosen):
    """The coordinates of ``mask`` into ``chosen``, their count."""
    k = 0
    for i in range(mask.shape[0]):
        chosen[k] = i
        k += mask[i]
    return k


@njit(nogil=True, cache=True)
def _same_block(gaps, resident, coord_bytes, budget, chosen):
    """Whether the resident coordinates are the block already (then in ``chosen``: their count
    returned, else -1); see _holds."""
    low_in, high_out, used = _resident_keys(gaps, resident, coord_bytes)
    if not _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
        return -1
    return _list(resident, chosen)


@njit(nogil=True, cache=True)
def _tie_bytes(gaps, resident, coord_bytes, edge, on_resident):
    """The bytes of the coordinates with key ``edge``, resident ones or the others (vectorizes)."""
    bits = gaps.view(np.uint64)
    total = 0
    for i in range(gaps.shape[0]):
        total += coord_bytes[i] * np.int64((_key(bits[i], gaps[i]) == edge) & (resident[i] == on_resident))
    return total


@njit(nogil=True, cache=True)
def _tie_cut(gaps, resident, coord_bytes, edge, on_resident, room, total):
    """The index of the first coordinate with key ``edge`` (resident ones, or the others) whose
    bytes, after those of the same kind before it, pass ``room``; the number of coordinates
    when none does. ``total``: the bytes of them all. By chunks whose sums vectorize (as slices:
    indexing from the chunk's start does not: 12x), then a scan of the chunk where it is; from
    the end when it is in the second half of the bytes (there the first whose bytes, with those
    after it, reach total - room): on w8a's dual SVM the residents' zeros fill the block but a
    few, ~21 of a ~50 us _edge_mask from the start."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    if 2 * room >= total and room < total:
        need, after = total - room, 0
        for hi in range(n, 0, -CHUNK):
            lo = max(0, hi - CHUNK)
            part = _tie_bytes(gaps[lo:hi], resident[lo:hi], coord_bytes[lo:hi], edge, on_resident)
            if after + part >= need:
                for i in range(hi - 1, lo - 1, -1):
                    if _key(bits[i], gaps[i]) == edge and resident[i] == on_resident:
                        after += coord_bytes[i]
                        if after >= need:
                            return i
            after += part
        return n
    used = 0
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        part = _tie_bytes(gaps[lo:hi], resident[lo:hi], coord_bytes[lo:hi], edge, on_resident)
        if used + part > room:
            for i in range(lo, hi):
                if _key(bits[i], gaps[i]) == edge and resident[i] == on_resident:
                    used += coord_bytes[i]
                    if used > room:
                        return i
        used += part
    return n


@njit(nogil=True, cache=True)
def _edge_mask(gaps, resident, coord_bytes, budget, edge, keep):
    """The block as the mask ``keep`` when the order's prefix ends among the gaps of key ``edge``
    (the last block's lowest: on the dual SVM, the zeros, often from round to round), its size;
    -1 (``keep`` untouched) when it ends elsewhere. One pass that vectorizes sums the bytes
    above the edge and of the ties (resident and not); the ties join resident first, then by
    index, up to the first that does not fit (_tie_cut); one more pass that vectorizes writes
    the mask (no list: the compiled loop's one pass over the coordinates lists it)."""
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
        cut_in, cut_out = _tie_cut(gaps, resident, coord_bytes, edge, True, room, tie_in), 0
    elif tie_in + tie_out > room:  # among the others
        cut_in, cut_out = n, _tie_cut(gaps, resident, coord_bytes, edge, False, room - tie_in, tie_out)
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


@njit(nogil=True, cache=True)
def _edge_block(gaps, resident, coord_bytes, budget, edge, chosen, scratch):
    """_edge_mask's block listed into ``chosen`` (``scratch``: n booleans), its size or -1."""
    k = _edge_mask(gaps, resident, coord_bytes, budget, edge, scratch)
    return _list(scratch, chosen) if k >= 0 else k


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
    low_in, high_out, used = _resident_keys(gaps, resident, coord_bytes)
    if _holds(gaps, resident, coord_bytes, budget, low_in, high_out, used):
        return _list(resident, chosen)
    return _new_block(gaps, resident, coord_bytes, budget, chosen, keys, cand, low_in)


@njit(nogil=True, cache=True)
def _new_block(gaps, resident, coord_bytes, budget, chosen, keys, cand, low_in):
    """The block when the resident coordinates are not it (``low_in``: their lowest key, all
    ones when none): first where the last block ended (_edge_block, when that is a gap of 0), else
    by the bits."""
    if low_in == ZERO_KEY:
        k = _edge_block(gaps, resident, coord_bytes, budget, low_in, chosen, keys.view(np.bool_)[:gaps.shape[0]])
        if k >= 0:
            return k
    return _radix_block(gaps, resident, coord_bytes, budget, chosen, keys, cand)


@njit(nogil=True, cache=True)
def _radix_block(gaps, resident, coord_bytes, budget, chosen, keys, cand):
    """The block by the keys' bits (see _gap_block)."""
    n = gaps.shape[0]
    bits = gaps.view(np.uint64)
    if n <= FEW:  # sorted, no histogram (its allocation was most of diabetes's selection)
        for i in range(n):
            keys[i] = _key(bits[i], gaps[i])
            cand[i] = i
        return _sorted_take(keys, cand, n, resident, coord_bytes, budget, chosen, 0)
    low, high = ~np.uint64(0), np.uint64(0)
    big = n >= BIG  # the first level's histogram (the top bits: sign, exponent) in this pass
    # two first-level histograms, odd and even coordinates: no chain of adds to one bucket (many equal gaps)
    hist = np.zeros(2 << MAX_BITS, dtype=np.int64) if big else np.empty(1 << MAX_BITS if n > FEW else 1, np.int64)
    top_shift = np.uint64(64 - MAX_BITS)
    if big:
        for i in range(n):
            u = _key(bits[i], gaps[i])
            keys[i] = u
            cand[i] = i
            low, high = min(low, u), max(high, u)
            hist[(i & 1) * (1 << MAX_BITS) + np.int64(u >> top_shift)] += coord_bytes[i]
    else:  # a loop of its own: it vectorizes (one that branched on big did not: breast cancer ~1 us more)
        low_positive, positive_bytes = ~np.uint64(0), 0
        for i in range(n):
            u = _key(bits[i], gaps[i])
            keys[i] = u
            cand[i] = i
            low, high = min(low, u), max(high, u)
            low_positive = min(low_positive, u if u > ZERO_KEY else ~np.uint64(0))
            positive_bytes += coord_bytes[i] * np.int64(u > ZERO_KEY)
        if low_positive < high and positive_bytes > budget:  # the block ends among the gaps above 0: the
            low = low_positive - np.uint64(1)  # others, never in it, at one key just below them, so that
            for i in range(n):  # the levels' bits span the positive gaps' alone (a 0 or a rounding's -1e-16
                keys[i] = max(keys[i], low)  # beside 1e-18..1e-2 spans the sign and the exponent's top
                # bits, which split nothing: breast cancer's first level kept ~370 of 569, then a second)
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
    return _radix_levels(keys, cand, m, low, high, hist, remaining, coord_bytes, resident, chosen, k, resident[:0],
                         False)  # (no mask: an empty one)


@njit(nogil=True, cache=True)
def _radix_levels(keys, cand, m, low, high, hist, remaining, coord_bytes, resident, chosen, k, keep, as_mask):
    """The radix levels after the first (_radix_block's; block_select._radix_mask's): the candidates
    ``cand[:m]`` (index order; their keys in [low, high]) by the next bits, those above each level's
    edge into the block, down to a few (sorted) or to equal gaps (resident first, by index); the
    block appended to ``chosen`` from ``k``, or with ``as_mask`` set in ``keep`` (the candidates'
    entries False there; ``chosen`` scratch). The block's size."""
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
            for t in range(m if as_mask else 0):
                keep[cand[t]] = True
            chosen[k:k + (0 if as_mask else m)] = cand[:0 if as_mask else m]
            return k + m
        edge = np.uint64(top)
        m_next = 0
        low, high = ~np.uint64(0), np.uint64(0)
        for t in range(m):  # branch-free: which side of the edge a coordinate falls is unpredictable
            i = cand[t]
            h = (keys[i] >> shift) & mask
            if as_mask:  # (the same branch every time: predicted)
                keep[i] = h > edge
            else:
                chosen[k] = i
            k += h > edge
            cand[m_next] = i
            m_next += h == edge
        m = m_next
        for t in range(m):
            low, high = min(low, keys[cand[t]]), max(high, keys[cand[t]])
    start = 0 if as_mask else k
    if m > SORTED:  # equal gaps: resident first, then by index (cand is in index order; keys now scratch)
        n_res, n_out = 0, 0
        for t in range(m):  # branch-free split (often most of the coordinates: w8a's dual SVM's zeros)
            i = cand[t]
            cand[n_res] = i
            n_res += resident[i]
            keys[n_out] = i
            n_out += not resident[i]
        end, remaining, full = _take(cand[:n_res], coord_bytes, remaining, chosen, start)
        if not full:
            end = _take(keys[:n_out], coord_bytes, remaining, chosen, end)[0]
    else:
        end = _sorted_take(keys, cand, m, resident, coord_bytes, remaining, chosen, start)
    for t in range(start, end if as_mask else start):
        keep[chosen[t]] = True
    return k + end - start


@njit(nogil=True, cache=True)
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
