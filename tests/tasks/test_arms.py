"""tasks.solve: arms are checked before data exists; problems get the labels they need."""

import numpy as np
import pytest

from tasks.arms import build_problem, labels_for, make_solver, run_arm, warmup

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


def test_warmup_miniature_keeps_dtype_layout_and_read_only_flags():
    from tasks.arms import _read_only_miniature

    X = np.asfortranarray(np.random.default_rng(0).standard_normal((500, 8)).astype(np.float32))
    X.setflags(write=False)
    y = np.where(np.arange(500) < 480, -1.0, 1.0)  # rare positives, all at the end
    small, small_y = _read_only_miniature("svm", X, y)
    assert small.dtype == np.float32 and np.isfortran(small) and not small.flags.writeable
    assert set(np.unique(small_y)) == {-1.0, 1.0} and not small_y.flags.writeable


def test_warmup_runs_every_arm_on_the_miniature():
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(300, 20, density=0.2, format="csr", random_state=0)
    y = rng.standard_normal(300)
    arms = {"gap": ARM, "full": {**ARM, "memory_budget": None}, "sized": {**ARM, "memory_budget": "1GB"}}
    assert warmup({"name": "logistic", "C": 1.0}, X, y, arms) > 0
