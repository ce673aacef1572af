"""The compiled swap loop's pass over the coordinates when its block changes (solvers.duhl.compiled_swaps):
the new block in coordinate order (as the resident set visits them), the coordinates that join it (their
data copied in by the swap) and their bytes, the resident mask; and the stale gaps to refresh (not in the
last block, not proven by the gap memory). Inlined into the loop: a call passing these arrays costs ~30 ns."""

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

SORT_FEW = 32  # a listed block of at most this many coordinates sorted, a larger one listed from its mask
# the stale gaps as runs between the block's coordinates when it is at most a RUNS-th of them (runs ~64 long or
# more): in the loop a run cost ~15 ns more than the pass's ~0.5 ns a coordinate (breast cancer at budget 0.05,
RUNS = 64  # ~29 runs of ~20: ~0.5 us a round by the runs, ~0.27 by the pass)
# a mask block merged into the last one's list by its changes while they are at most a MANY_CHANGES-th of
# the coordinates (a search in the list each, ~30-50 ns); listed from the mask (~0.5 ns a coordinate) beyond
MANY_CHANGES = 64


@njit(nogil=True, cache=True, inline="always")
def _round_pass(keep, resident, coord_bytes, block, joined):
    """The compiled swap loop's pass over the coordinates when its block changed, in coordinate
    order (as the resident set visits them; branch-free: which coordinates are in the block is
    unpredictable): the block into ``block``, those that join it into ``joined`` (their data
    copied in by the swap), ``resident`` set to ``keep``. Returns (the block's size, how many
    join, their bytes)."""
    m, n_joined, moved = 0, 0, 0
    for i in range(keep.shape[0]):
        r, kept = resident[i], keep[i]
        block[m] = i
        m += kept
        new = kept & (not r)
        joined[n_joined] = i
        n_joined += new
        moved += coord_bytes[i] if new else 0
        resident[i] = kept
    return m, n_joined, moved


@njit(nogil=True, cache=True, inline="always")
def _stale_runs(block, m, resident, proven, proving, stale):
    """The coordinates outside the block ``block[:m]`` (coordinate order; ``resident`` its mask;
    m < 0: not listed), unless proven when ``proving``, into ``stale``: the runs between the block's
    when they are long (a block of at most a RUNS-th of the coordinates), else a pass over the mask;
    their count."""
    n, n_stale, start = proven.shape[0], 0, 0
    if m < 0 or m * RUNS > n:  # short runs: a loop each costs more than a pass
        for i in range(n if proving else 0):
            stale[n_stale] = i
            n_stale += not (resident[i] | proven[i])
        for i in range(0 if proving else n):  # (no proofs: the mask alone, ~0.26 -> ~0.2 us over 569)
            stale[n_stale] = i
            n_stale += not resident[i]
        return n_stale
    for j in range(m + 1):
        end = block[j] if j < m else n
        if proving:
            for i in range(start, end):
                stale[n_stale] = i
                n_stale += not proven[i]
        else:  # consecutive numbers into a slice: the stores vectorize (indexed from n_stale, 2x as long
            run = stale[n_stale:n_stale + max(0, end - start)]  # on their own: 29 runs of ~20, ~0.29 -> ~0.13 us)
            for q in range(run.shape[0]):
                run[q] = start + q
            n_stale += run.shape[0]
        start = end + 1
    return n_stale


@njit(nogil=True, cache=True, inline="always")
def _round_lists(keep, chosen, k, listed, resident, coord_bytes, block, m, joined):
    """_round_pass's lists and counts when the last block is listed (``block[:m]``, coordinate order;
    ``resident`` its mask), in O(k + m) but a mask's listing: the block ``chosen[:k]`` (when
    ``listed``, else listed there from ``keep``) sorted into ``block``, those not resident into
    ``joined``, ``resident`` changed where the blocks differ. w8a[20000] at memory_budget 0.05: the
    pass over every coordinate took ~2.5-4.5 ns each in the loop, 1-1.8 apart (its arrays out of
    cache after the kernels)."""
    if not listed:  # a mask to list (gap_select._edge_mask's): by what changed, when few did
        lists = _mask_lists(keep, resident, coord_bytes, block, m, chosen, joined)
        if lists[0] >= 0:
            return lists
    n = keep.shape[0]
    ordered = listed
    for j in range(1, k if listed else 0):  # a sort's order or a policy's: the block's is coordinates'
        ordered &= chosen[j - 1] < chosen[j]
    if listed and not ordered and k <= SORT_FEW:  # insertion (NumPy's sort of 15 took ~0.4 us)
        for j in range(1, k):
            i, t = chosen[j], j
            while t > 0 and chosen[t - 1] > i:
                chosen[t] = chosen[t - 1]
                t -= 1
            chosen[t] = i
    elif not ordered:  # from the mask (the loop set it from the list: ~0.5 ns a coordinate, where
        k = 0  # merging the radix selection's runs, one a level, took ~8 ns a coordinate listed)
        for i in range(n):
            chosen[k] = i
            k += keep[i]
    n_joined, moved = 0, 0
    for j in range(k):
        i = chosen[j]
        new = not resident[i]
        joined[n_joined] = i
        n_joined += new
        moved += coord_bytes[i] if new else 0
    for j in range(m):
        resident[block[j]] = False
    for j in range(k):
        resident[chosen[j]] = True
        block[j] = chosen[j]
    return k, n_joined, moved


