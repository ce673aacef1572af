"""The gap selection's shortcut (solvers.duhl.gap_select._same_block): the block the coordinates
hold is kept exactly when np.lexsort's prefix would choose it again; the block by the bits, where
the last one ended, and of a few coordinates by their ranks (solvers.duhl.few_select) is that prefix."""

import numpy as np
import pytest

from solvers.duhl.few_select import _few_block, _fit, _fit_floor
from solvers.duhl.block_select import (AT_ZERO, BY_BITS, FLOOR_SHARE, NO_HINT, TOP, _floor_bits, _floor_block,
                                       _next_block, _radix_mask, _top_block)
from solvers.duhl.gap_select import BIG, _bit_length, _edge_block, _gap_block, _resident_keys, _same_block, _tie_cut


def _prefix(gaps, resident, coord_bytes, budget):
    order = np.lexsort((~resident, -gaps))
    return np.sort(order[: int(np.searchsorted(np.cumsum(coord_bytes[order]), budget, side="right"))])


def _random_case(n, trial, zeros, nans):
    """Gaps (mostly zeros, or rounded to a tenth: ties; some -0.0 and NaN), bytes (some 0, or
    all equal), a budget, and the lexsort prefix of these gaps as the resident set."""
    rng = np.random.default_rng(trial)
    gaps = np.where(rng.random(n) < zeros, 0.0, rng.random(n)) if trial % 3 else np.round(rng.random(n), 1)
    gaps[rng.random(n) < 0.03] = -0.0
    if trial % 4 == 3:
        gaps[rng.random(n) < nans] = np.nan
    coord_bytes = rng.integers(0 if trial % 5 == 0 else 1, 100, n)
    if trial % 5 == 1:  # dense data: every coordinate the same bytes
        coord_bytes[:] = coord_bytes[:1]
    budget = int(coord_bytes.sum() * rng.uniform(0.0, 1.05))
    resident = np.zeros(n, dtype=bool)
    resident[_prefix(gaps, rng.random(n) < 0.3, coord_bytes, budget)] = True
    return rng, gaps, coord_bytes, budget, resident


@pytest.mark.parametrize("n", [0, 1, 10, 32, 40, 5000, 20000])
def test_the_block_is_kept_exactly_when_the_lexsort_prefix_keeps_it(n):
    """Mostly-zero gaps (the dual SVM's), few distinct values, NaN and -0.0; the resident set the
    prefix of these gaps (kept), of gaps a few of which then grew, or a random set; zero-byte
    coordinates: the shortcut answers exactly when the prefix is the resident set, with it; the
    block by the bits, or for a few coordinates (n <= 32) by their ranks, is the prefix."""
    kept = 0
    for trial in range(24):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.9 if n > 32 else 0.4,
                                                                nans=0.02 if n > 32 else 0.2)
        if trial % 6 == 1:
            gaps = gaps * np.where(rng.random(n) < 0.01, 3.0, 1.0)
        elif trial % 6 == 2:
            resident = rng.random(n) < 0.3
        expected = _prefix(gaps, resident, coord_bytes, budget)
        chosen = np.empty(n, dtype=np.int64)
        k = _same_block(gaps, resident, coord_bytes, budget, chosen)
        assert (k >= 0) == np.array_equal(np.flatnonzero(resident), expected), trial
        if k >= 0:
            kept += 1
            np.testing.assert_array_equal(chosen[:k], expected)
        k = _gap_block(gaps, resident, coord_bytes, budget, chosen, np.empty(n, np.uint64), np.empty(n, np.int64))
        np.testing.assert_array_equal(np.sort(chosen[:k]), expected)
    assert kept >= 8  # the shortcut was taken


