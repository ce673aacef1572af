"""Peer arms: our re-evaluation of a peer's point matches an independent formula of the
user's objective and, where the peer reports one, the peer's own objective."""

import warnings

import numpy as np
import pytest

from solvers.glm.problems import make_problem
from tasks.peers import PEERS, PeerUnsupported, Trained, dual_point, evaluate, make_peer, missing_reason
from tasks.arms import SOLVERS, make_solver

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")

RNG = np.random.default_rng(0)
N, D = 120, 8
X = RNG.standard_normal((N, D))
W = RNG.standard_normal(D)
Y = X @ W + 0.3 * RNG.standard_normal(N)
YC = np.where(X @ W + 0.5 * RNG.standard_normal(N) > 0, 1.0, -1.0)


def user_objective(model, w, fit_intercept=False):
    """scikit-learn's objectives, written from their documentation (the oracle)."""
    if model == "lasso":
        r = Y - (Y.mean() if fit_intercept else 0) - (X - (X.mean(0) if fit_intercept else 0)) @ w
        return 0.5 / N * r @ r + 0.1 * np.abs(w).sum()
    if model == "elastic_net":
        r = Y - X @ w
        return 0.5 / N * r @ r + 0.1 * (0.5 * np.abs(w).sum() + 0.25 * w @ w)
    if model == "ridge":
        r = Y - X @ w
        return r @ r + 1.0 * w @ w
    m = YC * (X @ w)
    loss = np.maximum(0, 1 - m) if model == "svm" else np.logaddexp(0, -m)
    return 0.5 * w @ w + 0.5 * loss.sum()


def user_dual(model, p, w):
    """The dual objective at the dual point each family uses, written out here: for the
    regressions, the residual's point (the Lasso: the better of the bounded-support conjugate
    B = P(0)/alpha and scikit-learn's rescaled residual); for the classifiers, the liblinear
    dual at the KKT point of w."""
    if model in ("svm", "logistic"):
        a = dual_point(p, w)
        v = (YC[:, None] * X).T @ a
        C = 0.5
        if model == "svm":
            return a.sum() - 0.5 * v @ v
        ent = a * np.log(a) + (C - a) * np.log(C - a) - C * np.log(C)
        return -0.5 * v @ v - ent.sum()
    r = Y - X @ w
    corr = X.T @ r
    if model == "ridge":
        return 2 * r @ Y - r @ r - corr @ corr / 1.0
    fit = (Y @ Y - (Y - r) @ (Y - r)) / (2 * N)
    if model == "lasso":  # the better of the bounded-support point and scikit-learn's rescaled residual
        B = 0.5 / N * (Y @ Y) / 0.1
        bounded = fit - B * np.maximum(0.0, np.abs(corr) / N - 0.1).sum()
        t = min(1.0, 0.1 / (np.abs(corr).max() / N))
        return max(bounded, t * (r @ Y) / N - t * t * (r @ r) / (2 * N))
    l1 = l2 = 0.05
    return fit - (np.maximum(0.0, np.abs(corr) / N - l1) ** 2).sum() / (2 * l2)


def problem(model, fit_intercept=False):
    if model in ("svm", "logistic"):
        return make_problem(model, X, YC, C=0.5, fit_intercept=False)
    kw = {"alpha": 0.1} if model != "ridge" else {"alpha": 1.0}
    if model == "elastic_net":
        kw["l1_ratio"] = 0.5
    return make_problem(model, X, Y, fit_intercept=fit_intercept, **kw)


@pytest.mark.parametrize("model", ["lasso", "elastic_net", "ridge", "svm", "logistic"])
def test_evaluate_matches_the_user_objective_at_any_point(model):
    p = problem(model)
    w = RNG.standard_normal(D) * 0.3
    primal, dual, gap = evaluate(p, w)
    assert primal == pytest.approx(user_objective(model, w), rel=1e-10)
    assert gap >= -1e-12 and dual == pytest.approx(user_dual(model, p, w), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("model", ["svm", "logistic"])
def test_dual_point_certifies_a_tight_solution(model):
    """At a tight w (scipy's L-BFGS on the smooth logistic objective; for the hinge,
    w = A^T a of a dual solve to 1e-12, checked against liblinear's primal), the
    KKT dual point built from w alone certifies it: rel_gap < 1e-6."""
    from scipy.optimize import minimize

    from solvers.duhl.solver import DuHL

    p = problem(model)
    if model == "logistic":
        w = minimize(lambda w: user_objective("logistic", w), np.zeros(D), method="L-BFGS-B",
                     options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000}).x
    else:
        from sklearn.svm import LinearSVC

        w = np.asarray(p.A.T @ DuHL(tol=1e-12, max_epochs=10**5, random_state=0).solve(p).a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib = LinearSVC(C=0.5, loss="hinge", tol=1e-10, max_iter=10**6, fit_intercept=False).fit(X, YC)
        # both at the optimum up to round-off (1e-12 relative apart, either way)
        assert user_objective("svm", w) <= user_objective("svm", lib.coef_.ravel()) * (1 + 1e-9)
    a = dual_point(p, w)
    assert np.all((a >= 0) & (a <= 0.5 + 1e-12))
    assert evaluate(p, w)[2] / p.P0 < 1e-6


def _fits(name, p):
    """[(knob, fit)]: the peer's schedule, each fit built (skip where the peer has no such model)."""
    if missing_reason(name):
        pytest.skip(missing_reason(name))
    try:
        return [(knob, make_fit()) for knob, make_fit in make_peer(name).fits(p)]
    except PeerUnsupported as error:
        pytest.skip(str(error))


FAST = [n for n in PEERS if n not in ("peer_skglm", "peer_daskml", "peer_daskml_admm")]


@pytest.mark.parametrize("model", ["lasso", "elastic_net", "ridge", "svm", "logistic"])
@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in PEERS
                                         if n not in FAST])
