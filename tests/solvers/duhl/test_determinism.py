"""A solve's iterates are a function of the data, the parameters and random_state, never of the
clock: the compiled loops' slices end by work done, and their state is carried whole, so where a
slice ends changes nothing. Checked in two ways: the same solve with slices of one epoch against
the default ones, and the same solve in two processes, one of them slowed down (stopped and
resumed by its parent every few milliseconds); every trace column but the clock, and the
coefficients, equal bit for bit. And ``max_epochs`` is an epoch budget, as scikit-learn's max_iter."""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import solvers.duhl.loops.driver as driver
from solvers.duhl import DuHL, Lasso
from solvers.glm.problems import make_problem

ROOT = Path(__file__).resolve().parents[3]


def problems():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 60)) + 1.5 * rng.standard_normal((400, 1))  # correlated: many rounds
    y = X[:, :6] @ rng.standard_normal(6) + 0.1 * rng.standard_normal(400)
    alpha = 0.02 * np.abs(X.T @ (y - y.mean())).max() / 400
    labels = np.sign(X[:, 0] + 0.5 * rng.standard_normal(400))
    return {"lasso": make_problem("lasso", X, y, alpha=alpha),
            "svm": make_problem("svm", X, labels, C=1.0),
            "logistic": make_problem("logistic", X, labels, C=1.0)}


# (model, DuHL's settings): the compiled swap loop with and without the Gram matrix, the all-resident
# loop (its Gram matrix built on a schedule of certificates), the Python loop
SOLVES = [("lasso", dict(memory_budget=0.25)), ("lasso", dict(memory_budget=0.25, gram=False)),
          ("svm", dict(memory_budget=0.25)), ("logistic", dict(memory_budget=0.25)),
          ("lasso", dict()), ("svm", dict()), ("lasso", dict(memory_budget=0.25, loop="python"))]


def fingerprint(res):
    """A hash of every trace column but the clock, the coefficients and the status."""
    trace = res.trace.drop(columns=["time_s"])
    return hashlib.sha256(trace.to_numpy().tobytes() + res.a.tobytes() + res.status.encode()).hexdigest()


def run_all():
    found = problems()
    return [fingerprint(DuHL(tol=1e-10, max_epochs=400, random_state=3, **kw).solve(found[model]))
            for model, kw in SOLVES]


def test_where_a_slice_ends_changes_no_iterate(monkeypatch):
    default = run_all()
    monkeypatch.setattr(driver, "SLICE_ENTRIES", 1)  # a slice of one epoch: many more returns to Python
    monkeypatch.setattr(driver, "HISTORY_ROWS", 3)
    assert run_all() == default


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_determinism import run_all
print("FINGERPRINTS", *run_all())
"""


def _run(slowed):
    """The solves in a fresh process; ``slowed``: stopped for 2 ms of every 3 (SIGSTOP, SIGCONT)."""
    code = SCRIPT.format(tests=str(Path(__file__).parent))
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    done = threading.Event()

    def slow_down():
        try:
            while not done.is_set() and proc.poll() is None:
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(0.002)
                os.kill(proc.pid, signal.SIGCONT)
                time.sleep(0.001)
        except ProcessLookupError:  # it ended between the check and the signal
            pass

    thread = threading.Thread(target=slow_down) if slowed else None
    if thread:
        thread.start()
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        done.set()
        if thread:
            thread.join()
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
    assert proc.returncode == 0, err[-2000:]
    line = next(line for line in out.splitlines() if line.startswith("FINGERPRINTS"))
    return line.split()[1:]


def test_a_slowed_process_takes_the_same_steps():
    assert _run(slowed=False) == _run(slowed=True)


@pytest.mark.parametrize("kw", [dict(), dict(memory_budget=0.25), dict(memory_budget=0.25, loop="python")],
                         ids=["resident", "compiled", "python"])
def test_max_epochs_is_an_epoch_budget(kw):
    """At most max_epochs epochs of updates in every loop (a last pass cut short), the state reached
    certified, status max_epochs."""
    problem = problems()["lasso"]
    for budget in (1, 2, 2.5, 7):
        res = DuHL(tol=0.0, max_epochs=budget, random_state=0, **kw).solve(problem)
        assert res.status == "max_epochs" and res.epochs == pytest.approx(budget, abs=1e-12), (budget, res.epochs)
        assert res.trace.epoch.max() <= budget + 1e-12 and res.trace.certified.iloc[-1] == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kw", [dict(), dict(memory_budget=0.25), dict(memory_budget=0.25, loop="python")],
                         ids=["resident", "compiled", "python"])
def test_a_budget_a_rounding_error_short_of_whole_updates_ends(kw):
    """max_epochs = k / n, whose product with n is a hair under k in floating point (158/600 * 600 =
    157.99999999999997): the run makes its k updates and stops (it had looped forever, a round left
    int(0.99...) = 0 updates to make)."""
    problem = problems()["lasso"]
    n = problem.n_coords
    k = next(k for k in range(1, 4 * n) if (k / n) * n < k)
    res = DuHL(tol=0.0, max_epochs=k / n, random_state=0, **kw).solve(problem)
    assert res.status == "max_epochs" and res.epochs == pytest.approx(k / n, abs=1e-12)


def test_max_iter_stops_the_fit_and_warns():
    """As scikit-learn's Lasso: max_iter=2 runs 2 epochs, n_iter_ <= 2, and a ConvergenceWarning when
    tol is not reached (the issue's case: 60 x 5, alpha 1e-4, tol 1e-12)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5)) + rng.standard_normal((60, 1))
    y = X @ rng.standard_normal(5) + 0.01 * rng.standard_normal(60)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = Lasso(alpha=1e-4, max_iter=2, tol=1e-12).fit(X, y)
    assert est.n_iter_ <= 2 and est.history_.epoch.max() <= 2 + 1e-12
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught)