@pytest.mark.parametrize("n", [40, 569, 5000, 20000])
def test_the_block_by_the_bits_is_the_lexsort_prefix_over_decades_zeros_and_rounding_negatives(n):
    """Gaps over 16 decades (a logistic's), some 0, some a rounding's -1e-16 or -0.0, a few NaN,
    some repeated: the radix levels (whose first spans only the positive gaps' keys below
    16,384 coordinates, the others in its lowest bucket) choose np.lexsort's prefix, wherever the
    budget ends: among the large gaps, the smallest positive ones, the zeros or the negatives."""
    for trial in range(40):
        rng = np.random.default_rng(1000 + trial)
        gaps = 10.0 ** rng.uniform(-18, -2, n)
        kind = rng.random(n)
        gaps[kind < 0.05] = 0.0
        gaps[(kind >= 0.05) & (kind < 0.1)] = -rng.uniform(0, 3e-16, n)[(kind >= 0.05) & (kind < 0.1)]
        gaps[(kind >= 0.1) & (kind < 0.12)] = -0.0
        if trial % 4 == 3:
            gaps[rng.random(n) < 0.01] = np.nan
        if trial % 5 == 2:  # repeated values: ties across the residents
            gaps = rng.choice(gaps, n)
        coord_bytes = rng.integers(1, 100, n) if trial % 2 else np.full(n, 37)
        share = [0.02, 0.3, 0.88, 0.93, 0.97, 1.02][trial % 6]  # past the positives: the zeros, the negatives
        budget = int(coord_bytes.sum() * share)
        resident = rng.random(n) < 0.3
        chosen = np.empty(n, dtype=np.int64)
        k = _gap_block(gaps, resident, coord_bytes, budget, chosen, np.empty(n, np.uint64), np.empty(n, np.int64))
        np.testing.assert_array_equal(np.sort(chosen[:k]), _prefix(gaps, resident, coord_bytes, budget), str(trial))


@pytest.mark.parametrize("n", [BIG, 40000])
def test_the_block_by_the_bits_as_a_mask_is_the_lexsort_prefix(n):
    """block_select._radix_mask (the loop's from BIG coordinates): its mask, written over a stale one,
    is the lexsort prefix and its size the prefix's, and it says whether the block ends among gaps
    above 0: mostly-zero gaps, ties, NaN and -0.0, gaps over decades with -1e-16s, all equal, and
    budgets that hold everything or nothing. The loop's _next_block gives that block after every
    kind of last block (its hint: none, by the bits, at the gaps of 0), and each kind comes."""
    seen, hints, chosen = set(), set(), np.empty(n, np.int64)
    for trial in range(16):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.9, nans=0.02)
        if trial % 4 == 1:
            gaps = np.where(rng.random(n) < 0.05, -rng.uniform(0, 3e-16, n), 10.0 ** rng.uniform(-18, -2, n))
        elif trial % 8 == 2:
            gaps[:] = 0.25
        if trial % 3 == 2:
            resident = rng.random(n) < 0.3
        budget = [budget, 0, int(coord_bytes.sum()) + 1][trial % 7 % 3] if trial % 7 > 4 else budget
        keep = rng.random(n) < 0.5  # stale: every entry is written
        k, above = _radix_mask(gaps, resident, coord_bytes, budget, keep, np.empty(n, np.int64),
                               np.empty(n, np.uint64), np.empty(n, np.int64))
        expected = _prefix(gaps, resident, coord_bytes, budget)
        assert k == expected.size, trial
        order = np.lexsort((~resident, -gaps))  # "above": the first in the order left out is a gap above 0
        assert above == (k < n and gaps[order[k]] >= np.finfo(float).tiny), trial  # (a normal float's)
        np.testing.assert_array_equal(np.flatnonzero(keep), expected, str(trial))
        seen.add(above)
        for hint in (NO_HINT, BY_BITS, AT_ZERO):  # the loop's call after each kind of block: the same block
            keep[:] = resident
            k, held, listed, came = _next_block(gaps, resident, coord_bytes, budget, keep, -1, chosen,
                                                np.empty(n, np.uint64), np.empty(n, np.int64), hint)
            np.testing.assert_array_equal(np.sort(chosen[:k]) if listed else np.flatnonzero(keep), expected)
            hints.add(came)
    assert seen == {True, False} and hints == {NO_HINT, BY_BITS, AT_ZERO}, hints


