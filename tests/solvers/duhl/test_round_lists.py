"""The compiled swap loop's round pass by lists (round_pass._round_lists: O(k + m) work when the
last block is listed) and by bits (round_pass._bits_pass: a few coordinates' masks as integers)
against the round's lists as NumPy states them: the new block, those joining it and their bytes,
the resident mask after; and the stale gaps before the selection (round_pass._stale_runs: not in
the last block, not proven)."""

import numpy as np
import pytest

from solvers.duhl.gap_select import FEW
from solvers.duhl.round_pass import RUNS, SORT_FEW, _bits_pass, _round_lists, _stale_runs


def _case(rng, n, m, k, order):
    old = np.sort(rng.choice(n, m, replace=False))
    new = rng.choice(n, k, replace=False)
    if order == "sorted":
        new = np.sort(new)
    resident = np.zeros(n, dtype=bool)
    resident[old] = True
    keep = np.zeros(n, dtype=bool)
    keep[new] = True
    return old, new, resident, keep


def _run(old, new, resident, keep, listed, coord_bytes):
    """_round_lists on copies (the old block listed, ``chosen`` unset for a mask): its returns, the
    new block, the joined list, the resident mask after."""
    n, m, k = keep.shape[0], old.shape[0], new.shape[0]
    block = np.full(n + 1, -7, dtype=np.int64)
    block[:m] = old
    chosen = np.full(n, -7, dtype=np.int64)
    if listed:
        chosen[:k] = new
    joined, resident = np.full(n, -7, dtype=np.int64), resident.copy()
    got = _round_lists(keep, chosen, k, listed, resident, coord_bytes, block, m, joined)
    m_new, n_joined, _ = got
    return got, block[:m_new], joined[:n_joined], resident


@pytest.mark.parametrize("n", [SORT_FEW + 1, 300, 5000])
@pytest.mark.parametrize("order", ["sorted", "shuffled", "mask"])
def test_round_lists_are_numpys(n, order):
    rng = np.random.default_rng(n)
    sizes = [(0, 0), (0, 5), (5, 0), (n, n), (n // 2, n), (3, SORT_FEW), (SORT_FEW, SORT_FEW + 1), (n // 20, n // 20)]
    sizes += [tuple(rng.integers(0, n + 1, 2)) for _ in range(20)]
    for m, k in sizes:
        old, new, resident, keep = _case(rng, n, m, k, order)
        coord_bytes = rng.integers(1, 1000, n)
        want_joined = np.flatnonzero(keep & ~resident)
        (m_new, n_joined, moved), block, joined, after = _run(old, new, resident, keep, order != "mask", coord_bytes)
        assert m_new == k and (block == np.flatnonzero(keep)).all(), (m, k)
        assert n_joined == want_joined.size and (joined == want_joined).all(), (m, k)
        assert moved == coord_bytes[want_joined].sum()
        assert (after == keep).all()


@pytest.mark.parametrize("n", [1, 300, 5000])
@pytest.mark.parametrize("proving", [False, True])
def test_the_stale_gaps_are_numpys(n, proving):
    """_stale_runs: the coordinates outside the last block, unless proven when proving, in order, from
    the block's runs (a block of at most n / RUNS), a pass over the mask (larger), or with the block
    not listed (m = -1: a slice's first round)."""
    rng = np.random.default_rng(n)
    for m in sorted({0, 1, n // (2 * RUNS), n // RUNS, n // RUNS + 1, n // 2, n, *rng.integers(0, n + 1, 8)}):
        old = np.sort(rng.choice(n, m, replace=False))
        resident = np.zeros(n, dtype=bool)
        resident[old] = True
        proven = (rng.random(n) < 0.3) & ~resident if proving else np.zeros(n, dtype=bool)
        want = np.flatnonzero(~resident & ~proven)
        block = np.full(n + 1, -7, dtype=np.int64)
        block[:m] = old
        for listed in (m, -1):
            stale = np.full(n + 1, -7, dtype=np.int64)
            n_stale = _stale_runs(block, listed, resident, proven, proving, stale)
            assert n_stale == want.size and (stale[:n_stale] == want).all(), (m, listed)


@pytest.mark.parametrize("n", [SORT_FEW + 1, 301, 5000])
def test_a_mask_block_that_barely_moved_lists_as_numpy(n):
    """A block given as a mask (_edge_mask's) that differs from the last in a few coordinates (round_pass's
    _mask_lists: the changes found 8 coordinates at a time, the rest of the list copied as runs): those at
    the first and last coordinates, in the tail past the last 8, none, or only joins or only leaves."""
    rng = np.random.default_rng(n)
    for trial in range(30):
        old = np.sort(rng.choice(n, n // 3, replace=False))
        resident = np.zeros(n, dtype=bool)
        resident[old] = True
        keep = resident.copy()
        flips = rng.choice(n, trial % 7, replace=False)
        flips = np.concatenate([flips, np.array([0, n - 1][: trial % 3], dtype=np.int64)])
        if trial % 5 == 1:  # joins only
            flips = flips[~resident[flips]]
        elif trial % 5 == 2:  # leaves only
            flips = flips[resident[flips]]
        keep[flips] = ~keep[flips]
        coord_bytes = rng.integers(1, 1000, n)
        want_joined = np.flatnonzero(keep & ~resident)
        (m_new, n_joined, moved), block, joined, after = _run(old, np.flatnonzero(keep), resident, keep, False,
                                                               coord_bytes)
        assert m_new == keep.sum() and (block == np.flatnonzero(keep)).all(), trial
        assert n_joined == want_joined.size and (joined == want_joined).all(), trial
        assert moved == coord_bytes[want_joined].sum() and (after == keep).all(), trial


def _bits(mask):
    return np.uint64(sum(1 << int(i) for i in np.flatnonzero(mask)))


@pytest.mark.parametrize("n", [1, 10, FEW])
def test_the_round_pass_by_bits_is_numpys(n):
    """_bits_pass from the new block's and the old one's bits: the same lists, counts and resident mask
    as NumPy's, for blocks of every size from none to all (overlapping, equal, apart)."""
    rng = np.random.default_rng(n)
    for trial in range(60):
        m, k = rng.integers(0, n + 1, 2)
        old, new, resident, keep = _case(rng, n, m, k, "mask")
        if trial % 6 == 0:
            keep = resident.copy()  # the same block (the loop does not call it then; the lists still hold)
        coord_bytes = rng.integers(1, 1000, n)
        want_joined = np.flatnonzero(keep & ~resident)
        block, joined, after = np.full(n + 1, -7, np.int64), np.full(n, -7, np.int64), resident.copy()
        m_new, n_joined, moved = _bits_pass(_bits(keep), _bits(resident), after, coord_bytes, block, joined)
        assert m_new == keep.sum() and (block[:m_new] == np.flatnonzero(keep)).all(), trial
        assert n_joined == want_joined.size and (joined[:n_joined] == want_joined).all(), trial
        assert moved == coord_bytes[want_joined].sum() and (after == keep).all(), trial
