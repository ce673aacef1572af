"""The gap memory's proofs: a stale zero coordinate marked proven has gap exactly 0 at the
current state. Oracle: the gap kernel run on the coordinate's data at that state (what a
read would give), and numpy's s_i = <A_i - mu_i, u>."""

import numpy as np
import pytest

from solvers.duhl import swaps
from solvers.duhl.gap_memory import GapMemory, dual_step
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem


def lasso(fit_intercept, seed=0, m=300, d=120):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d)) + (3.0 if fit_intercept else 0.0)
    w = np.zeros(d)
    w[:8] = rng.standard_normal(8)
    y = X @ w + 0.1 * rng.standard_normal(m)
    alpha = 0.1 * np.abs((X - X.mean(0) * fit_intercept).T @ (y - y.mean() * fit_intercept)).max() / m
    return make_problem("lasso", X, y, alpha=alpha, fit_intercept=fit_intercept)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_a_proven_gap_is_the_gap_a_read_gives(fit_intercept):
    """Random moves of the state (a changes on a few coordinates, z and off follow): every
    coordinate proven at a state has a_i = 0 and gap 0 there, by the kernel and by numpy."""
    problem = lasso(fit_intercept)
    rng = np.random.default_rng(1)
    n = problem.n_coords
    a = np.zeros(n)
    z, off = problem.state_from(a)
    memory = GapMemory(*problem.coordinate_gaps(a, z, off, with_s=True), problem.coord_bytes,
                       **swaps.provable(problem))
    m = z.shape[0]
    proven_total = 0
    for step in range(40):
        block = rng.choice(n, 10, replace=False)
        old_z, old_off = z, off
        a = a.copy()
        a[block[:3]] += rng.normal(scale=0.3 / (1 + step), size=3)  # a few move; the rest stay at 0
        z, off = problem.state_from(a)
        gaps, s = problem.coordinate_gaps(a, z, off, block, with_s=True)
        moved = dual_step(old_z, z, problem.c * m * old_off[0], problem.c * m * off[0], memory.mu is not None)
        memory.moved(block, gaps, s, step=moved, a=a, u_norm=float(np.linalg.norm(z)))
        proven = np.flatnonzero(memory.proven)
        proven_total += proven.size
        assert not memory.proven[block].any()
        true_gaps, true_s = problem.coordinate_gaps(a, z, off, with_s=True)
        assert np.all(a[proven] == 0.0)
        assert np.all(true_gaps[proven] == 0.0)
        assert np.all(memory.gaps[proven] == 0.0)
        # s_i by numpy: <A_i - mu_i, z - mean(z)> plus the intercept's share (see gaps_dense)
        A = problem.A
        u = z - (problem.c * off[0] if fit_intercept else 0.0)
        s_np = (A - problem.mu[:, None]) @ u if fit_intercept else A @ z
        np.testing.assert_allclose(true_s, s_np, rtol=1e-9, atol=1e-9 * np.abs(s_np).max())
        assert np.all(np.abs(s_np[proven]) < problem.theta.l1)
    assert proven_total > 0  # the bound proves something on this path, else nothing was tested


def test_models_without_an_l1_term_prove_nothing():
    ridge = make_problem("ridge", np.eye(5), np.arange(5.0), alpha=1.0)
    assert swaps.provable(ridge) == {}
    X = np.random.default_rng(0).standard_normal((40, 5))
    svm = make_problem("svm", X, np.sign(X[:, 0]), C=1.0)
    assert swaps.provable(svm) == {}


def test_end_states_certified_by_proofs_are_exact(monkeypatch):
    """A budgeted Lasso run: rows certified with no stale gap left to read match the gap of
    the iterate recomputed from a alone (the tight certificate, as problem.certify gives it
    with every coordinate read)."""
    problem = lasso(False, seed=3, m=400, d=300)
    proofs = []
    real = GapMemory.moved

    def moved(self, *args, **kwargs):
        real(self, *args, **kwargs)
        proofs.append(int(self.proven.sum()))

    monkeypatch.setattr(GapMemory, "moved", moved)
    res = DuHL(memory_budget=0.25, tol=1e-10, random_state=0, keep_iterates=10_000).solve(problem)
    assert res.status == "converged" and max(proofs) > 0
    best = -np.inf
    for a, gap, exact in zip(res.iterates, res.trace.gap, res.trace.certified):
        if not exact:
            continue
        z, off = problem.state_from(a)
        primal, dual, _, best = problem.certify(a, z, off, dual_best=best)
        assert gap == pytest.approx(primal - best, rel=1e-7, abs=1e-12 * problem.P0)