@pytest.mark.parametrize("n", [1, 40, 700, 5000])
def test_the_block_ending_at_a_given_gap_is_the_lexsort_prefix(n):
    """_edge_block answers exactly when the lexsort prefix ends among the gaps equal to the given
    one (every larger gap in it, no smaller), with that prefix: the last block's lowest gap (the
    dual SVM's zeros, some gaps grown since), or any coordinate's; ends among the resident ties,
    among the others, after all of them (the next one not fitting, or nothing below)."""
    answered = set()
    for trial in range(60):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.8, nans=0.05)
        grow = rng.random(n) < 0.002 * (trial % 4)
        gaps = np.where(grow, rng.random(n), gaps)
        edge_at = rng.integers(n) if trial % 2 or not resident.any() else np.flatnonzero(resident)[0]
        edge = gaps[edge_at]
        expected = _prefix(gaps, resident, coord_bytes, budget)
        nan, edge_nan = np.isnan(gaps), np.isnan(edge)
        above = ~nan if edge_nan else gaps > edge
        below = np.zeros(n, bool) if edge_nan else (gaps < edge) | nan
        inside = np.zeros(n, dtype=bool)
        inside[expected] = True
        ends_there = inside[above].all() and not inside[below].any()
        chosen = np.empty(n, dtype=np.int64)
        edge_key = np.uint64(_resident_keys(gaps[edge_at:edge_at + 1], np.ones(1, bool), coord_bytes[:1])[0])
        k = _edge_block(gaps, resident, coord_bytes, budget, edge_key, chosen, np.empty(n, bool))
        assert (k >= 0) == ends_there, trial
        if k >= 0:
            np.testing.assert_array_equal(np.sort(chosen[:k]), expected)
            ties = (nan if edge_nan else gaps == edge)
            last = inside[ties & resident].all(), inside[ties & ~resident].all()
            answered.add(last)
    assert len(answered) >= 3 if n > 1 else answered  # cut among resident ties, among the others, after all


@pytest.mark.parametrize("n", [1, 2, 10, 32])
def test_a_few_coordinates_block_by_ranks_is_the_lexsort_prefix(n):
    """The compiled loop's block of a few coordinates (_few_block by _few_mask's ranks): the
    lexsort prefix, as a mask, for dense data (every coordinate the same bytes: the count path,
    ties cut inside or not) and mixed bytes; "held" exactly when it is the resident block the
    loop lists already; with a NaN gap it answers k = -1 and _next_block, as in the loop, gives
    the same prefix."""
    paths = set()
    for trial in range(60):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.4, nans=0.2)
        if trial % 6 == 2:
            resident = rng.random(n) < 0.3
        expected = _prefix(gaps, resident, coord_bytes, budget)
        keep, chosen = np.zeros(n, bool), np.empty(n, np.int64)
        m = int(resident.sum()) if trial % 2 else -1  # the loop lists the resident block (m >= 0), or not yet
        fit = _fit(coord_bytes, budget)
        k, held, listed, _, _ = _few_block(gaps, resident, coord_bytes, budget, fit, keep, m, np.empty(n, np.int64))
        nan = bool(np.isnan(gaps).any())
        assert (k < 0) == nan and not listed, trial
        same = np.array_equal(np.flatnonzero(resident), expected)
        if nan:  # the loop's next call, whose answer may be held or a mask, too
            k, held, listed, _ = _next_block(gaps, resident, coord_bytes, budget, keep, m, chosen,
                                             np.empty(n, np.uint64), np.empty(n, np.int64))
        if nan and held:  # the loop's keep: the resident block, listed already
            keep = resident.copy()
        got = np.sort(chosen[:k]) if listed else np.flatnonzero(keep)
        np.testing.assert_array_equal(got, expected, err_msg=f"trial {trial}")
        assert held == (same and m >= 0) or nan, trial
        paths.add((fit >= 0, nan, held))
    by_ranks = {(True, False, False), (False, False, False)} if n > 1 else {(True, False, False)}
    assert by_ranks <= paths, paths  # both byte kinds (one coordinate: its bytes are all), by ranks


