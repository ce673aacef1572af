"""tasks.solve: arms are checked before data exists; problems get the labels they need."""

import numpy as np
import pytest

from tasks.solve import build_problem, labels_for, make_solver, run_arm

ARM = dict(name="duhl", selection="gap", local_epochs=1, max_epochs=200, random_state=0,
           memory_budget=0.5, device="cpu", tol=1e-6, max_time=10)


def test_continuous_targets_become_two_balanced_classes_for_classifiers():
    y = np.array([-2.0, -1.0, 0.5, 3.0])
    np.testing.assert_array_equal(labels_for("svm", y), [-1, -1, 1, 1])
    np.testing.assert_array_equal(labels_for("lasso", y), y)
    np.testing.assert_array_equal(labels_for("logistic", np.array([0, 1, 1])), [0, 1, 1])  # already binary


@pytest.mark.parametrize("change,message", [
    (dict(memory_budget="abc"), "'memory_budget'.*'abc'"),
    (dict(memory_budget=1.5), "'memory_budget'"),
    (dict(selection="best"), "'selection'.*'best'"),
    (dict(name="sgd"), "'name' parameter of solver"),
    (dict(colour="red"), "colour"),
])
def test_bad_arm_settings_fail_without_data(change, message):
    with pytest.raises(ValueError, match=message):
        make_solver({**ARM, **change})


def test_run_arm_reaches_the_target_on_a_small_lasso():
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.standard_normal((200, 30)))
    y = X[:, :3] @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal(200)
    problem = build_problem({"name": "lasso", "alpha": 0.05, "fit_intercept": True}, X, y)
    rows = []
    result = run_arm(problem, ARM, callback=rows.append)
    assert result.converged and result.rel_gap <= ARM["tol"]
    assert len(rows) == len(result.trace) and rows[-1]["rel_gap"] == result.trace["rel_gap"].iloc[-1]