@njit(nogil=True, cache=True, inline="always")
def _mask_lists(keep, resident, coord_bytes, block, m, chosen, joined):
    """_round_lists's lists and counts for a block given as the mask ``keep`` when the last one
    is listed (``block[:m]``; ``resident`` its mask): the coordinates where the masks differ, found 8 at a time
    (the masks' bytes as words), into ``joined``, then the new block merged from the last one and them (those
    in both leave, the others join, compacted into ``joined`` where they were read). O(n / 8 + m + changes),
    where listing the mask costs O(n) and the lists O(k + m) again: w8a's dual SVM at memory_budget 0.25 changes
    ~64 of a ~19,000-coordinate block a round (on captured states, listing the mask and the lists: ~51 us a
    call; this: ~16). With more than n / MANY_CHANGES changes, (-1, 0, 0) and nothing changed: the
    caller lists the mask (a block by the bits: on w8a's logistic ~6,000 joins and leaves a round, of a
    ~4,000-coordinate block)."""
    n = keep.shape[0]
    words = n - n % 8
    kw, rw = keep[:words].view(np.uint64), resident[:words].view(np.uint64)
    n_changed, most = 0, n // MANY_CHANGES
    for w in range(kw.shape[0]):
        if kw[w] != rw[w]:  # rare: predicted
            for i in range(8 * w, 8 * w + 8):
                joined[n_changed] = i
                n_changed += keep[i] != resident[i]
            if n_changed > most:  # (-1: nothing changed but joined's scratch; the rest not read: w8a's
                return -1, 0, 0  # logistic, ~6,000 changes, ~50 us a round to count them all)
    for i in range(words, n):
        joined[n_changed] = i
        n_changed += keep[i] != resident[i]
    if n_changed > most:
        return -1, 0, 0
    k, n_joined, moved, j = 0, 0, 0, 0
    for c in range(n_changed):
        i = joined[c]
        end = j + np.searchsorted(block[j:m], i)  # the last block's run before i, kept: copied as a slice
        chosen[k:k + end - j] = block[j:end]
        k += end - j
        j = end
        if j < m and block[j] == i:  # it leaves
            resident[i] = False
            j += 1
        else:  # it joins
            chosen[k] = i
            k += 1
            joined[n_joined] = i
            n_joined += 1
            moved += coord_bytes[i]
            resident[i] = True
    chosen[k:k + m - j] = block[j:m]
    k += m - j
    block[:k] = chosen[:k]
    return k, n_joined, moved


@njit(nogil=True, cache=True, inline="always")
def _bits_pass(bits, was, resident, coord_bytes, block, joined):
    """_round_pass for a few coordinates (at most 64) whose new block and resident mask are the bits
    ``bits`` and ``was`` (few_select._few_mask's): the same lists and returns, from the set bits
    (trailing zeros), so its work is the block's and the changes' size, not the coordinates'
    (diabetes at memory_budget 0.25: 2 of 10)."""
    m, b = 0, bits
    while b:
        block[m] = trailing_zeros(b)
        m += 1
        b &= b - np.uint64(1)
    n_joined, moved, b = 0, 0, bits & ~was
    while b:
        i = trailing_zeros(b)
        joined[n_joined] = i
        n_joined += 1
        moved += coord_bytes[i]
        resident[i] = True
        b &= b - np.uint64(1)
    b = was & ~bits
    while b:
        resident[trailing_zeros(b)] = False
        b &= b - np.uint64(1)
    return m, n_joined, moved
