"""DuHL's compiled round loop with part of the data resident (solvers.duhl.loops.swap): the
Python loop's iterates, bytes and swaps with refresh="all", the oracle's solution, valid
certificates, and when DuHL routes there."""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl import DuHL
from solvers.duhl.loops.driver import pairwise_sum
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
MODELS = pytest.mark.parametrize("model", ["lasso", "ridge", "hinge", "logistic"])
EXACT = ["round", "epoch", "primal", "dual", "gap", "rel_gap", "certified", "bytes_h2d", "swaps", "n_resident",
         "prefetch_hits", "bytes_prefetched"]


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


def _solve(problem, loop, **kw):
    """DuHL with the compiled loop (loop=True) or the Python one (False); checks which loop ran."""
    solver = DuHL(loop="compiled" if loop else "python", **kw)
    res = solver.solve(problem)
    assert solver.loop_ == ("compiled" if loop else "python")
    return res


@pytest.mark.parametrize("selection", ["gap", "sequential", "random"])
@SPARSE
@MODELS
def test_same_iterates_bytes_and_swaps_as_the_python_loop(case_factory, model, sparse, selection):
    """With refresh="all" both loops choose the same blocks from the same gaps, draw the
    same epoch orders from the same stream and run the same kernels: every trace column
    but the clock, every kept iterate and the solution are equal bit for bit (the gap sum
    is summed as np.sum sums). The one difference by design: a certified start state
    ends the compiled loop before the round's epochs, which the Python loop runs and
    discards, so only the updates counted differ."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.3, selection=selection, refresh="all", tol=1e-8, max_epochs=300, random_state=4,
              keep_iterates=5000)
    py = _solve(problem, False, **kw)
    cc = _solve(problem, True, **kw)
    assert py.status == cc.status == "converged"
    assert len(py.trace) == len(cc.trace) >= 5
    pd_equal = py.trace[EXACT].reset_index(drop=True).equals(cc.trace[EXACT].reset_index(drop=True))
    assert pd_equal, (py.trace[EXACT] - cc.trace[EXACT]).abs().max()
    assert list(py.trace.columns) == list(cc.trace.columns)
    np.testing.assert_array_equal(py.iterates, cc.iterates)
    np.testing.assert_array_equal(py.a, cc.a)
    assert (py.n_rounds, py.bytes_h2d, py.prefetch_hits, py.bytes_prefetched) == \
        (cc.n_rounds, cc.bytes_h2d, cc.prefetch_hits, cc.bytes_prefetched)
    assert py.gap == cc.gap and py.primal == cc.primal
    assert cc.epochs <= py.epochs <= cc.epochs + 0.3 * 16 + 1e-9   # one discarded round at most
    assert cc.bytes_h2d > 2 * 0.3 * int(problem.coord_bytes.sum())  # blocks were swapped: twice the first fill
    assert cc.trace.time_s.is_monotonic_increasing


@SPARSE
@MODELS
def test_refresh_auto_is_the_python_loops_bit_for_bit(case_factory, model, sparse):
    """refresh "auto" compiled is the Python loop's rule (solvers.duhl.gaps.memory's plan and certifier):
    the same planned refreshes from the same cursor, the same certifier's schedule, the same proofs
    (gap_proofs=True; no Gram matrix), so every trace column but the clock, every
    kept iterate and the solution are equal bit for bit, estimate rows (certified 0) included."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.25, refresh="auto", gap_proofs=True, gram=False, tol=1e-8, max_epochs=300, random_state=3, keep_iterates=5000)
    py = _solve(problem, False, **kw)
    cc = _solve(problem, True, **kw)
    assert py.status == cc.status == "converged"
    assert len(py.trace) == len(cc.trace) >= 5 and (cc.trace.certified == 0).any()  # estimates were made
    assert py.trace[EXACT].reset_index(drop=True).equals(cc.trace[EXACT].reset_index(drop=True))
    np.testing.assert_array_equal(py.iterates, cc.iterates)
    np.testing.assert_array_equal(py.a, cc.a)
    assert py.gap == cc.gap and py.bytes_h2d == cc.bytes_h2d


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "hinge"])
def test_stopping_at_max_epochs_matches_the_python_loop(case_factory, model, sparse):
    """Stopped by the epoch cap, both loops certify the end state with a full pass: the
    same rows, bit for bit, the last one certified."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.25, refresh="all", tol=0.0, max_epochs=3, random_state=2)
    py = _solve(problem, False, **kw)
    cc = _solve(problem, True, **kw)
    assert py.status == cc.status == "max_epochs"
    assert py.trace[EXACT].equals(cc.trace[EXACT])
    assert cc.trace.certified.iloc[-1] == 1 and 3 <= cc.epochs < 3 + 0.25 * 16
    np.testing.assert_array_equal(py.a, cc.a)
    res = _solve(problem, True, memory_budget=0.25, tol=0.0, max_epochs=1e9, max_time=0.2,
                 random_state=0)
    assert res.trace.certified.iloc[-1] == 1 and res.time_s < 5.0
    # tol 0 stops at max_time, unless a gap of exactly 0 is reached first (a hinge dual can)
    reached = res.trace.gap.iloc[-1]
    assert (res.status == "max_time" and res.time_s >= 0.2) or (res.status == "converged" and reached == 0.0)


@SPARSE
@MODELS
def test_solution_matches_scikit_learn(case_factory, model, sparse):
    """The compiled loop's solution at a tight tolerance is scikit-learn's: the regressions'
    coefficients (coordinate descent at tol 1e-13, closed form for ridge), the classifiers'
    w (liblinear's dual solvers), whose primal is strongly convex, so w is unique."""
    case = case_factory(model, sparse, np.float64)
    res = _solve(_problem(case), True, memory_budget=0.25, tol=1e-12, max_epochs=20000,
                 random_state=0)
    assert res.status == "converged"
    if model in go.REGRESSION:
        coef = res.a
    else:
        w = go.classification_w(case.X, case.y, res.a)
        coef = w[:-1]
        np.testing.assert_allclose(w[-1], case.oracle["intercept"], atol=1e-4 * (1 + abs(case.oracle["intercept"])))
    scale = np.abs(case.oracle["coef"]).max()
    np.testing.assert_allclose(coef, case.oracle["coef"], rtol=0, atol=1e-4 * scale)
    P, _ = go.gap_from_coordinates(model, case.X, case.y, res.a, case.params)
    assert P - case.oracle["P"] <= 1e-9 * case.P0 + 1e-12


@pytest.mark.parametrize("refresh", ["all", "auto"])
@pytest.mark.parametrize("selection", ["gap", "random"])
@SPARSE
@MODELS
def test_every_certified_gap_is_valid(case_factory, model, sparse, selection, refresh):
    """Every certified row's gap is P - D of the state it certifies with P and D written out in
    glm_oracles from that state's coefficients alone (D: the best dual value of the run over rows
    for the regressions, the state's own for the classifiers, solved in the dual); it bounds the
    true suboptimality, P(a) - P* >= 0 with P* the oracle's. With refresh "all" every row is
    certified; "auto"'s others are the gap memory's estimate."""
    case = case_factory(model, sparse, np.float64)
    res = _solve(_problem(case), True, memory_budget=0.3, selection=selection, tol=1e-9,
                 max_epochs=300, random_state=1, keep_iterates=5000, refresh=refresh,
                 local_epochs=1)  # one epoch a round: rows enough to check on every case
    assert len(res.iterates) == len(res.trace) >= 5 and res.trace.certified.iloc[-1] == 1
    assert refresh == "auto" or (res.trace.certified == 1).all()
    best_dual = -np.inf
    for a, gap, primal, certified in zip(res.iterates, res.trace.gap, res.trace.primal, res.trace.certified):
        if not certified:
            continue
        P, D = go.best_dual(model, case.X, case.y, a, case.params)
        assert primal == pytest.approx(P, rel=1e-9, abs=1e-12 * case.P0)
        best_dual = max(best_dual, D)
        expected = P - best_dual if model in go.REGRESSION else P - D
        assert gap == pytest.approx(expected, rel=1e-7, abs=1e-11 * case.P0)
        assert gap >= P - case.oracle["P"] - 1e-11 * case.P0
    assert res.gap <= 1e-9 * case.P0


def test_routes(case_factory):
    from solvers.duhl.loops.swap import routes

    """The compiled loop runs for the data in RAM on the CPU, without staging memory, with the
    gap, sequential or random policy, and refresh "all" or "auto", at any memory_budget; the
    Python loop everywhere else."""
    problem = _problem(case_factory("lasso", True, np.float64))
    total = int(problem.coord_bytes.sum())

    def routed(share=0.25, staging=0, **kw):
        rset = type("R", (), {"staging_bytes": staging, "capacity_bytes": int(share * total)})()
        return routes(DuHL(memory_budget=share, **kw), problem, rset)

    assert routed() and routed(refresh="all") and routed(selection="sequential") and routed(selection="random")
    assert routed(share=0.05) and routed(share=0.9) and routed(local_epochs="auto")
    assert not routed(selection="importance") and not routed(refresh=1.0) and not routed(refresh=0)
    assert not routed(staging=8) and not routed(device="cuda_sim")


def test_pairwise_sum_is_numpys():
    """The certificate's gap sum is np.sum's, bit for bit (NumPy sums pairwise)."""
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 8193, 100_003):
        x = rng.standard_normal(n) * np.exp(5 * rng.standard_normal(n))
        assert pairwise_sum(x) == float(x.sum()), n


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "hinge"])
def test_proofs_keep_every_certified_gap_valid(case_factory, model, sparse):
    """With refresh "auto" the compiled loop reads no data for the gaps the gap memory proves 0
    (a Lasso zero with |s_i| inside alpha, an SVM sample outside the margin, by how far u can
    have moved: solvers.duhl.gaps.memory); every certified row is still valid, its gap P - D of its
    own state written out in glm_oracles (the others are the memory's estimate), and the proofs did
    cover coordinates."""
    case = case_factory(model, sparse, np.float64)
    # proofs however small the data; the Lasso's stale gaps from the data (a Gram matrix stops the proofs)
    res = _solve(_problem(case), True, memory_budget=0.3, tol=1e-9, max_epochs=300, random_state=1,
                 keep_iterates=5000, gap_proofs=True, gram=False)
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1 and len(res.trace) >= 5
    best_dual = -np.inf
    for a, gap, primal, certified in zip(res.iterates, res.trace.gap, res.trace.primal, res.trace.certified):
        if not certified:  # the memory's estimate
            continue
        P, D = go.best_dual(model, case.X, case.y, a, case.params)
        assert primal == pytest.approx(P, rel=1e-9, abs=1e-12 * case.P0)
        best_dual = max(best_dual, D)
        expected = P - best_dual if model in go.REGRESSION else P - D
        assert gap == pytest.approx(expected, rel=1e-7, abs=1e-11 * case.P0)
        assert gap >= P - case.oracle["P"] - 1e-11 * case.P0
