"""The compiled swap loop's Gram matrix (solvers.duhl.gram, GRAM): for the Lasso family
with few coordinates the stale gaps come from dots <A_i, z> kept up to date by G = A A^T, the data
read every ANCHOR_EVERY rows and for any row at or below the tolerance. Every row still certifies its
state (glm_oracles' P and D), the solution is scikit-learn's, the Gram's dots stay within rounding of
the data's (a wrong G is caught), and where it applies."""

import numpy as np
import pytest

import glm_oracles as go
import solvers.duhl.compiled_swaps as compiled
import solvers.duhl.gram as gram_module
import solvers.duhl.solver as duhl_module
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
FAMILY = pytest.mark.parametrize("model", ["lasso", "enet", "ridge"])


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


def _solve(problem, monkeypatch, gram=None, **kw):
    """DuHL in the compiled loop, G built after the first round; returns (result, the Gram's
    state after the last slice: see gram_module.G_*)."""
    monkeypatch.setattr(duhl_module, "routes", lambda *args: True)
    monkeypatch.setattr(gram_module, "GRAM_AFTER", 0.0)
    if gram is not None:
        monkeypatch.setattr(gram_module, "gram_matrix", gram)
    states = []
    real = compiled.run_swap_slice

    def grab(*args):
        code = real(*args)
        states.append(args[-1][3].copy())  # gram = (G, dots, a_ref, gstate)
        return code

    monkeypatch.setattr(compiled, "run_swap_slice", grab)
    res = DuHL(**kw).solve(problem)
    return res, states[-1]


@SPARSE
@FAMILY
def test_every_row_certifies_its_state(case_factory, model, sparse, monkeypatch):
    """With the Gram's dots most rows (G_ROWS) read no stale data; every row's gap is still P - D of
    the state it certifies with P and D written out in glm_oracles from that state's coefficients
    alone (D: the best dual value of the run over rows), as in test_compiled_swaps, and its dual
    value within 1e-11 of the oracle's: a Gram row's dual, carried on to the later rows, is as good
    as a data pass's. It bounds P(a) - P*. The last row (a data pass) is the solve's own gap
    re-evaluated from a alone."""
    monkeypatch.setattr(gram_module, "ANCHOR_EVERY", 5)
    case = case_factory(model, sparse, np.float64)
    res, gstate = _solve(_problem(case), monkeypatch, memory_budget=0.3, tol=1e-9, max_epochs=300, random_state=1,
                         keep_iterates=5000)
    assert res.status == "converged" and (res.trace.certified == 1).all() and len(res.iterates) == len(res.trace)
    assert gstate[gram_module.G_ON] == 1 and gstate[gram_module.G_ROWS] >= 5 and gstate[gram_module.G_ANCHORS] >= 2
    best_dual = -np.inf
    for a, gap, primal, dual in zip(res.iterates, res.trace.gap, res.trace.primal, res.trace.dual):
        P, D = go.best_dual(model, case.X, case.y, a, case.params)
        assert primal == pytest.approx(P, rel=1e-9, abs=1e-12 * case.P0)
        best_dual = max(best_dual, D)
        assert dual == pytest.approx(best_dual, rel=1e-11, abs=1e-12 * case.P0)
        assert gap == pytest.approx(P - best_dual, rel=1e-7, abs=1e-11 * case.P0)
        assert gap >= P - case.oracle["P"] - 1e-11 * case.P0
    assert res.trace.gap.iloc[-1] == pytest.approx(res.gap, rel=1e-7, abs=1e-12 * case.P0)
    assert res.gap <= 1e-9 * case.P0


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "enet"])
def test_solution_matches_scikit_learn(case_factory, model, sparse, monkeypatch):
    """At a tight tolerance the solution is scikit-learn's coordinate descent's (tol 1e-13):
    coefficients within 1e-4 of the largest, objective within 1e-9 P0."""
    case = case_factory(model, sparse, np.float64)
    res, gstate = _solve(_problem(case), monkeypatch, memory_budget=0.25, tol=1e-12, max_epochs=20000,
                         random_state=0)
    assert res.status == "converged" and gstate[gram_module.G_ROWS] > 0
    scale = np.abs(case.oracle["coef"]).max()
    np.testing.assert_allclose(res.a, case.oracle["coef"], rtol=0, atol=1e-4 * scale)
    P, _ = go.gap_from_coordinates(model, case.X, case.y, res.a, case.params)
    assert P - case.oracle["P"] <= 1e-9 * case.P0 + 1e-12


@SPARSE
@FAMILY
def test_the_grams_dots_stay_the_datas(case_factory, model, sparse, monkeypatch):
    """Every anchor compares the Gram-updated dots with the data's: within 1e-12 of the largest
    (G_DRIFT) over 4 rows of updates; a Gram off by 1e-6 of itself drifts far more, so the
    comparison would catch a wrong update."""
    monkeypatch.setattr(gram_module, "ANCHOR_EVERY", 4)
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.3, tol=1e-10, max_epochs=300, random_state=2)
    _, gstate = _solve(problem, monkeypatch, **kw)
    assert gstate[gram_module.G_ANCHORS] >= 3 and 0 <= gstate[gram_module.G_DRIFT] <= 1e-12
    real = gram_module.gram_matrix
    _, wrong = _solve(problem, monkeypatch, gram=lambda p: real(p) * (1 + 1e-6), **kw)
    assert wrong[gram_module.G_DRIFT] > 1e-9


def test_where_it_applies(case_factory, monkeypatch):
    """The Lasso family (coordinates = features) in RAM on the CPU with refresh "auto", G's
    bytes at most the data's; never for the classifiers (solved in the dual) or refresh "all"
    (every stale gap from the data: the Python loop's twin) unless GRAM is True; GRAM False: never."""
    lasso = _problem(case_factory("lasso", True, np.float64))
    hinge = _problem(case_factory("hinge", True, np.float64))
    assert gram_module.uses_gram(DuHL(memory_budget=0.25), lasso)
    assert not gram_module.uses_gram(DuHL(memory_budget=0.25), hinge)
    assert not gram_module.uses_gram(DuHL(memory_budget=0.25, refresh="all"), lasso)
    monkeypatch.setattr(gram_module, "GRAM_BYTES_SHARE", 8 * lasso.n_coords**2 / lasso.coord_bytes.sum() / 2)
    assert not gram_module.uses_gram(DuHL(memory_budget=0.25), lasso)  # G twice the bytes allowed
    monkeypatch.setattr(gram_module, "GRAM_BYTES_SHARE", 1.0)
    monkeypatch.setattr(gram_module, "GRAM", True)
    assert gram_module.uses_gram(DuHL(memory_budget=0.25, refresh="all"), lasso)
    monkeypatch.setattr(gram_module, "GRAM", False)
    assert not gram_module.uses_gram(DuHL(memory_budget=0.25), lasso)


@SPARSE
def test_gram_matrix_is_a_at(case_factory, sparse):
    """The Gram matrix of the coordinates, A A^T, as float64, symmetric."""
    problem = _problem(case_factory("lasso", sparse, np.float32))
    A = go.dense64(problem.A) if sparse else np.asarray(problem.A, np.float64)
    G = gram_module.gram_matrix(problem)
    assert G.dtype == np.float64 and G.shape == (problem.n_coords,) * 2
    np.testing.assert_allclose(G, A @ A.T, rtol=1e-12, atol=1e-12 * np.abs(G).max())
    np.testing.assert_array_equal(G, G.T)
