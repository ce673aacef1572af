"""The compiled swap loop's Gram matrix (solvers.duhl.accel.gram, DuHL's ``gram``): for the Lasso family
with few coordinates the stale gaps come from dots <A_i, z> kept up to date by G = A A^T, the data
read every ANCHOR_EVERY rows and for any row at or below the tolerance. Every row still certifies its
state (glm_oracles' P and D), the solution is scikit-learn's, the Gram's dots stay within rounding of
the data's (a wrong G is caught), and where it applies."""

import numpy as np
import pytest

import glm_oracles as go
import solvers.duhl.accel.gram as gram_module
import solvers.duhl.loops.swap as swap_loop
from solvers.duhl import DuHL
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
FAMILY = pytest.mark.parametrize("model", ["lasso", "enet", "ridge"])


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


def _solve(problem, monkeypatch, gram=None, **kw):
    """DuHL in the compiled loop, G built before the first round; returns (result, the Gram's
    record: DuHL.gram_)."""
    monkeypatch.setattr(gram_module, "GRAM_AFTER", 0.0)
    if gram is not None:
        monkeypatch.setattr(swap_loop, "gram_matrix", gram)
    solver = DuHL(loop="compiled", **kw)
    res = solver.solve(problem)
    return res, solver.gram_


@SPARSE
@FAMILY
@pytest.mark.parametrize("rows_every", [1, 8])
def test_every_row_certifies_its_state(case_factory, model, sparse, rows_every, monkeypatch):
    """With the Gram's dots most rows (gram_["rows_from_gram"]) read no stale data; every row's gap is still P - D of
    the state it certifies with P and D written out in glm_oracles from that state's coefficients
    alone (D: the best dual value of the run over rows), as in test_swap_loop, and its dual
    value within 1e-11 of the oracle's: a Gram row's dual, carried on to the later rows, is as good
    as a data pass's. It bounds P(a) - P*. The last row (a data pass) is the solve's own gap
    re-evaluated from a alone. With a row at most every 8 rounds (ROWS_EVERY) some rounds have none,
    and the rows that are there certify as well."""
    monkeypatch.setattr(gram_module, "ANCHOR_EVERY", 5)
    monkeypatch.setattr(gram_module, "ROWS_EVERY", rows_every)
    case = case_factory(model, sparse, np.float64)
    res, gstate = _solve(_problem(case), monkeypatch, memory_budget=0.3, tol=1e-9, max_epochs=300, random_state=1,
                         keep_iterates=5000)
    assert res.status == "converged" and (res.trace.certified == 1).all() and len(res.iterates) == len(res.trace)
    assert gstate["built"] and gstate["anchors"] >= 2
    if rows_every == 1:  # a row every round (row 0: the start; the last: the end of the last round, before a selection)
        assert gstate["rows_from_gram"] >= 5 and len(res.trace) == res.n_rounds + 1
    else:
        assert len(res.trace) < res.n_rounds and np.diff(res.trace["round"]).max() <= rows_every
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
    assert res.status == "converged" and gstate["rows_from_gram"] > 0
    scale = np.abs(case.oracle["coef"]).max()
    np.testing.assert_allclose(res.a, case.oracle["coef"], rtol=0, atol=1e-4 * scale)
    P, _ = go.gap_from_coordinates(model, case.X, case.y, res.a, case.params)
    assert P - case.oracle["P"] <= 1e-9 * case.P0 + 1e-12


@SPARSE
@FAMILY
def test_the_grams_dots_stay_the_datas(case_factory, model, sparse, monkeypatch):
    """Every anchor compares the Gram-updated dots with the data's: within 1e-12 of the largest
    (gram_["drift"]) over 3 rows of updates; a Gram off by 1e-6 of itself drifts far more, so the
    comparison would catch a wrong update."""
    monkeypatch.setattr(gram_module, "ANCHOR_EVERY", 3)
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.3, tol=1e-10, max_epochs=300, random_state=2, local_epochs=1)  # (rounds enough)
    _, gstate = _solve(problem, monkeypatch, **kw)
    assert gstate["anchors"] >= 3 and 0 <= gstate["drift"] <= 1e-12
    real = gram_module.gram_matrix
    _, wrong = _solve(problem, monkeypatch, gram=lambda p: real(p) * (1 + 1e-6), **kw)
    assert wrong["drift"] > 1e-9


def test_where_it_applies(case_factory, monkeypatch):
    """The Lasso family (coordinates = features) in RAM on the CPU with refresh "auto", G's
    bytes at most the data's; never for the classifiers (solved in the dual) or refresh "all"
    (every stale gap from the data: the Python loop's twin) unless gram is True; gram False: never."""
    lasso = _problem(case_factory("lasso", True, np.float64))
    hinge = _problem(case_factory("hinge", True, np.float64))
    uses_gram = swap_loop.uses_gram
    assert uses_gram(DuHL(memory_budget=0.25), lasso)
    assert not uses_gram(DuHL(memory_budget=0.25), hinge)
    assert not uses_gram(DuHL(memory_budget=0.25, refresh="all"), lasso)
    monkeypatch.setattr(gram_module, "GRAM_BYTES_SHARE", 8 * lasso.n_coords**2 / lasso.coord_bytes.sum() / 2)
    assert not uses_gram(DuHL(memory_budget=0.25), lasso)  # G twice the bytes allowed
    monkeypatch.setattr(gram_module, "GRAM_BYTES_SHARE", 1.0)
    assert uses_gram(DuHL(memory_budget=0.25, refresh="all", gram=True), lasso)
    assert not uses_gram(DuHL(memory_budget=0.25, gram=False), lasso)


