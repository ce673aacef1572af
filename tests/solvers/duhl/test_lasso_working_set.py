"""The all-resident Lasso's growing working set (solvers.duhl.loops.resident.grow_cap): what it
keeps, and that a solve through it reaches scikit-learn's optimum with fewer epochs."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import Lasso

import solvers.duhl.loops.resident as resident_loop
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem


def test_grow_cap_keeps_the_non_zeros_and_the_largest_gaps():
    n = 1000
    rng = np.random.default_rng(0)
    a = np.zeros(n)
    a[[3, 500, 998]] = [1.0, -2.0, 0.5]
    gaps = rng.random(n)
    work = np.flatnonzero(gaps > 0.2).astype(np.int64)
    work = np.union1d(work, [3, 500, 998]).astype(np.int64)
    grow_cap = resident_loop.grow_cap
    kept = grow_cap(work, work.shape[0], a, gaps, 10)
    chosen = set(work[:kept].tolist())
    assert kept == 10 and {3, 500, 998} <= chosen
    zeros = [i for i in np.union1d(np.flatnonzero(gaps > 0.2), [3, 500, 998]) if a[i] == 0.0]
    top = sorted(zeros, key=lambda i: -gaps[i])[:7]
    assert chosen - {3, 500, 998} == set(top)
    # a cap above a quarter of the coordinates keeps all (w8a's Lasso: no growth)
    work2 = np.arange(n, dtype=np.int64)
    assert grow_cap(work2, n, a, gaps, 300) == n


def test_grow_cap_counts_the_non_zeros_the_shrinking_left_out():
    """celer's 2 ||w||_0 over all of a: 40 non-zeros, of which only 3 still have a gap above the
    shrinking's cut (in ``work``), make a set of 80 (counting only those 3 made it 10: the set
    stayed under the support's size, round after round, on a sparse L1 logistic regression)."""
    n = 1000
    rng = np.random.default_rng(0)
    a = np.zeros(n)
    a[rng.choice(n, 40, replace=False)] = 1.0
    gaps = rng.random(n)
    gaps[a != 0] = 0.0
    inside = np.flatnonzero(a)[:3]
    gaps[inside] = 0.5
    work = np.union1d(np.flatnonzero(gaps > 0.2), inside).astype(np.int64)
    zeros = [i for i in work if a[i] == 0.0]
    kept = resident_loop.grow_cap(work, work.shape[0], a, gaps, 10)  # (reorders work)
    chosen = set(work[:kept].tolist())
    assert kept == 80 and set(inside.tolist()) <= chosen
    assert chosen - set(inside.tolist()) == set(sorted(zeros, key=lambda i: -gaps[i])[:77])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_growing_working_set_reaches_sklearns_optimum_in_fewer_epochs(sparse, monkeypatch):
    rng = np.random.default_rng(1)
    X = sp.random(300, 800, density=0.05, format="csc", random_state=rng) if sparse else \
        rng.standard_normal((300, 800))
    coef = np.zeros(800)
    coef[:8] = rng.standard_normal(8)
    y = X @ coef + 0.01 * rng.standard_normal(300)
    alpha = 0.05 * np.abs(X.T @ y).max() / 300
    problem = make_problem("lasso", X, y, alpha=alpha, fit_intercept=False)
    ref = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100000).fit(X, y)
    epochs = {}
    for least in (0, resident_loop.WS_LEAST):
        monkeypatch.setattr(resident_loop, "WS_LEAST", least)
        res = DuHL(tol=1e-9, random_state=0).solve(problem)
        assert res.status == "converged" and res.rel_gap <= 1e-9
        np.testing.assert_allclose(res.a, ref.coef_, atol=1e-6 * np.abs(ref.coef_).max())
        epochs[least] = res.epochs
    assert epochs[resident_loop.WS_LEAST] < epochs[0]
