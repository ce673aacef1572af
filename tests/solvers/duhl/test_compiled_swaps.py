"""DuHL's compiled round loop with part of the data resident (solvers.duhl.compiled_swaps):
the Python loop's iterates, bytes and swaps with refresh="all", the oracle's solution, valid
certificates, and when DuHL routes there."""

import time

import numpy as np
import pytest

import glm_oracles as go
import solvers.duhl.compiled_swaps as compiled
import solvers.duhl.gram as gram_module
from solvers.duhl.compiled_parts import _pairwise, cycles_per_second
import solvers.duhl.solver as duhl_module
from solvers.duhl.solver import DuHL
from solvers.glm.problems import make_problem

SPARSE = pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
MODELS = pytest.mark.parametrize("model", ["lasso", "ridge", "hinge", "logistic"])
EXACT = ["round", "epoch", "primal", "dual", "gap", "rel_gap", "certified", "bytes_h2d", "swaps", "n_resident",
         "prefetch_hits", "bytes_prefetched"]


def _problem(case):
    return make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)


def _solve(problem, loop, monkeypatch, **kw):
    """DuHL with the compiled loop (loop=True) or the Python one (False); counts the
    compiled loop's calls, so a test knows which loop ran."""
    calls = []
    real = compiled.run_swap_slice

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(compiled, "run_swap_slice", counted)
    monkeypatch.setattr(duhl_module, "routes", lambda *args: loop)
    res = DuHL(**kw).solve(problem)
    assert bool(calls) == loop
    return res