@SPARSE
def test_gram_matrix_is_a_at(case_factory, sparse):
    """The Gram matrix of the coordinates, A A^T, as float64, symmetric."""
    problem = _problem(case_factory("lasso", sparse, np.float32))
    A = go.dense64(problem.A) if sparse else np.asarray(problem.A, np.float64)
    G = gram_module.gram_matrix(problem)
    assert G.dtype == np.float64 and G.shape == (problem.n_coords,) * 2
    np.testing.assert_allclose(G, A @ A.T, rtol=1e-12, atol=1e-12 * np.abs(G).max())
    np.testing.assert_array_equal(G, G.T)


@SPARSE
@FAMILY
def test_the_blocks_epochs_from_g_take_the_datas_steps(case_factory, model, sparse, monkeypatch):
    """With G on, the block's epochs run from G (gram_epoch: no read of the block) and z moves
    once a round: the same coordinate steps as the data's epochs of a run whose epochs read the block
    (GRAM_EPOCHS 0; 1 here: as many epochs). The blocks come in storage order (selection
    "sequential"), so both runs hold the same blocks whatever the gaps' rounding (with the gap
    policy a gap at rounding's level, 0 from one run and 1e-18 from the other, can choose another
    block, on some CPUs' vector widths and not others'): the same iterates row by row within
    rounding, and both certify."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.3, selection="sequential", tol=1e-9, max_epochs=300, random_state=3,
              keep_iterates=5000, shrinking=False)
    monkeypatch.setattr(gram_module, "GRAM_EPOCHS", 1)  # as many epochs as from the data
    monkeypatch.setattr(gram_module, "ROWS_EVERY", 1)  # a row every round: compared row by row
    with_g, gstate = _solve(problem, monkeypatch, **kw)
    assert gstate["built"] and gstate["rows_from_gram"] >= 5
    monkeypatch.setattr(gram_module, "GRAM_EPOCHS", 0)
    without, off = _solve(problem, monkeypatch, **kw)
    assert off["built"]
    rows = min(len(with_g.trace), len(without.trace))
    assert rows >= 5 and abs(len(with_g.trace) - len(without.trace)) <= 1  # (the stopping row may differ by one)
    np.testing.assert_array_equal(with_g.trace.swaps[:rows], without.trace.swaps[:rows])
    scale = np.abs(without.iterates).max()
    np.testing.assert_allclose(with_g.iterates[:rows], without.iterates[:rows], rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(with_g.trace.primal[:rows], without.trace.primal[:rows], rtol=1e-12)
    assert with_g.status == without.status == "converged"
    assert with_g.gap <= 1e-9 * problem.P0 and without.gap <= 1e-9 * problem.P0


@SPARSE
@FAMILY
def test_an_epoch_from_g_is_the_kernels_epoch(case_factory, model, sparse):
    """One round's epochs on a block from G and the dots (gram_epoch, then gram_block_end: z
    moved once, the block's gaps from the dots) against the data kernels' epoch and gap pass
    (solvers.kernels.cpu) from the same state in the same order: the same coefficients, z, intercept
    shift, gaps and s within rounding (the cases are centred: off and mu move too)."""
    from solvers.kernels import cpu

    problem = _problem(case_factory(model, sparse, np.float64))
    rng = np.random.default_rng(5)
    a0 = rng.normal(size=problem.n_coords) * (rng.random(problem.n_coords) < 0.5)
    z0, off0 = problem.state_from(a0)
    block = np.array([3, 7, 1, 12, 0])
    positions = np.arange(block.size)
    order = np.array([2, 0, 4, 3, 1, 0, 2])  # positions; a second visit of some
    A = problem.A
    if sparse:
        rows = A[block].tocsr()
        B = (rows.indptr.astype(np.int64), rows.indices, rows.data)
    else:
        B = (np.ascontiguousarray(A[block]),)
    assert np.any(problem.mu != 0)
    G = gram_module.gram_matrix(problem)
    a, z, off = a0.copy(), z0.copy(), off0.copy()
    t = np.asarray(A @ z0, dtype=np.float64).ravel()  # <A_i, z>
    gaps, s = np.zeros(problem.n_coords), np.zeros(problem.n_coords)
    gram_module.gram_epoch(G, block, order, block, a, off, problem.mu, problem.sqnorm, problem.c,
                            problem.theta, t, z.shape[0])
    gram_module.gram_block_end(B, positions, block, a, a0, z, off, problem.mu, problem.c, problem.theta, t,
                                gaps, s)
    a2, z2, off2 = a0.copy(), z0.copy(), off0.copy()
    if sparse:
        cpu.scd_epoch_sparse(*B, block, order, a2, z2, off2, problem.mu, problem.sqnorm, problem.c, problem.theta)
        g2, s2 = np.zeros(block.size), np.zeros(block.size)
        cpu.gaps_sparse(*B, positions, block, a2, z2, off2, problem.mu, problem.c, problem.theta, g2, s2)
    else:
        cpu.scd_epoch_dense(B[0], block, order, a2, z2, off2, problem.mu, problem.sqnorm, problem.c, problem.theta)
        g2, s2 = np.zeros(block.size), np.zeros(block.size)
        cpu.gaps_dense(B[0], positions, block, a2, z2, off2, problem.mu, problem.c, problem.theta, g2, s2)
    assert not np.array_equal(a2, a0)  # the epoch moved something
    np.testing.assert_allclose(a, a2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(z, z2, rtol=1e-12, atol=1e-12 * np.abs(z2).max())
    np.testing.assert_allclose(off, off2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s[block], s2, rtol=1e-10, atol=1e-11 * np.abs(s2).max())
    np.testing.assert_allclose(gaps[block], g2, rtol=1e-8, atol=1e-10 * max(1.0, np.abs(g2).max()))
