"""The all-resident loop's global gap pass proves gaps 0 without reading the data
(solvers.duhl.loops.resident.global_gaps): every gap it reports is the one a full pass gives,
and it reads fewer coordinates once the state settles."""

import numpy as np
import pytest

import glm_oracles as go
import solvers.duhl.loops.resident as resident_loop
from solvers.duhl import DuHL
from solvers.duhl.loops.driver import form_of
from solvers.glm.models import get_model, zero_interval
from solvers.glm.problems import make_problem
from solvers.kernels import cpu

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
PROVABLE = ["lasso", "enet", "hinge", "sqhinge"]


def _pass_state(problem):
    n = problem.n_coords
    a = np.zeros(n)
    z, off = -problem.c * problem.b, np.zeros(1)
    return a, z, off, resident_loop.start(problem, z, off)


def _epochs(problem, a, z, off, k, rng):
    A, n = problem.A, problem.n_coords
    for _ in range(k):
        order = rng.permutation(n)
        if problem.sparse:
            cpu.scd_epoch_sparse(A.indptr, A.indices, A.data, np.arange(n), order, a, z, off, problem.mu,
                                 problem.sqnorm, problem.c, problem.theta)
        else:
            cpu.scd_epoch_dense(A, np.arange(n), order, a, z, off, problem.mu, problem.sqnorm, problem.c,
                                problem.theta)


@SPARSE
@pytest.mark.parametrize("model", PROVABLE)
def test_proven_gaps_are_those_a_full_pass_computes(case_factory, model, sparse):
    case = case_factory(model, sparse, np.float64)
    problem = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    n = problem.n_coords
    A = problem.A
    D = (A.indptr, A.indices, A.data) if problem.sparse else (A,)
    a, z, off, (st, buf) = _pass_state(problem)
    gaps, s = buf.gaps, buf.s
    form, centred = form_of(problem), bool(np.any(problem.mu))
    rng = np.random.default_rng(0)
    read = []
    for k in (3, 1, 1, 5, 20, 50):  # large moves first (little provable), then small ones
        _epochs(problem, a, z, off, k, rng)
        read.append(resident_loop.global_gaps(D, a, z, off, form, centred, st, buf))
        full, full_s = problem.coordinate_gaps(a, z, off, with_s=True)
        proven = np.ones(n, dtype=bool)
        proven[buf.todo[: read[-1]]] = False
        # the coordinates read: their gap and s now; the proven ones: a gap of exactly 0,
        # the full pass's up to its rounding (the dense kernels' fused multiply-adds leave
        # ~1e-18 where the exact gap is 0), and an s inside the interval where the gap is 0
        np.testing.assert_array_equal(gaps[~proven], full[~proven])
        np.testing.assert_array_equal(s[~proven], full_s[~proven])
        assert np.all(gaps[proven] == 0.0)
        assert np.all(np.abs(full[proven]) <= 1e-15 * case.P0)
        for i in np.flatnonzero(proven):
            lo, hi = zero_interval(problem.theta, a[i])
            assert lo <= full_s[i] <= hi
        assert gaps.sum() == pytest.approx(full.sum(), rel=1e-13, abs=1e-15 * case.P0)
    assert read[0] == n
    assert read[-1] < n  # proofs do happen once the state settles


def test_zero_interval_is_the_compiled_twin_of_zero_gap():
    """Model.zero_gap (NumPy, for the gap memory) and Math.zero_interval (compiled scalar,
    for the all-resident pass) give the same intervals."""
    cases = {"lasso": dict(alpha=0.3), "elastic_net": dict(alpha=0.3, l1_ratio=0.5), "ridge": dict(alpha=1.0),
             "svm": dict(C=0.7, loss="hinge")}
    rng = np.random.default_rng(0)
    for name, params in cases.items():
        model = get_model(name)
        p = {**model.params, **params}
        theta = model.theta(p, 10.0)
        a = np.concatenate([[0.0, 0.7, -0.2, 0.35], rng.uniform(-1, 1, 5)])
        if model.zero_gap is None:
            lo, hi = np.full(a.shape, np.inf), np.full(a.shape, -np.inf)
        else:
            lo, hi = model.zero_gap(theta, a)
        got = np.array([zero_interval(theta, x) for x in a])
        empty = lo > hi
        assert np.array_equal(got[:, 0] > got[:, 1], empty), name
        np.testing.assert_array_equal(got[~empty, 0], lo[~empty])
        np.testing.assert_array_equal(got[~empty, 1], hi[~empty])


@pytest.mark.parametrize("model", ["lasso", "hinge"])
def test_all_resident_solve_reads_less_and_certifies_the_oracle_optimum(case_factory, model, monkeypatch):
    """End to end: the compiled loop's gap passes read fewer coordinates than passes x n,
    and its certified result is the oracle's optimum (P within the gap of it)."""
    case = case_factory(model, True, np.float64)
    problem = make_problem(go.PROBLEM_NAME[model], case.X, case.y, **case.params)
    solver = DuHL(tol=1e-9, max_epochs=3000, random_state=0)
    res = solver.solve(problem)
    passes, read = solver.global_passes_["gap_passes"], solver.global_passes_["coordinates_read"]
    assert res.status == "converged" and passes >= 3
    assert read < passes * problem.n_coords
    P, _ = go.best_dual(model, case.X, case.y, res.a, case.params)
    assert P - case.oracle["P"] <= res.gap + 1e-12 * case.P0
    assert res.gap <= 1e-9 * case.P0