@pytest.mark.parametrize("selection", ["gap", "sequential", "random"])
@SPARSE
@MODELS
def test_same_iterates_bytes_and_swaps_as_the_python_loop(case_factory, model, sparse, selection, monkeypatch):
    """With refresh="all" both loops choose the same blocks from the same gaps, draw the
    same epoch orders from the same stream and run the same kernels: every trace column
    but the clock, every kept iterate and the solution are equal bit for bit (the gap sum
    is summed as np.sum sums). The one difference by design: a certified start state
    ends the compiled loop before the round's epochs, which the Python loop runs and
    discards, so only the updates counted differ."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.3, selection=selection, refresh="all", tol=1e-8, max_epochs=300, random_state=4,
              keep_iterates=5000)
    py = _solve(problem, False, monkeypatch, **kw)
    cc = _solve(problem, True, monkeypatch, **kw)
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
    assert cc.bytes_h2d > int(problem.coord_bytes.sum())            # blocks were swapped
    assert cc.trace.time_s.is_monotonic_increasing


@SPARSE
@MODELS
def test_refresh_auto_is_the_python_loops_bit_for_bit(case_factory, model, sparse, monkeypatch):
    """refresh "auto" compiled (solvers.duhl.stale_plan) is the Python loop's rule: the same planned
    refreshes from the same cursor, the same certifier's schedule, the same proofs (both prove when
    PROOF_SHARE lets the compiled loop; no Gram matrix), so every trace column but the clock, every
    kept iterate and the solution are equal bit for bit, estimate rows (certified 0) included."""
    monkeypatch.setattr(compiled, "PROOF_SHARE", np.inf)
    monkeypatch.setattr(gram_module, "GRAM", False)
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.25, refresh="auto", tol=1e-8, max_epochs=300, random_state=3, keep_iterates=5000)
    py = _solve(problem, False, monkeypatch, **kw)
    cc = _solve(problem, True, monkeypatch, **kw)
    assert py.status == cc.status == "converged"
    assert len(py.trace) == len(cc.trace) >= 5 and (cc.trace.certified == 0).any()  # estimates were made
    assert py.trace[EXACT].reset_index(drop=True).equals(cc.trace[EXACT].reset_index(drop=True))
    np.testing.assert_array_equal(py.iterates, cc.iterates)
    np.testing.assert_array_equal(py.a, cc.a)
    assert py.gap == cc.gap and py.bytes_h2d == cc.bytes_h2d


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "hinge"])
def test_stopping_at_max_epochs_matches_the_python_loop(case_factory, model, sparse, monkeypatch):
    """Stopped by the epoch cap, both loops certify the end state with a full pass: the
    same rows, bit for bit, the last one certified."""
    problem = _problem(case_factory(model, sparse, np.float64))
    kw = dict(memory_budget=0.25, refresh="all", tol=0.0, max_epochs=3, random_state=2)
    py = _solve(problem, False, monkeypatch, **kw)
    cc = _solve(problem, True, monkeypatch, **kw)
    assert py.status == cc.status == "max_epochs"
    assert py.trace[EXACT].equals(cc.trace[EXACT])
    assert cc.trace.certified.iloc[-1] == 1 and 3 <= cc.epochs < 3 + 0.25 * 16
    np.testing.assert_array_equal(py.a, cc.a)
    res = _solve(problem, True, monkeypatch, memory_budget=0.25, tol=0.0, max_epochs=1e9, max_time=0.2,
                 random_state=0)
    assert res.trace.certified.iloc[-1] == 1 and res.time_s < 5.0
    # tol 0 stops at max_time, unless a gap of exactly 0 is reached first (a hinge dual can)
    reached = res.trace.gap.iloc[-1]
    assert (res.status == "max_time" and res.time_s >= 0.2) or (res.status == "converged" and reached == 0.0)


@SPARSE
@MODELS
def test_solution_matches_scikit_learn(case_factory, model, sparse, monkeypatch):
    """The compiled loop's solution at a tight tolerance is scikit-learn's: the regressions'
    coefficients (coordinate descent at tol 1e-13, closed form for ridge), the classifiers'
    w (liblinear's dual solvers), whose primal is strongly convex, so w is unique."""
    case = case_factory(model, sparse, np.float64)
    res = _solve(_problem(case), True, monkeypatch, memory_budget=0.25, tol=1e-12, max_epochs=20000,
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
def test_every_certified_gap_is_valid(case_factory, model, sparse, selection, refresh, monkeypatch):
    """Every certified row's gap is P - D of the state it certifies with P and D written out in
    glm_oracles from that state's coefficients alone (D: the best dual value of the run over rows
    for the regressions, the state's own for the classifiers, solved in the dual); it bounds the
    true suboptimality, P(a) - P* >= 0 with P* the oracle's. With refresh "all" every row is
    certified; "auto"'s others are the gap memory's estimate."""
    case = case_factory(model, sparse, np.float64)
    res = _solve(_problem(case), True, monkeypatch, memory_budget=0.3, selection=selection, tol=1e-9,
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
    """The compiled loop runs for the data in RAM on the CPU, without staging memory, with the
    gap, sequential or random policy, and refresh "all" or "auto", at any memory_budget; the
    Python loop everywhere else."""
    problem = _problem(case_factory("lasso", True, np.float64))
    total = int(problem.coord_bytes.sum())

    def routed(share=0.25, staging=0, **kw):
        rset = type("R", (), {"staging_bytes": staging, "capacity_bytes": int(share * total)})()
        return compiled.routes(DuHL(memory_budget=share, **kw), problem, rset)

    assert routed() and routed(refresh="all") and routed(selection="sequential") and routed(selection="random")
    assert routed(share=0.05) and routed(share=0.9) and routed(local_epochs="auto")
    assert not routed(selection="importance") and not routed(refresh=1.0) and not routed(refresh=0)
    assert not routed(staging=8) and not routed(device="cuda_sim")


def test_pairwise_sum_is_numpys():
    """The certificate's gap sum is np.sum's, bit for bit (NumPy sums pairwise)."""
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 8193, 100_003):
        x = rng.standard_normal(n) * np.exp(5 * rng.standard_normal(n))
        assert _pairwise(x) == float(x.sum()), n


@pytest.mark.parametrize("n", [1, 10, 40, 300, 5000, 20000])
def test_gap_selection_is_the_lexsort_prefix(n):
    """Both loops' gap policy (radix selection on the gaps' bits, no sort) picks the set of
    coordinates a full np.lexsort((~resident, -gaps)) puts in the longest prefix that fits:
    ties (many equal gaps, zeros, -0.0), NaN and -inf gaps, distinct gaps whose boundary
    needs several levels of bits (20000: the first level counted in the keys' pass), sizes that vary,
    coordinates of no bytes."""
    from solvers.duhl.selection import gap_block

    for trial in range(40):
        rng = np.random.default_rng(trial)
        gaps = (np.round(rng.random(n), 1) if trial % 2 else rng.standard_normal(n) ** 2
                if trial % 5 else rng.lognormal(-8, 3, n))
        gaps[rng.random(n) < 0.3] = 0.0
        gaps[rng.random(n) < 0.05] = -0.0
        if trial % 4 == 3:
            gaps[rng.random(n) < 0.05] = np.nan
            gaps[rng.random(n) < 0.02] = -np.inf
        resident = rng.random(n) < 0.3
        coord_bytes = rng.integers(0 if trial % 6 else 1, 100, n) if trial % 3 else np.full(n, 8)
        budget = int(coord_bytes.sum() * rng.uniform(0.0, 1.05))
        order = np.lexsort((~resident, -gaps))
        expected = np.sort(order[: int(np.searchsorted(np.cumsum(coord_bytes[order]), budget, side="right"))])
        np.testing.assert_array_equal(gap_block(gaps, resident, coord_bytes, budget), expected)
        chosen = np.empty(n, np.int64)
        k = compiled._select(0, gaps, resident, coord_bytes, budget, np.ones(1, np.uint64), 0, chosen, np.empty(n, np.int64),
                             np.empty(n, np.uint64))
        np.testing.assert_array_equal(np.sort(chosen[:k]), expected)


@SPARSE
@pytest.mark.parametrize("model", ["lasso", "hinge"])
def test_proofs_keep_every_certified_gap_valid(case_factory, model, sparse, monkeypatch):
    """With refresh "auto" the compiled loop reads no data for the gaps the gap memory proves 0
    (a Lasso zero with |s_i| inside alpha, an SVM sample outside the margin, by how far u can
    have moved: solvers.duhl.gap_memory); every certified row is still valid, its gap P - D of its
    own state written out in glm_oracles (the others are the memory's estimate), and the proofs did
    cover coordinates."""
    monkeypatch.setattr(compiled, "PROOF_SHARE", np.inf)  # proofs however small the data
    monkeypatch.setattr(gram_module, "GRAM", False)  # the Lasso's stale gaps from the data (a Gram stops the proofs)
    seen = []
    real = compiled.run_swap_slice

    def grab(*args):
        seen.append(args[-4])  # proof_arrays: (norms, |mu|, path, at, proven, z scratch)
        return real(*args)

    monkeypatch.setattr(compiled, "run_swap_slice", grab)
    monkeypatch.setattr(duhl_module, "routes", lambda *args: True)
    case = case_factory(model, sparse, np.float64)
    res = DuHL(memory_budget=0.3, tol=1e-9, max_epochs=300, random_state=1, keep_iterates=5000).solve(_problem(case))
    assert res.status == "converged" and res.trace.certified.iloc[-1] == 1 and len(res.trace) >= 5
    assert seen and seen[-1][4].any() and seen[-1][2][0] > 0  # coordinates proven, u's path measured
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


def test_the_parts_clock_is_wall_time(monkeypatch):
    """The profile's wall clock (the time-stamp counter, converted by cycles_per_second): the compiled
    calls' time it records is at most the solve's time by perf_counter (an independent clock) and most
    of it where the rounds dominate (a dense Lasso of 4000 x 60, correlated); the parts (all but "slice") add up to
    at most the slice."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4000, 60)) + 2.0 * rng.standard_normal((4000, 1))  # correlated: many rounds
    y = X[:, :30] @ rng.standard_normal(30) + 0.1 * rng.standard_normal(4000)
    problem = make_problem("lasso", X, y, alpha=1e-3 * np.abs(X.T @ y).max() / 4000, fit_intercept=False)
    kw = dict(memory_budget=0.25, tol=1e-10, max_epochs=5000, random_state=0)
    _solve(problem, True, monkeypatch, **kw)  # compiled first
    clock = np.zeros(len(compiled.PARTS))
    monkeypatch.setattr(compiled, "CLOCK", clock)
    t0 = time.perf_counter()
    res = _solve(problem, True, monkeypatch, **kw)
    wall = time.perf_counter() - t0
    slice_s = clock[-1] / cycles_per_second()
    assert res.n_rounds > 10, res.n_rounds
    assert 0.3 * wall < slice_s <= wall, (slice_s, wall)
    assert clock[:-1].min() >= 0 and clock[:-1].sum() <= clock[-1]
