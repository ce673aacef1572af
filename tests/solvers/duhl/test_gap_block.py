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


# ------------------------------------------------------------- what the block ranks ---
def brute_reach_gap(l1, a, s, L, bound):
    """The coordinate gap a s + l1 |a| + max over |x| <= r of (-s x - l1 |x|), with the support's
    bound r = min(|a| + (|s| - l1)_+ / L, bound), the max taken on a fine grid (it is attained at
    x = -sign(s) r or at 0)."""
    r = min(abs(a) + max(abs(s) - l1, 0.0) / L, bound)
    x = np.linspace(-r, r, 200001)
    return a * s + l1 * abs(a) + float(np.max(-s * x - l1 * np.abs(x)))


@pytest.mark.parametrize("theta_of", ["lasso", "logistic_l1"])
def test_reach_gap_is_the_gap_on_the_coordinates_reach(theta_of):
    from solvers.glm.models import ElasticNetTheta, LogisticPrimalTheta, coord_gap, reach_gap

    rng = np.random.default_rng(0)
    for _ in range(200):
        l1, bound, L = 0.5, 50.0, float(rng.uniform(0.1, 10))
        theta = (ElasticNetTheta(l1, 0.0, bound) if theta_of == "lasso" else LogisticPrimalTheta(l1, 0.0, bound, 1.0))
        a = float(rng.choice([0.0, rng.normal()]))
        s = float(rng.normal(scale=1.0))
        got = reach_gap(theta, a, s, L)
        assert got == pytest.approx(brute_reach_gap(l1, a, s, L, bound), rel=1e-6, abs=1e-9)
        assert -1e-12 <= got <= coord_gap(theta, a, s) + 1e-12  # a gap, never above the bounded support's
        if abs(s) <= l1:  # the gap itself (written without its cancellation: equal to rounding)
            assert got == pytest.approx(coord_gap(theta, a, s), rel=1e-12, abs=1e-15) and got >= 0.0
    # at 0 with a violation: the violation squared over L, where the support's bound gives bound x violation
    theta = ElasticNetTheta(0.5, 0.0, 1e4)
    assert reach_gap(theta, 0.0, 0.8, 2.0) == pytest.approx(0.3 ** 2 / 2.0)
    assert coord_gap(theta, 0.0, 0.8) == pytest.approx(1e4 * 0.3)
    # a coordinate at its optimum but for an ulp of s ranks at 0 or above, where the formula's terms in
    # their order, a s + l1 |a| + reach (|s| - l1), round to -9e-18
    theta = ElasticNetTheta(0.3, 0.0, 1e4)
    a, s = 0.3365861535081137, float(np.nextafter(-0.3, -1.0))
    assert a * s + 0.3 * a + (a + (abs(s) - 0.3)) * (abs(s) - 0.3) < 0.0
    assert reach_gap(theta, a, s, 1.0) >= 0.0
    # with an l2 part g* is finite: the gap itself
    theta = ElasticNetTheta(0.5, 0.2, np.inf)
    assert reach_gap(theta, 0.3, -0.9, 2.0) == coord_gap(theta, 0.3, -0.9)


def test_block_keys_rank_reach_gaps_and_leave_other_models_gaps_alone():
    from solvers.duhl.block.gap_block import block_keys
    from solvers.glm.models import ElasticNetTheta, SVMTheta

    gaps = np.array([3.0, 0.0, np.nan, 600.0, 2.5])
    a = np.array([1.0, 0.0, 0.0, 0.0, 0.2])
    s = np.array([-0.3, 0.3, 0.9, 0.8, -2.0])
    sqnorm = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    theta = ElasticNetTheta(0.5, 0.0, 2000.0)
    out = np.full(5, -1.0)
    keys = block_keys(theta, gaps, a, s, sqnorm, 0.5, 1e-3, out)
    assert keys is out or np.shares_memory(keys, out)
    assert keys[1] == 0.0 and np.isnan(keys[2])  # proven 0 and unknown: as they are
    for i in (0, 3, 4):
        assert keys[i] == pytest.approx(brute_reach_gap(0.5, a[i], s[i], 0.5 * sqnorm[i], 2000.0), abs=1e-9)
    # coordinate 3 sits at 0 with the largest gap (the bound times its violation 0.3); by its reach it
    # ranks below the others: 0.3^2 / L, against 0.2 (no violation) and 0.9 (a violation of 1.5)
    assert keys[3] == pytest.approx(0.3 ** 2 / 2.0) and keys[3] < keys[0] < keys[4]
    svm = SVMTheta(*([1.0] * len(SVMTheta._fields)))
    assert np.shares_memory(block_keys(svm, gaps, a, s, sqnorm, 0.5, 1e-3, out), gaps)
    # the reach gaps sum to 1.145: with a target above that, the gaps themselves
    assert np.shares_memory(block_keys(theta, gaps, a, s, sqnorm, 0.5, 1.2, out), gaps)
    assert np.shares_memory(block_keys(theta, gaps, a, s, sqnorm, 0.5, 1.1, out), out)


def test_gap_block_on_a_dense_l1_solution_moves_as_fast_as_streaming():
    """An L1 logistic regression whose solution holds 3/4 of the features, a quarter of them in the
    block: ranked by the bounded support's gaps (the bound P(0)/l1 times each violation at 0) the gap
    block took 3x the epochs of blocks in storage order; ranked by reach, about as many."""
    import scipy.sparse as sp

    from solvers.duhl import DuHL
    from solvers.glm.problems import make_problem

    rng = np.random.default_rng(2)
    X = sp.random(5000, 1000, density=0.01, format="csc", random_state=rng, data_rvs=lambda k: rng.standard_normal(k))
    coef = np.zeros(1000)
    coef[rng.choice(1000, 100, replace=False)] = rng.standard_normal(100)
    score = X @ coef
    y = np.where(score + 0.5 * np.std(score) * rng.standard_normal(5000) > 0, 1.0, -1.0)
    p = make_problem("logistic_l1", X, y, C=1.0, fit_intercept=False)
    runs = {sel: DuHL(memory_budget=0.25, selection=sel, tol=1e-6, max_epochs=500, random_state=0).solve(p)
            for sel in ("gap", "sequential")}
    assert all(r.status == "converged" for r in runs.values())
    assert (runs["gap"].a != 0).mean() > 0.6
    assert runs["gap"].epochs <= 1.2 * runs["sequential"].epochs, {k: r.epochs for k, r in runs.items()}
    np.testing.assert_allclose(runs["gap"].a, runs["sequential"].a, atol=1e-4)
