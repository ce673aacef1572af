"""local_epochs="auto", DuHL's default (solvers.duhl.loops.rounds.round_epochs): with part of the data
resident in RAM a round runs AUTO_EPOCHS epochs on the block, with all data resident, the data on
disk or the logistic loss's dual one; both round loops run it alike, it reaches the optimum, and a
bad value gets a one-line error."""

import numpy as np
import pytest

import glm_oracles as go
from solvers.duhl import DuHL
from solvers.duhl.loops.rounds import AUTO_EPOCHS, round_epochs
from solvers.glm.problems import make_problem
from test_swap_loop import _solve  # DuHL in the loop a test names


def test_auto_is_two_epochs_in_ram_one_on_disk_and_a_number_is_kept():
    assert AUTO_EPOCHS == 2 and round_epochs("auto") == 2 and round_epochs("auto", on_disk=True) == 1
    assert round_epochs("auto", model="logistic") == 1 and round_epochs("auto", model="svm") == 2
    assert round_epochs("auto", model="logistic_l2") == 2  # the primal side keeps two
    assert round_epochs(3) == 3 and round_epochs(3, on_disk=True) == 3 and round_epochs(1) == 1
    assert round_epochs(2, model="logistic") == 2
    assert DuHL().local_epochs == "auto"


def test_the_logistic_dual_under_a_budget_runs_one_epoch_a_round_and_reaches_the_optimum():
    """Uncentred features at a small C: two epochs a round on the gap-chosen block swing the gap
    from block to block (hundreds of epochs); the default, one, converges in tens, to the
    optimum of scikit-learn's L-BFGS (the same objective: no intercept, C)."""
    from sklearn.linear_model import LogisticRegression as SkLogistic

    from benchmarks.classifier_sides import uniform_tall

    X, y = uniform_tall(2000, 50)
    problem = make_problem("logistic", X, y, C=0.1, fit_intercept=False)
    kw = dict(memory_budget=0.25, tol=1e-6, max_epochs=3000, random_state=0)
    default, two = DuHL(**kw).solve(problem), DuHL(local_epochs=2, **kw).solve(problem)
    assert default.status == two.status == "converged"
    assert default.trace["epoch"].iloc[-1] < 40 < 3 * 40 < two.trace["epoch"].iloc[-1]
    w = SkLogistic(C=0.1, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y).coef_.ravel()
    objective = 0.5 * w @ w + 0.1 * np.logaddexp(0.0, -y * (X @ w)).sum()
    P = float(default.trace["primal"].iloc[-1])
    assert -1e-9 * objective <= P - objective <= 1e-6 * problem.P0  # the certified gap's promise, against L-BFGS


@pytest.mark.parametrize("budget, epochs", [(0.25, 2), (None, 1)])
def test_the_default_runs_two_epochs_a_round_with_part_resident_and_one_with_all(case_factory, budget, epochs):
    """The default's trace is that of the number it stands for, and not that of the other."""
    case = case_factory("hinge", True, np.float64)
    problem = make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)
    cols = ["round", "epoch", "primal", "dual", "gap"]

    def trace(**kw):
        res = DuHL(memory_budget=budget, tol=1e-10, max_epochs=2000, random_state=3, **kw).solve(problem)
        return res.trace[cols].reset_index(drop=True)

    default = trace()
    assert default.equals(trace(local_epochs=epochs))
    assert not default.equals(trace(local_epochs=3 - epochs))


def test_budgeted_auto_reaches_the_optimum_in_both_loops_alike(case_factory, monkeypatch):
    """At memory_budget 0.25 "auto" is 2 epochs a round: the compiled and Python loops
    (refresh "all") give the same trace, and the solution is scikit-learn's optimum."""
    case = case_factory("lasso", True, np.float64)
    problem = make_problem(go.PROBLEM_NAME[case.model], case.X, case.y, **case.params)
    kw = dict(memory_budget=0.25, local_epochs="auto", refresh="all", tol=1e-12, max_epochs=20000, random_state=1)
    py = _solve(problem, False, **kw)
    cc = _solve(problem, True, **kw)
    one = _solve(problem, True, **dict(kw, local_epochs=1))
    assert py.status == cc.status == one.status == "converged"
    cols = ["round", "epoch", "primal", "dual", "gap", "swaps"]
    assert py.trace[cols].reset_index(drop=True).equals(cc.trace[cols].reset_index(drop=True))
    assert cc.n_rounds < one.n_rounds  # more work on the block a round: fewer rounds
    scale = np.abs(case.oracle["coef"]).max()
    np.testing.assert_allclose(cc.a, case.oracle["coef"], rtol=0, atol=1e-4 * scale)
    P, _ = go.gap_from_coordinates(case.model, case.X, case.y, cc.a, case.params)
    assert P - case.oracle["P"] <= 1e-9 * case.P0 + 1e-12


@pytest.mark.parametrize("value", ["x", 0, 2.5])
def test_a_bad_local_epochs_names_the_value(value):
    with pytest.raises(ValueError, match=r"The 'local_epochs' parameter of DuHL must be 'auto' or an int >= 1\. "
                                         rf"Got {value!r} instead\."):
        DuHL(local_epochs=value)


def test_the_default_on_disk_runs_one_epoch_a_round(tmp_path, monkeypatch):
    """With the data on disk (host_budget) "auto" is one epoch a round (the number the round loop
    gets: its reads "as the disk allows" depend on timing, so no two traces need agree); a number
    given is kept."""
    from solvers.duhl.loops import python as python_loop
    from solvers.storage.reader import write_coordinate_major
    from solvers.storage.on_disk import OnDisk
    from solvers.glm.problems import make_problem_on_disk

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 200))
    y = X[:, :20] @ rng.standard_normal(20) + 0.1 * rng.standard_normal(300)
    path = tmp_path / "X.npy"
    write_coordinate_major(path, 200, 300, (X[:, j:j + 64].T for j in range(0, 200, 64)), fortran=True)
    alpha = 0.05 * np.abs(X.T @ y).max() / 300
    problem = make_problem_on_disk("lasso", OnDisk(path), y, alpha=alpha)
    seen = []

    def spy(local_epochs, on_disk=False, model=None):
        seen.append(round_epochs(local_epochs, on_disk, model))
        return seen[-1]

    monkeypatch.setattr(python_loop, "round_epochs", spy)
    res = DuHL(host_budget=0.25, tol=1e-10, max_epochs=2000, random_state=0).solve(problem)
    assert res.status == "converged" and seen == [1]
    DuHL(host_budget=0.25, local_epochs=2, tol=1e-10, max_epochs=2000, random_state=0).solve(problem)
    assert seen == [1, 2]
