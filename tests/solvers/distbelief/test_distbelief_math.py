"""DistBelief math: gradients against finite differences, L-BFGS on named
vectors against scipy, the Downpour state machine against plain SGD, and the
Sandblaster work-unit scheduler."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad, minimize

from solvers.distbelief.lbfgs import ArrayOps, lbfgs
from solvers.distbelief.models import make_model
from solvers.distbelief.downpour import Replica, Server, sequential_sgd
from solvers.distbelief.rules import Adagrad
from solvers.distbelief.sandblaster import UnitScheduler, unit_ranges


def data(n=60, d=5, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return (sp.csr_matrix(X) if sparse else X), y


@pytest.mark.parametrize("name", ["logistic", "svm", "least_squares", "mlp"])
@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_matches_finite_differences(name, sparse):
    X, y = data(sparse=sparse)
    model = make_model(name, X.shape[1], alpha=0.1, **({"hidden": 4} if name == "mlp" else {}))
    w = model.init(1) + 0.1 * np.random.default_rng(2).standard_normal(model.n_params)
    err = check_grad(lambda v: model.loss_grad(v, X, y)[0], lambda v: model.loss_grad(v, X, y)[1], w)
    assert err < 1e-5 * max(1.0, np.linalg.norm(model.loss_grad(w, X, y)[1]))


def test_summed_parts_give_the_objective():
    X, y = data()
    model = make_model("mlp", 5, hidden=3, alpha=0.2)
    w = model.init(0)
    total = sum(model.sum_loss_grad(w, X[a:b], y[a:b])[0] for a, b in unit_ranges(60, 7))
    assert np.isclose(total / 60 + model.penalty(w), model.loss(w, X, y))


def test_adagrad_step_is_gamma_over_root_sum_of_squares():
    rule, w = Adagrad(2, lr=0.5, eps=0.0), np.zeros(2)
    rule.apply(w, np.array([2.0, -1.0]))
    rule.apply(w, np.array([1.0, 0.0]))
    np.testing.assert_allclose(w, [-0.5 * 2 / 2 - 0.5 * 1 / np.sqrt(5), 0.5])


def test_adagrad_in_one_pass_rounds_as_the_formula_written_out():
    rng = np.random.default_rng(0)
    w0, pushes = rng.standard_normal(1000), rng.standard_normal((3, 1000))
    rule, w = Adagrad(1000, lr=0.3, eps=1e-8), w0.copy()
    expected, sum_sq = w0.copy(), np.zeros(1000)
    for g in pushes:
        rule.apply(w, g)
        sum_sq = sum_sq + g * g
        expected = expected - (g * 0.3) / (np.sqrt(sum_sq) + 1e-8)
    assert np.array_equal(w, expected) and np.array_equal(rule.sum_sq, sum_sq)


def test_lbfgs_on_named_vectors_matches_scipy():
    X, y = data(n=200, d=8, seed=3)
    model = make_model("logistic", 8, alpha=1e-2)
    ops = ArrayOps({"x": np.zeros(model.n_params)})

    def evaluate(x, g):
        f, grad = model.loss_grad(ops.v[x], X, y)
        ops.v[g] = grad.copy()
        return f

    result = lbfgs(ops, evaluate, m=5, max_iter=200)
    ref = minimize(lambda w: model.loss_grad(w, X, y), np.zeros(model.n_params), jac=True,
                   method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12})
    assert result.status == "converged"
    assert abs(result.f - ref.fun) <= 1e-6 * abs(ref.fun)


def test_one_replica_fetching_and_pushing_every_step_is_sequential_sgd():
    X, y = data(n=100)
    model = make_model("logistic", 5, alpha=1e-3)
    server = Server(model.init(), rule="fixed", lr=0.3)
    replica = Replica(model, X, y, batch_size=10, n_fetch=1, n_push=1, seed=7)
    for _ in range(35):
        replica.step(server)
    expected = sequential_sgd(model, X, y, model.init(), lr=0.3, batch_size=10, n_steps=35, seed=7)
    np.testing.assert_allclose(server.w, expected, rtol=1e-12, atol=1e-14)
    assert server.version == 35 and max(server.staleness) == 0


def test_interleaved_replicas_see_staleness():
    X, y = data(n=100)
    model = make_model("logistic", 5)
    server = Server(model.init(), rule="adagrad", lr=0.3)
    a, b = (Replica(model, X, y, batch_size=10, n_fetch=2, n_push=2, seed=s) for s in (0, 1))
    for _ in range(20):
        a.step(server)
        b.step(server)
    assert server.version == 20 and max(server.staleness) >= 1
    assert model.loss(server.w, X, y) < model.loss(model.init(), X, y)


def test_scheduler_duplicates_the_last_unit_and_counts_it_once():
    s = UnitScheduler(3)
    a0, u0, _ = s.assign("w0")
    a1, u1, _ = s.assign("w1")
    assert s.complete(a1)[1]
    a2, u2, _ = s.assign("w1")  # the last pending unit
    assert u2 == 2
    a3, u3, backup = s.assign("w2")  # nothing pending: a backup
    assert backup and u3 in (u0, u2) and s.n_backups == 1
    unit, counted, losers = s.complete(a3)
    assert counted and len(losers) == 1 and s.n_cancelled == 1
    assert s.assign("w2") is not None and not s.finished


def test_scheduler_reissues_a_lost_units():
    s = UnitScheduler(2, backups=False)
    a0, u0, _ = s.assign("w0")
    a1, u1, _ = s.assign("w1")
    s.fail(a0)
    assert s.n_reissued == 1 and s.assign("w1")[1] == u0
    assert s.assign("w1") is None
