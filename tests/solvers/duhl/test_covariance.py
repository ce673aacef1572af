"""Covariance updates in the all-resident loop (solvers.duhl.accel.gram): a pass from the Gram
matrix makes the data epoch's updates, a solve that builds G still certifies the oracle's optimum
(gaps written out from its coefficients alone), and G is built only when the rate says it pays."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

import glm_oracles as go
import solvers.duhl.loops.resident as resident_loop
from solvers.duhl import DuHL
from solvers.duhl.accel.anderson import extrapolate, extrapolate_gram
from solvers.duhl.accel.gram import GRAM_PAYS, catch_up, gram_epoch, gram_pays
from solvers.glm.problems import make_problem
from solvers.kernels import cpu

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "enet", "ridge"])
def test_a_pass_from_g_makes_the_data_epochs_updates(case_factory, model, sparse):
    """Same start, same order: a pass from G = A A^T (its dots <A_i, z> from A @ z) and the kernel's
    epoch on the data reach the same coefficients, intercept shift and (after the catch-up) z."""
    problem = _problem(case_factory(model, sparse, np.float64))
    n, A = problem.n_coords, problem.A
    rng = np.random.default_rng(1)
    a = rng.standard_normal(n) * 0.1
    z, off = problem.state_from(a)
    order = rng.permutation(n).astype(np.int64)
    a0 = a.copy()
    a_data, z_data, off_data = a.copy(), z.copy(), off.copy()
    if problem.sparse:
        cpu.scd_epoch_sparse(A.indptr, A.indices, A.data, np.arange(n), order, a_data, z_data, off_data,
                             problem.mu, problem.sqnorm, problem.c, problem.theta)
        D = (A.indptr, A.indices, A.data)
    else:
        cpu.scd_epoch_dense(A, np.arange(n), order, a_data, z_data, off_data, problem.mu, problem.sqnorm,
                            problem.c, problem.theta)
        D = (A,)
    Ad = A.toarray() if sp.issparse(A) else np.asarray(A, dtype=np.float64)
    G = Ad @ Ad.T
    dots, a_ref = Ad @ z, a.copy()
    work = np.arange(n, dtype=np.int64)
    gram_epoch(G, work, order, work, a, off, problem.mu, problem.sqnorm, problem.c, problem.theta, dots, z.shape[0])
    assert np.abs(a_data - a0).max() > 0  # the epoch moved the start (else the comparison proves little)
    np.testing.assert_allclose(a, a_data, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(off, off_data, rtol=1e-9, atol=1e-12)
    catch_up(D, work, a, a_ref, z, problem.c)
    np.testing.assert_allclose(z, z_data, rtol=1e-9, atol=1e-12 * np.abs(z_data).max())
    np.testing.assert_allclose(dots, Ad @ z, rtol=1e-9, atol=1e-9 * np.abs(Ad @ z).max())
    np.testing.assert_array_equal(a_ref, a)


def _epochs(problem, a, z, off, epochs, rng):
    A = problem.A
    for _ in range(epochs):
        order = rng.permutation(problem.n_coords).astype(np.int64)
        if problem.sparse:
            cpu.scd_epoch_sparse(A.indptr, A.indices, A.data, np.arange(problem.n_coords), order, a, z, off,
                                 problem.mu, problem.sqnorm, problem.c, problem.theta)
        else:
            cpu.scd_epoch_dense(A, np.arange(problem.n_coords), order, a, z, off, problem.mu, problem.sqnorm,
                                problem.c, problem.theta)


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "enet"])
@pytest.mark.parametrize("iterates", ["epochs", "converging", "noisy"])
def test_anderson_from_g_decides_and_moves_as_on_the_data(case_factory, model, sparse, iterates):
    """The same K + 1 iterates (K epochs of the data kernel from a random start; or converging
    geometrically to a near-optimal a*: a point to keep; or noisy ones then a* itself: one to refuse):
    Anderson from G (its objective's change from the dots and G) keeps the point exactly when the
    data's version does (P from z), with the same coefficients after, and the dots are <A_i, z> of
    the data's z after its move. Without an intercept (the loop extrapolates from G only then)."""
    case = case_factory(model, sparse, np.float64)
    problem = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **{**case.params, "fit_intercept": False})
    assert not problem.mu.any()
    n, A, K = problem.n_coords, problem.A, 5
    rng = np.random.default_rng(2)
    best = np.zeros(n)
    _epochs(problem, best, *problem.state_from(best), 200, rng)  # a*: near the optimum
    v = rng.standard_normal((K + 1, n)) * 0.1 * np.abs(best).max()
    buf = np.empty((K + 1, n))
    if iterates == "epochs":
        a = rng.standard_normal(n) * 0.1
        z, off = problem.state_from(a)
        for r in range(K + 1):
            _epochs(problem, a, z, off, min(r, 1), rng)
            buf[r] = a
    else:
        for r in range(K + 1):
            buf[r] = best + (0.5 ** r * v[0] if iterates == "converging" else (r < K) * v[r])
    a = buf[K].copy()
    z, off = problem.state_from(a)
    D = (A.indptr, A.indices, A.data) if problem.sparse else (A,)
    Ad = A.toarray() if sp.issparse(A) else np.asarray(A, dtype=np.float64)
    G, dots = Ad @ Ad.T, Ad @ z
    active = np.arange(n, dtype=np.int64)
    a_data, z_data, off_data, state_data = a.copy(), z.copy(), off.copy(), np.array([float(K), 0.0, 0.0])
    extrapolate(D, active, a_data, z_data, off_data, problem.mu, problem.c, problem.b, problem.theta, buf.copy(),
                state_data)
    state = np.array([float(K), 0.0, 0.0])
    extrapolate_gram(G, active, a, dots, problem.c, problem.theta, buf, state, np.empty(n))
    assert state_data[1] == state[1] == 1  # tried
    assert state[2] == state_data[2]
    if iterates != "epochs":
        assert state[2] == (iterates == "converging")
    np.testing.assert_allclose(a, a_data, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dots, Ad @ z_data, rtol=1e-9, atol=1e-9 * np.abs(Ad @ z_data).max())


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "enet"])
def test_a_solve_through_g_certifies_the_oracle_optimum(case_factory, model, sparse, monkeypatch):
    """End to end with G built (spied; its cost taken as nothing, so that the second certificate builds
    it on these small problems): certified at 1e-9, the coefficients' primal within the reported gap of
    the oracle's optimum, and the gap itself exact against an independent dual point."""
    case = case_factory(model, sparse, np.float64)
    built = []
    real = resident_loop.gram_matrix
    monkeypatch.setattr(resident_loop, "gram_cost", lambda problem: 1e-300)
    monkeypatch.setattr(resident_loop, "gram_matrix", lambda problem: built.append(1) or real(problem))
    res = DuHL(tol=1e-9, max_epochs=3000, random_state=0).solve(_problem(case))
    assert built == [1]
    assert res.status == "converged" and res.gap <= 1e-9 * case.P0
    P, D = go.best_dual(model, case.X, case.y, res.a, case.params)
    assert P - case.oracle["P"] <= res.gap + 1e-12 * case.P0
    assert P - D <= res.gap * (1 + 1e-6) + 1e-12 * case.P0  # the certificate is no looser than exact


