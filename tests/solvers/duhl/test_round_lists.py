"""The compiled swap loop's round pass by lists (round_pass._round_lists: O(k + m) work when the
last block is listed) and by bits (round_pass._bits_pass: a few coordinates' masks as integers)
against the round's lists as NumPy states them: the new block, those joining it and their bytes,
the stale gaps (not resident before, not proven), the resident mask after."""

import numpy as np
import pytest

from solvers.duhl.gap_select import FEW
from solvers.duhl.round_pass import SORT_FEW, _bits_pass, _round_lists


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


def _run(old, new, resident, keep, listed, proven, proving, coord_bytes, list_stale):
    """_round_lists on copies (the old block listed, ``chosen`` unset for a mask): its returns, the
    new block, the joined and stale lists, the resident mask after."""
    n, m, k = keep.shape[0], old.shape[0], new.shape[0]
    block = np.full(n + 1, -7, dtype=np.int64)
    block[:m] = old
    chosen = np.full(n, -7, dtype=np.int64)
    if listed:
        chosen[:k] = new
    joined, stale, resident = np.full(n, -7, dtype=np.int64), np.full(n + 1, -7, dtype=np.int64), resident.copy()
    got = _round_lists(keep, chosen, k, listed, resident, proven, proving, coord_bytes, block, m, joined, stale,
                       list_stale)
    m_new, n_joined, _, n_stale = got
    return got, block[:m_new], joined[:n_joined], stale[:n_stale], resident


@pytest.mark.parametrize("n", [SORT_FEW + 1, 300, 5000])
@pytest.mark.parametrize("order", ["sorted", "shuffled", "mask"])
@pytest.mark.parametrize("proving", [False, True])
def test_round_lists_are_numpys(n, order, proving):
    rng = np.random.default_rng(n)
    sizes = [(0, 0), (0, 5), (5, 0), (n, n), (n // 2, n), (3, SORT_FEW), (SORT_FEW, SORT_FEW + 1), (n // 20, n // 20)]
    sizes += [tuple(rng.integers(0, n + 1, 2)) for _ in range(20)]
    for m, k in sizes:
        old, new, resident, keep = _case(rng, n, m, k, order)
        proven = (rng.random(n) < 0.3) & ~resident if proving else np.zeros(n, dtype=bool)
        coord_bytes = rng.integers(1, 1000, n)
        want_joined = np.flatnonzero(keep & ~resident)
        want_stale = np.flatnonzero(~resident & ~proven)
        for list_stale in (False, True):
            (m_new, n_joined, moved, n_stale), block, joined, stale, after = _run(
                old, new, resident, keep, order != "mask", proven, proving, coord_bytes, list_stale)
            assert m_new == k and (block == np.flatnonzero(keep)).all(), (m, k)
            assert n_joined == want_joined.size and (joined == want_joined).all(), (m, k)
            assert moved == coord_bytes[want_joined].sum()
            assert (after == keep).all()
            assert n_stale == (want_stale.size if list_stale else 0) and (stale == want_stale[:n_stale]).all(), (m, k)


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
        (m_new, n_joined, moved, n_stale), block, joined, _, after = _run(
            old, np.flatnonzero(keep), resident, keep, False, np.zeros(n, bool), False, coord_bytes, False)
        assert m_new == keep.sum() and (block == np.flatnonzero(keep)).all(), trial
        assert n_joined == want_joined.size and (joined == want_joined).all(), trial
        assert moved == coord_bytes[want_joined].sum() and (after == keep).all() and n_stale == 0, trial


def _bits(mask):
    return np.uint64(sum(1 << int(i) for i in np.flatnonzero(mask)))


@pytest.mark.parametrize("n", [1, 10, FEW])
@pytest.mark.parametrize("proving", [False, True])
def test_the_round_pass_by_bits_is_numpys(n, proving):
    """_bits_pass from the new block's and the old one's bits: the same lists, counts and resident mask
    as NumPy's, for blocks of every size from none to all (overlapping, equal, apart)."""
    rng = np.random.default_rng(n)
    for trial in range(60):
        m, k = rng.integers(0, n + 1, 2)
        old, new, resident, keep = _case(rng, n, m, k, "mask")
        if trial % 6 == 0:
            keep = resident.copy()  # the same block (the loop does not call it then; the lists still hold)
        proven = (rng.random(n) < 0.3) & ~resident if proving else np.zeros(n, dtype=bool)
        coord_bytes = rng.integers(1, 1000, n)
        want_joined = np.flatnonzero(keep & ~resident)
        want_stale = np.flatnonzero(~resident & ~proven)
        for list_stale in (False, True):
            block, joined = np.full(n + 1, -7, np.int64), np.full(n, -7, np.int64)
            stale, after = np.full(n + 1, -7, np.int64), resident.copy()
            m_new, n_joined, moved, n_stale = _bits_pass(_bits(keep), _bits(resident), after, proven, coord_bytes,
                                                         block, joined, stale, list_stale)
            assert m_new == keep.sum() and (block[:m_new] == np.flatnonzero(keep)).all(), trial
            assert n_joined == want_joined.size and (joined[:n_joined] == want_joined).all(), trial
            assert moved == coord_bytes[want_joined].sum() and (after == keep).all(), trial
            assert n_stale == (want_stale.size if list_stale else 0), trial
            assert (stale[:n_stale] == want_stale[:n_stale]).all(), trial