@pytest.mark.parametrize("n", [1, 2, 10, 32])
def test_the_fit_th_largest_gap_is_numpys(n):
    """few_select._fit_floor against its definition: the fit-th largest gap of the sorted gaps and the
    count of those at or above it; none (-1) with NaN, a negative gap or -0.0 (whose bits do not order
    as the floats do), or fit < 0; +0.0 when fit >= n (every gap); gaps with ties, zeros and +inf;
    every fit from -1 to n + 1."""
    rng, answered, refused = np.random.default_rng(n), 0, 0
    for trial in range(40):
        gaps = rng.random(n) if trial % 2 else np.round(rng.random(n), 1)  # ties
        gaps[rng.random(n) < 0.2] = 0.0
        if trial % 5 == 1:
            gaps[rng.integers(n)] = np.inf
        spoiled = trial % 7 == 3
        if spoiled:
            gaps[rng.integers(n)] = (np.nan, -0.0, -1e-300)[trial % 3]
        for fit in range(-1, n + 2):
            t, count = _fit_floor(gaps, fit)
            if spoiled or fit < 0:
                assert (t, count) == (-1, 0), (trial, fit)
                refused += 1
                continue
            want = 0.0 if fit >= n else (np.sort(gaps)[::-1][fit - 1] if fit > 0 else gaps.max())  # (all: 0.0)
            assert t == np.array(want).view(np.int64) and count == np.count_nonzero(gaps >= want), (trial, fit)
            answered += 1
    assert answered and refused