def test_each_peer_point_is_re_evaluated_on_the_same_objective(name, model):
    p = problem(model)
    fits = _fits(name, p)
    knob, fit = fits[min(5, len(fits) - 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = fit()
    w = np.asarray(w.w if isinstance(w, Trained) else w, dtype=float).ravel()  # (VW's fit: its weights and seconds)
    assert w.shape == (D,)
    primal, _, gap = evaluate(p, w)
    assert primal == pytest.approx(user_objective(model, w), rel=1e-9)
    assert gap >= -1e-12


def test_daskml_fits_on_one_thread_beside_a_distributed_client(dask_client):
    """A process holding a Dask client (a cluster arm's): dask-glm's fit still runs on the
    synchronous scheduler (it would scatter its iterate to the client, where that scheduler
    cannot find it) and reaches scikit-learn's ridge."""
    from sklearn.linear_model import Ridge

    p = problem("ridge")
    knob, fit = _fits("peer_daskml", p)[-1]
    w = np.asarray(fit(), dtype=float).ravel()
    ref = Ridge(alpha=1.0, fit_intercept=False).fit(X, Y).coef_
    assert evaluate(p, w)[0] == pytest.approx(evaluate(p, ref)[0], rel=1e-9)  # its last point: L-BFGS's own stop
    np.testing.assert_allclose(w, ref, rtol=1e-4)


def test_regression_with_an_intercept_keeps_the_coefficients():
    p = problem("lasso", fit_intercept=True)
    result = make_peer("peer_sklearn", tol=1e-8).solve(p)
    assert result.converged
    assert result.primal == pytest.approx(user_objective("lasso", result.a, fit_intercept=True), rel=1e-9)


@pytest.mark.slow
def test_skglm_reported_objective_matches_ours():
    skglm = pytest.importorskip("skglm")
    from skglm.datafits import Quadratic
    from skglm.penalties import L1
    from skglm.solvers import AndersonCD

    p = problem("lasso")
    w, p_objs, _ = AndersonCD(tol=1e-6, fit_intercept=False).solve(np.asfortranarray(X), Y, Quadratic(), L1(0.1))
    assert skglm is not None
    assert evaluate(p, w)[0] == pytest.approx(p_objs[-1], rel=1e-10)


def test_peer_result_looks_like_duhl_and_the_trace_has_the_metric_names():
    p = problem("svm")
    result = make_peer("peer_sklearn", tol=1e-6, repeats=2).solve(p)
    for col in ("round", "time_s", "epoch", "primal", "dual", "gap", "rel_gap", "bytes_h2d", "swaps"):
        assert col in result.trace.columns
    assert result.status == "converged" and result.rel_gap <= 1e-6
    assert np.all(np.diff(result.trace["time_s"]) >= 0)


def test_peer_arms_are_registered_and_take_the_experiment_settings():
    for name in PEERS:
        assert name in SOLVERS
    solver = make_solver({"name": "peer_sklearn", "selection": "gap", "local_epochs": 1, "max_epochs": 2,
                          "random_state": 0, "memory_budget": 0.25, "device": "cpu", "tol": 0.0,
                          "max_time": None})
    result = solver.solve(problem("lasso"))
    # the best point of its schedule (tol=0: every tolerance down to 1e-12), scored by us
    assert result.primal == pytest.approx(user_objective("lasso", result.a), rel=1e-10)
    assert result.rel_gap <= 1e-8 and len(result.trace) == result.n_rounds + 1 >= 6  # round 0: the start


def test_a_missing_library_is_reported_not_raised(monkeypatch):
    import tasks.peers as peers

    monkeypatch.setitem(peers.PEERS, "peer_sklearn", ("no_such_module_xyz",) + peers.PEERS["peer_sklearn"][1:])
    assert "not importable" in missing_reason("peer_sklearn")
    with pytest.raises(ImportError, match="pip install"):
        make_peer("peer_sklearn").solve(problem("lasso"))


def slow_lasso():
    """Equicorrelated features and a tiny alpha: scikit-learn's CD needs ~0.03 s at tol 1e-2,
    seconds at 1e-4 and 100,000 epochs (tens of seconds) at 1e-12."""
    rng = np.random.default_rng(0)
    Xs = rng.standard_normal((1000, 1000)) + 3 * rng.standard_normal((1000, 1))
    ys = Xs[:, :20] @ rng.standard_normal(20) + 0.1 * rng.standard_normal(1000)
    alpha = 1e-4 * np.abs(Xs.T @ ys).max() / 1000
    return make_problem("lasso", np.asfortranarray(Xs), ys, alpha=alpha, fit_intercept=False)


def test_a_peer_stops_at_max_time_and_keeps_the_points_fitted_before():
    """The fit in flight is killed when the schedule has spent max_time; the arm ends within
    max_time plus a slack (the untimed builds, our evaluations, the fork), every kept point
    is a whole fit scored by our objective, and their times sum to at most max_time."""
    import time

    p = slow_lasso()
    max_time, slack = 1.0, 3.0
    start = time.perf_counter()
    result = make_peer("peer_sklearn", tol=0.0, max_time=max_time).solve(p)
    wall = time.perf_counter() - start
    trace = result.trace
    assert result.status == "max_time" and wall < max_time + slack
    assert trace["round"].tolist()[0] == 0 and len(trace) >= 2  # the start, and the points before the cut
    assert trace["time_s"].sum() <= max_time
    assert trace["epoch"].iloc[-1] > 1e-12  # cut before the schedule's last tolerance
    for _, row in trace.iterrows():  # the kept points: our objective at coefficients the peer returned
        assert row["rel_gap"] > 0 and row["primal"] <= p.P0 * (1 + 1e-12)
    assert result.primal == pytest.approx(evaluate(p, result.a)[0], rel=1e-12)


def test_each_point_reaches_the_callback_while_the_peers_fits_still_run():
    """A point is seen (progress bar, MLflow) when its fit ends, not when the schedule does:
    at each callback after round 0 the child that runs the fits is still alive (a child of
    this process in /proc), and the rows come in the schedule's order."""
    import glob
    import os

    def children():  # this process's children not there before the solve (an earlier test's may live on)
        return [pid for path in glob.glob(f"/proc/{os.getpid()}/task/*/children")
                for pid in open(path).read().split() if pid not in earlier]

    if not glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        pytest.skip("/proc/<pid>/task/<tid>/children needs Linux")
    earlier = set()
    earlier = set(children())
    seen = []
    result = make_peer("peer_sklearn", tol=1e-8, callback=lambda row: seen.append((row["round"], children()))).solve(
        problem("lasso"))
    assert [r for r, _ in seen] == list(range(len(seen))) and len(seen) == len(result.trace) >= 3
    assert all(alive for r, alive in seen[1:])
    assert not children()  # and reaped at the end


PRIMAL = {"logistic_l1": (1.0, "logistic"), "logistic_elasticnet": (0.5, "logistic"), "logistic_l2": (0.0, "logistic"),
          "svm_l1": (1.0, "squared_hinge"), "svm_l2": (0.0, "squared_hinge")}
PRIMAL_PEERS = ["peer_sklearn", "peer_sklearn_saga", "peer_sklearn_newton", "peer_sklearn_lbfgs", "peer_celer",
                "peer_snapml", pytest.param("peer_skglm", marks=pytest.mark.slow)]


def primal_objective(model, w):
    """scikit-learn's objective of a classifier in the primal, written from its documentation."""
    l1, loss = PRIMAL[model]
    m = YC * (X @ w)
    data = np.logaddexp(0, -m).sum() if loss == "logistic" else (np.maximum(0, 1 - m) ** 2).sum()
    return 0.5 * data + l1 * np.abs(w).sum() + 0.5 * (1 - l1) * w @ w


@pytest.mark.parametrize("model", list(PRIMAL))
@pytest.mark.parametrize("name", PRIMAL_PEERS)
def test_each_peer_solves_the_classifiers_primal_objective(name, model):
    """Each peer's arm for a classifier in the primal (its C, alpha or regularizer translated from
    ours) reaches the optimum DuHL certifies, its point re-scored by our code as the formula here."""
    from solvers.duhl import DuHL

    kw = {"l1_ratio": 0.5} if model == "logistic_elasticnet" else {}
    p = make_problem(model, X, YC, C=0.5, fit_intercept=False, **kw)
    best = DuHL(tol=1e-12, random_state=0).solve(p)
    fits = _fits(name, p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = np.asarray(min(fits, key=lambda f: f[0])[1](), dtype=float).ravel()
    assert w.shape == (D,)
    primal, _, gap = evaluate(p, w)
    assert primal == pytest.approx(primal_objective(model, w), rel=1e-9)
    assert gap >= -1e-12 and primal == pytest.approx(best.primal, rel=1e-5)
