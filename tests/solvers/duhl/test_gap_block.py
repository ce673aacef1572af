"""DuHL's gap block (solvers.duhl.block.gap_block): the compiled entry point ``gap_block`` and the
Python loop's ``gap_block_coords`` give np.lexsort's prefix (``gap_block_spec``, and an independent
oracle written out here) in every regime: the resident block held, the prefix ending among the
gaps of 0, radix levels over distinct gaps, a few candidates sorted, equal gaps (resident first,
then by index), NaN and -0.0, zero-byte coordinates, budgets from none to all."""

import numpy as np
import pytest

from solvers.duhl.block.gap_block import gap_block, gap_block_coords, gap_block_spec


def oracle(gaps, resident, coord_bytes, budget):
    """The definition, by Python's sort: largest gap first (NaN last, -0.0 as 0.0), resident first
    on ties, then by index; the longest prefix whose bytes fit."""
    def key(i):
        g = gaps[i]
        r = 0 if resident[i] else 1
        return (1, 0.0, r, i) if np.isnan(g) else (0, -float(g) + 0.0, r, i)
    used, block = 0, []
    for i in sorted(range(len(gaps)), key=key):
        used += int(coord_bytes[i])
        if used > budget:
            break
        block.append(i)
    return np.array(sorted(block), dtype=np.int64)


def compiled_block(gaps, resident, coord_bytes, budget):
    n = gaps.shape[0]
    keep = np.zeros(n, dtype=np.bool_)
    k, held = gap_block(gaps, resident, coord_bytes, budget, keep, np.empty(n, np.int64), np.empty(n, np.uint64),
                        np.empty(n, np.int64))
    block = np.flatnonzero(resident if held else keep)
    assert k == block.shape[0]
    return block, held


def cases(n, trials=24):
    """Gaps of every regime; a resident set that is the prefix (held), the prefix of gaps a few of
    which then grew, or random; bytes equal (dense data), varied, or some 0."""
    for trial in range(trials):
        rng = np.random.default_rng(trial)
        kind = trial % 6
        if kind == 0:    # the dual SVM's: mostly zeros
            gaps = np.where(rng.random(n) < 0.9, 0.0, rng.random(n))
        elif kind == 1:  # few distinct values: ties
            gaps = np.round(rng.random(n), 1)
        elif kind == 2:  # distinct, spanning decades
            gaps = rng.lognormal(-8, 3, n)
        elif kind == 3:  # rounding's negatives beside tiny positives
            gaps = rng.normal(0, 1e-16, n) + np.where(rng.random(n) < 0.2, rng.random(n) * 1e-3, 0.0)
        elif kind == 4:  # all equal
            gaps = np.full(n, 0.25)
        else:            # NaN and infinities
            gaps = rng.standard_normal(n) ** 2
            gaps[rng.random(n) < 0.05] = np.nan
            gaps[rng.random(n) < 0.02] = np.inf
        gaps[rng.random(n) < 0.03] = -0.0
        coord_bytes = rng.integers(0 if trial % 4 == 0 else 1, 100, n).astype(np.int64)
        if trial % 4 == 1:
            coord_bytes[:] = 8
        budget = int(coord_bytes.sum() * rng.choice([0.0, 0.05, 0.25, 0.5, 1.0, 1.1]))
        resident = np.zeros(n, dtype=bool)
        if trial % 3 == 0:  # the prefix: the block holds
            resident[oracle(gaps, rng.random(n) < 0.3, coord_bytes, budget)] = True
        elif trial % 3 == 1:  # the prefix, then a few gaps grew
            resident[oracle(gaps, rng.random(n) < 0.3, coord_bytes, budget)] = True
            gaps = gaps * np.where(rng.random(n) < 0.01, 3.0, 1.0)
        else:
            resident = rng.random(n) < 0.3
        yield trial, gaps, resident, coord_bytes, budget


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 40, 569, 5000, 20000])
def test_the_block_is_the_lexsort_prefix(n):
    held = 0
    for trial, gaps, resident, coord_bytes, budget in cases(n):
        expected = oracle(gaps, resident, coord_bytes, budget)
        np.testing.assert_array_equal(gap_block_spec(gaps, resident, coord_bytes, budget), expected, str(trial))
        block, was_held = compiled_block(gaps, resident, coord_bytes, budget)
        np.testing.assert_array_equal(block, expected, str(trial))
        assert was_held == np.array_equal(np.flatnonzero(resident), expected), trial  # held exactly then
        held += was_held
        np.testing.assert_array_equal(gap_block_coords(gaps, resident, coord_bytes, budget), expected)
    assert n < 2 or held >= 4  # the held regime was exercised


def test_equal_gaps_take_the_residents_first_then_by_index():
    gaps = np.zeros(10)
    resident = np.zeros(10, dtype=bool)
    resident[[7, 8]] = True
    block, _ = compiled_block(gaps, resident, np.full(10, 4, dtype=np.int64), 16)
    np.testing.assert_array_equal(block, [0, 1, 7, 8])


def test_a_block_ending_among_the_zeros_keeps_the_resident_zeros():
    """The dual SVM's regime: a few positive gaps, the rest 0; the residents' zeros stay before
    other zeros (no needless swap)."""
    n = 5000
    rng = np.random.default_rng(3)
    gaps = np.zeros(n)
    gaps[rng.choice(n, 40, replace=False)] = rng.random(40)
    resident = np.zeros(n, dtype=bool)
    resident[rng.choice(n, 1000, replace=False)] = True
    coord_bytes = np.full(n, 8, dtype=np.int64)
    block, held = compiled_block(gaps, resident, coord_bytes, 8 * 1000)
    assert not held
    np.testing.assert_array_equal(block, oracle(gaps, resident, coord_bytes, 8 * 1000))
    zeros_in = np.intersect1d(block, np.flatnonzero(gaps == 0))
    assert resident[zeros_in].sum() == len(zeros_in) - max(0, len(zeros_in) - resident[gaps == 0].sum())
