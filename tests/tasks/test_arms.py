"""tasks.arms: arms are checked before data exists, run to their target, and the warm-up
compiles everything an arm needs."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.kernels import cpu
from tasks.arms import make_solver, run_arm, warmup
from tasks.problems import build_problem

ARM = dict(name="duhl", selection="gap", local_epochs=1, max_epochs=200, random_state=0,
           memory_budget=0.5, device="cpu", tol=1e-6, max_time=10)


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


def test_after_the_warmup_no_arm_compiles_anything():
    """The warm-up runs every arm on a read-only miniature of the data, so the arms'
    timed solves on the (read-only, memory-mapped) data need no new kernel signature."""
    rng = np.random.default_rng(0)
    X = sp.random(300, 20, density=0.2, format="csr", random_state=0)
    for part in (X.data, X.indices, X.indptr):
        part.setflags(write=False)
    y = rng.standard_normal(300)
    arms = {"gap": ARM, "full": {**ARM, "memory_budget": None}, "sized": {**ARM, "memory_budget": "1GB"}}
    model = {"name": "logistic", "C": 1.0}
    warmup(model, X, y, arms)
    kernels = (cpu.scd_epoch_sparse, cpu.gaps_sparse, cpu.sum_g, cpu.shifted_sq_norm)
    compiled = [len(k.signatures) for k in kernels]
    problem = build_problem(model, X, y)
    for settings in arms.values():
        run_arm(problem, {**settings, "max_epochs": 3})
    assert [len(k.signatures) for k in kernels] == compiled