def test_anderson_from_g_pays_on_w8a_and_stays_certified(w8a, monkeypatch):
    """A w8a Lasso without an intercept, G built at the second certificate (its cost taken as
    nothing, its size as fitting: 3000 rows hold less data than G; spied): with Anderson from G
    extrapolated points are kept and 1e-8 is certified in fewer epochs than without; the returned
    gap is checked against scikit-learn's rescaled dual point, computed independently from the
    coefficients."""
    X, y = w8a
    alpha = 0.05 * float(np.abs(X.T @ (y - y.mean())).max()) / X.shape[0]
    problem = make_problem("lasso", X, y, alpha=alpha, fit_intercept=False)
    real = resident_loop.gram_matrix
    monkeypatch.setattr(resident_loop, "gram_cost", lambda problem: 1e-300)
    monkeypatch.setattr(resident_loop, "gram_fits", lambda problem: True)
    runs = {}
    for anderson in (False, True):
        built = []
        monkeypatch.setattr(resident_loop, "gram_matrix", lambda problem: built.append(1) or real(problem))
        solver = DuHL(tol=1e-8, max_epochs=2000, random_state=0, anderson=anderson)
        runs[anderson] = (solver.solve(problem), solver.anderson_state_.copy())
        assert built == [1]
    (res, state), (plain, _) = runs[True], runs[False]
    assert res.status == plain.status == "converged" and state[2] > 0
    assert res.epochs < plain.epochs
    P = go.primal("lasso", X, y, res.a, 0.0, dict(alpha=alpha))
    D = go.rescaled_lasso_dual(X, y, res.a, alpha, center=False)
    assert abs(res.primal - P) <= 1e-10 * problem.P0
    assert 0.0 <= P - D <= res.gap * (1 + 1e-6) + 1e-12 * problem.P0 and res.gap <= 1e-8 * problem.P0


def test_g_is_not_built_for_a_solve_of_one_epoch(monkeypatch):
    """Orthogonal features: coordinate descent is exact in one epoch, the rate predicts nothing left."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((200, 20)))
    y = Q @ rng.standard_normal(20) + 0.1 * rng.standard_normal(200)
    built = []
    monkeypatch.setattr(resident_loop, "gram_matrix", lambda problem: built.append(1))
    res = DuHL(tol=1e-9, random_state=0).solve(make_problem("lasso", Q * 14.0, y, alpha=0.01,
                                                            fit_intercept=False))
    assert res.status == "converged" and built == []


def test_gram_pays_is_the_predicted_work_against_the_cost():
    """Rounds left = log(tol / gap) over the rate per round since the last certificate."""
    last = (2.0, 1e-2)  # last certificate: round 2, gap 1e-2
    gap, rounds, tol = 1e-3, 4.0, 1e-7  # a tenth in 2 rounds: 8 rounds to 1e-7
    left = math.log(tol / gap) / (math.log(gap / 1e-2) / 2.0)
    assert left == pytest.approx(8.0)
    work = 1000.0
    assert gram_pays(left * work / GRAM_PAYS * 0.999, *last, rounds, gap, tol, work)
    assert not gram_pays(left * work / GRAM_PAYS * 1.001, *last, rounds, gap, tol, work)
    assert not gram_pays(0.0, *last, rounds, gap, tol, work)  # no cost: covariance updates do not apply
    assert not gram_pays(1.0, *last, rounds, 2e-2, tol, work)  # the gap rose: no rate
    assert not gram_pays(1.0, 0.0, np.inf, 0.0, gap, tol, work)  # the first certificate