@pytest.mark.parametrize("n", [4, 10, 32])
def test_a_few_coordinates_block_by_the_fit_th_gap_is_the_lexsort_prefix(n):
    """_few_block on dense data (every coordinate the same bytes) with gaps whose bits order them:
    the block by the fit-th largest gap (fit at most n / 2) is the lexsort prefix, its bits and
    ``keep`` agree, and a tie cut at that gap goes to the ranks (resident first) with the same prefix."""
    rng, paths = np.random.default_rng(n), set()
    for trial in range(60):
        gaps = rng.random(n) if trial % 3 else np.round(rng.random(n), 1)
        gaps[rng.random(n) < 0.2] = 0.0
        coord_bytes = np.full(n, 8)
        budget = 8 * int(rng.integers(0, n // 2 + 1)) + int(rng.integers(0, 8))
        resident = rng.random(n) < 0.3
        expected = _prefix(gaps, resident, coord_bytes, budget)
        fit = _fit(coord_bytes, budget)
        keep = np.zeros(n, bool)
        k, held, listed, bits, was = _few_block(gaps, resident, coord_bytes, budget, fit, keep, -1,
                                                np.empty(n, np.int64))
        np.testing.assert_array_equal(np.flatnonzero(keep), expected, err_msg=f"trial {trial}")
        assert k == expected.size and not held and not listed
        assert bits == sum(1 << int(i) for i in expected) and was == sum(1 << int(i) for i in np.flatnonzero(resident))
        t, count = _fit_floor(gaps, fit)
        paths.add(2 * fit < n and count <= fit)
    assert paths == {True, False}  # by the fit-th gap, and by the ranks


@pytest.mark.parametrize("n", [40, 300, 5000])
def test_a_small_block_kept_in_one_pass_is_the_lexsort_prefix(n):
    """_top_block (a block among the order's TOP first): the lexsort prefix when it answers, and it
    answers exactly when the prefix ends before TOP coordinates fit or all of them are in it; small
    budgets (a few coordinates), ties (zeros, rounded gaps) resident first, NaN last, +inf first;
    gaps over many scales (the floor's eighths); from a floor (_floor_bits found one) or not."""
    answered, floors = 0, set()
    for trial in range(60):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.6, nans=0.05)
        if trial % 5 == 4:
            gaps = gaps * 10.0 ** rng.integers(-6, 3, n)
        if trial % 7 == 6:
            gaps[rng.random(n) < 0.01] = np.inf
        budget = int(np.sort(coord_bytes)[::-1][: 1 + trial % (2 * TOP)].sum() * rng.uniform(0.5, 1.2))
        resident = rng.random(n) < 8 / n if trial % 3 else resident
        expected = _prefix(gaps, resident, coord_bytes, budget)
        order = np.lexsort((~resident, -gaps))
        fits_all_top = coord_bytes[order[:TOP]].sum() <= budget
        chosen = np.empty(n, np.int64)
        k = _top_block(gaps, resident, coord_bytes, budget, chosen, np.empty(n, np.uint64), np.empty(n, np.int64))
        assert (k < 0) == fits_all_top, trial
        floors.add(_floor_bits(gaps, coord_bytes, budget) > 0)
        if k >= 0:
            answered += 1
            np.testing.assert_array_equal(np.sort(chosen[:k]), expected, err_msg=f"trial {trial}")
    assert answered >= 20 and floors == {True, False}


@pytest.mark.parametrize("n", [40, 569, 5000])
def test_the_block_from_a_floor_is_the_lexsort_prefix_in_coordinate_order(n):
    """_floor_block (the loop's block below BIG coordinates when it is at most a FLOOR_SHARE-th of
    the bytes): it answers exactly when _floor_bits finds a floor, with the lexsort prefix, in
    coordinate order when the candidates (the gaps at or above the floor) are at most half the
    coordinates; gaps over decades (a logistic's), repeated, zeros, -0.0, a rounding's negatives,
    +inf, NaN (no floor); budgets from one coordinate to a quarter of the bytes (past FLOOR_SHARE:
    none). The loop's _next_block gives that block after a block by the bits (no residents' pass)
    or none, and says it came by the bits when the floor answered."""
    answered, ordered, refused = 0, 0, 0
    for trial in range(60):
        rng = np.random.default_rng(2000 + trial)
        gaps = 10.0 ** rng.uniform(-12 if trial % 2 else -3, 0, n)
        kind = rng.random(n)
        gaps[kind < 0.05] = 0.0
        rounding = (kind >= 0.05) & (kind < 0.08)
        gaps[rounding] = -rng.uniform(0, 3e-16, n)[rounding]
        gaps[(kind >= 0.08) & (kind < 0.1)] = -0.0
        if trial % 5 == 2:  # repeated values: ties across the residents
            gaps = rng.choice(gaps, n)
        if trial % 7 == 3:
            gaps[rng.integers(n)] = np.inf
        if trial % 9 == 4:
            gaps[rng.integers(n)] = np.nan
        coord_bytes = rng.integers(1, 100, n) if trial % 2 else np.full(n, 240)
        budget = int(coord_bytes.sum() * [1 / n, 0.01, 0.05, 0.12, 0.25][trial % 5])
        resident = rng.random(n) < 0.1
        expected = _prefix(gaps, resident, coord_bytes, budget)
        chosen, keys, cand = np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(n, np.int64)
        k = _floor_block(gaps, resident, coord_bytes, budget, chosen, keys, cand)
        floor = _floor_bits(gaps, coord_bytes, budget, FLOOR_SHARE)
        assert (k >= 0) == (floor > 0), trial
        if k < 0:
            refused += 1
        else:
            answered += 1
            np.testing.assert_array_equal(np.sort(chosen[:k]), expected, str(trial))
            if 2 * np.count_nonzero(gaps >= np.array([floor]).view(np.float64)[0]) <= n:
                ordered += 1
                np.testing.assert_array_equal(chosen[:k], expected, str(trial))
        for hint in (NO_HINT, BY_BITS):
            keep = rng.random(n) < 0.5
            k, held, listed, came = _next_block(gaps, resident, coord_bytes, budget, keep, -1, chosen, keys, cand,
                                                hint)
            np.testing.assert_array_equal(np.sort(chosen[:k]) if listed else np.flatnonzero(keep), expected)
            assert came == BY_BITS or floor == 0 or hint == NO_HINT, trial
    assert answered >= 20 and ordered >= 15 and refused >= 10, (answered, ordered, refused)


def test_the_bit_length_is_pythons():
    """gap_select._bit_length (by the leading zeros) against int.bit_length: 0, powers of two, all ones."""
    rng = np.random.default_rng(0)
    values = [0, 1, 2, 3, 255, 256, 1 << 52, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    values += [int(v) for v in rng.integers(0, 1 << 62, 20, dtype=np.int64) >> rng.integers(0, 62, 20)]
    for v in values:
        assert _bit_length(np.uint64(v)) == v.bit_length(), v


@pytest.mark.parametrize("n", [40, 300])
def test_the_floor_is_a_gap_the_whole_block_has_and_its_bytes_pass_the_budget(n):
    """_floor_bits: 0 (none), or the bits of a positive float f with every coordinate of the lexsort
    prefix at a gap >= f and the bytes of the gaps >= f past the budget; f is half the largest
    gap, a quarter, ... (1/4096 the last); none when no gap is positive, or one is NaN."""
    found = 0
    for trial in range(80):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.5, nans=0.1)
        gaps = gaps * 10.0 ** rng.integers(-4, 1, n) if trial % 2 else gaps
        if trial % 10 == 9:
            gaps[:] = np.where(np.isnan(gaps), np.nan, 0.0)
        budget = int(np.sort(coord_bytes)[::-1][: 1 + trial % 8].sum())
        resident = rng.random(n) < 4 / n
        bits = _floor_bits(gaps, coord_bytes, budget)
        real = gaps[~np.isnan(gaps)]
        if not (real > 0).any() or np.isnan(gaps).any():
            assert bits == 0, trial
            continue
        if bits == 0:
            continue
        found += 1
        f = np.array([bits]).view(np.float64)[0]
        assert np.log2(real.max() / f) in range(1, 13), trial
        assert coord_bytes[gaps >= f].sum() > budget, trial
        assert (gaps[_prefix(gaps, resident, coord_bytes, budget)] >= f).all(), trial
    assert found >= 40


@pytest.mark.parametrize("n", [1, 300, 5000])
def test_the_tie_cut_is_the_first_tie_past_the_room_from_either_end(n):
    """_tie_cut: the first coordinate with the given gap (resident ones, or the others) whose bytes, with
    those of its kind before it, pass the room; n when none does. Against the cumulative sum, for rooms
    over the whole range (it scans from the start below half the ties' bytes, from the end above), with
    zero-byte coordinates and the room at a tie's exact end."""
    scanned = set()
    for trial in range(40):
        rng, gaps, coord_bytes, budget, resident = _random_case(n, trial, zeros=0.7, nans=0.05)
        resident = rng.random(n) < 0.5
        edge_key = np.uint64(_resident_keys(np.zeros(1), np.ones(1, bool), coord_bytes[:1])[0])
        for on_resident in (True, False):
            ties = (gaps == 0.0) & (resident == on_resident)
            total = int(coord_bytes[ties].sum())
            cum = np.cumsum(np.where(ties, coord_bytes, 0))
            rooms = [0, total - 1, total, int(cum[ties][len(cum[ties]) // 2]) if ties.any() else 0,
                     int(rng.integers(0, total + 1))]
            for room in rooms:
                room = max(room, 0)
                past = np.flatnonzero(ties & (cum > room))
                expected = past[0] if past.size else n
                got = _tie_cut(gaps, resident, coord_bytes, edge_key, on_resident, room, total)
                assert got == expected, (trial, on_resident, room, total)
                scanned.add(2 * room >= total and room < total)
    assert scanned == {True, False}  # from the end, and from the start
