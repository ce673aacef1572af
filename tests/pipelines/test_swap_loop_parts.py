"""swap_loop --parts on the Python loop: the kernels' clock counts the main thread's kernel calls
and nothing once it is closed (the modules get their real solvers.kernels.cpu back)."""

import threading
import time

import numpy as np

import solvers.duhl.devices as devices
import solvers.glm.problems as glm_problems
from pipelines.bench import swap_loop
from solvers.duhl.solver import DuHL
from solvers.kernels import cpu


def _problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 300))
    return glm_problems.make_problem("lasso", X, X[:, :5].sum(1), alpha=0.05)


def test_kernel_clock_counts_the_main_threads_kernels_only():
    problem = _problem()
    a = np.zeros(problem.n_coords)
    state = (a, *problem.state_from(a))
    problem.coordinate_gaps(*state)  # compiled before the clock
    spent = [0.0]
    with swap_loop.kernel_clock(spent):
        problem.coordinate_gaps(*state)
        counted = spent[0]
        worker = threading.Thread(target=problem.coordinate_gaps, args=state)
        worker.start()
        worker.join()
    assert counted > 0 and spent[0] == counted
    assert devices.cpu is cpu and glm_problems.cpu is cpu
    assert devices.CPUDevice.upload_rows.__qualname__ == "CPUDevice.upload_rows"
    assert glm_problems.Problem.certify.__qualname__ == "Problem.certify"
    assert swap_loop.swaps._step is swap_loop.gap_memory._step  # the proofs' compiled functions back


def test_a_kernel_inside_a_timed_call_counts_once(monkeypatch):
    """Problem.certify computes the gaps itself when not given them: its time, not twice."""
    problem = _problem()
    a = np.zeros(problem.n_coords)
    state = (a, *problem.state_from(a))
    problem.certify(*state)
    spent, inner = [0.0], []
    real = cpu.gaps_dense

    def slow(*args):
        real(*args)
        inner.append(1)
        for _ in range(200000):  # CPU time the clock sees
            pass

    monkeypatch.setattr(cpu, "gaps_dense", slow)
    with swap_loop.kernel_clock(spent):
        t = time.thread_time()
        problem.certify(*state)
        total = time.thread_time() - t
    assert inner and 0 < spent[0] <= total


def test_python_parts_split_a_python_loop_round():
    problem = _problem()
    DuHL(memory_budget=0.25, max_epochs=2).solve(problem)  # compiled before the clock
    kernels, outside, wall = swap_loop.python_parts(problem, 1, 0.25)
    assert 0 < kernels < wall and 0 < outside < wall and kernels + outside <= 1.5 * wall
    assert devices.cpu is cpu
