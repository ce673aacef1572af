"""The gap memory's proofs: a stale zero coordinate marked proven has gap exactly 0 at the
current state. Oracle: the gap kernel run on the coordinate's data at that state (what a
read would give), and numpy's s_i = <A_i - mu_i, u>."""

import numpy as np
import pytest

from solvers.duhl import DuHL
from solvers.duhl.gaps.memory import GapMemory, dual_step
from solvers.duhl.loops.rounds import provable
from solvers.glm.problems import make_problem


def lasso(fit_intercept, seed=0, m=300, d=120):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d)) + (3.0 if fit_intercept else 0.0)
    w = np.zeros(d)
    w[:8] = rng.standard_normal(8)
    y = X @ w + 0.1 * rng.standard_normal(m)
    alpha = 0.1 * np.abs((X - X.mean(0) * fit_intercept).T @ (y - y.mean() * fit_intercept)).max() / m
    return make_problem("lasso", X, y, alpha=alpha, fit_intercept=fit_intercept)


def svm(squared, seed=0, m=200, d=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, d))
    y = np.sign(X[:, 0] + 0.5 * rng.standard_normal(m))
    return make_problem("svm", X, y, C=0.5, fit_intercept=False,
                        loss="squared_hinge" if squared else "hinge")


CASES = {"lasso": lambda: lasso(False), "lasso, intercept": lambda: lasso(True),
         "hinge svm": lambda: svm(False), "squared hinge svm": lambda: svm(True)}


@pytest.mark.parametrize("case", CASES)
def test_a_proven_gap_is_the_gap_a_read_gives(case):
    """Random moves of the state (a changes on a few coordinates, z and off follow): every
    coordinate proven at a state has gap 0 there, by the kernel, and s_i (numpy) inside the
    model's interval."""
    problem = CASES[case]()
    rng = np.random.default_rng(1)
    n = problem.n_coords
    a = np.zeros(n)
    z, off = problem.state_from(a)
    memory = GapMemory(*problem.coordinate_gaps(a, z, off, with_s=True), problem.coord_bytes,
                       **provable(problem))
    m = z.shape[0]
    proven_total = 0
    for step in range(40):
        block = rng.choice(n, 10, replace=False)
        old_z, old_off = z, off
        a = a.copy()
        if problem.dual_form:  # dual variables in [0, C]: some at each bound, some inside
            C = problem.theta.C
            a[block[:3]] = rng.choice([0.0, C, 0.5 * C], size=3) * (rng.random(3) if step % 2 else 1.0)
        else:
            a[block[:3]] += rng.normal(scale=0.3 / (1 + step), size=3)  # a few move; the rest stay at 0
        z, off = problem.state_from(a)
        gaps, s = problem.coordinate_gaps(a, z, off, block, with_s=True)
        moved = np.zeros(2)  # how far u moved
        dual_step(old_z, z, problem.c * m * old_off[0], problem.c * m * off[0], memory.mu is not None, moved)
        memory.moved(block, gaps, s, step=moved, a=a, u_norm=float(np.linalg.norm(z)))
        proven = np.flatnonzero(memory.proven)
        proven_total += proven.size
        assert not memory.proven[block].any()
        true_gaps, true_s = problem.coordinate_gaps(a, z, off, with_s=True)
        assert np.all(true_gaps[proven] == 0.0)
        assert np.all(memory.gaps[proven] == 0.0)
        # s_i by numpy: <A_i - mu_i, z - mean(z)> with an intercept (see gaps_dense), else <A_i, z>
        A = problem.A
        u = z - problem.c * off[0]
        s_np = (A - problem.mu[:, None]) @ u if np.any(problem.mu) else A @ z
        np.testing.assert_allclose(true_s, s_np, rtol=1e-9, atol=1e-9 * np.abs(s_np).max())
        if problem.dual_form:  # at 0 a margin above 1; at C (hinge) below
            assert np.all(np.where(a[proven] == 0.0, s_np[proven] > 1.0, s_np[proven] < 1.0))
            assert np.all((a[proven] == 0.0) | (a[proven] == problem.theta.C))
        else:
            assert np.all(a[proven] == 0.0) and np.all(np.abs(s_np[proven]) < problem.theta.l1)
    assert proven_total > 0  # the bound proves something on this path, else nothing was tested


def test_models_without_an_interval_prove_nothing():
    assert provable(make_problem("ridge", np.eye(5), np.arange(5.0), alpha=1.0)) == {}
    X = np.random.default_rng(0).standard_normal((40, 5))
    assert provable(make_problem("logistic", X, np.sign(X[:, 0]), C=1.0)) == {}


@pytest.mark.parametrize("case", ["lasso", "hinge svm"])
def test_rows_certified_with_proofs_are_exact(case, monkeypatch):
    """Budgeted runs where proofs happen: every certified row's gap equals the gap of its
    iterate recomputed from a alone with every coordinate read (problem.certify: the tight
    certificate for the Lasso, P - D in the dual for the SVM)."""
    problem = lasso(False, seed=3, m=400, d=300) if case == "lasso" else svm(False, seed=3, m=600, d=40)
    proofs = []
    real = GapMemory.moved

    def moved(self, *args, **kwargs):
        real(self, *args, **kwargs)
        proofs.append(int(self.proven.sum()))

    monkeypatch.setattr(GapMemory, "moved", moved)
    res = DuHL(memory_budget=0.25, tol=1e-10, random_state=0, keep_iterates=10_000, loop="python").solve(problem)
    assert res.status == "converged" and max(proofs) > 0
    best = -np.inf
    for a, gap, exact in zip(res.iterates, res.trace.gap, res.trace.certified):
        if not exact:
            continue
        z, off = problem.state_from(a)
        _, _, expected, best = problem.certify(a, z, off, dual_best=best)
        assert gap == pytest.approx(expected, rel=1e-7, abs=1e-12 * problem.P0)
