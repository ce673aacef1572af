"""tasks.arms: arms are checked before data exists, run to their target, and the warm-up
compiles everything an arm needs."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from solvers.kernels import cpu
from tasks.arms import make_solver, run_arm, runs_on_workers, warmup
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


_PYTHON_LOOP_ARM = r"""
from pathlib import Path

import numpy as np
from numba.core.registry import CPUDispatcher

import solvers.duhl.solver as solver_module
from solvers.duhl.block import gap_block
from solvers.duhl.gaps import memory
from solvers.duhl.loops import resident
from solvers.kernels import cpu
from tasks.arms import run_arm, warmup
from tasks.problems import build_problem

rng = np.random.default_rng(0)
X = np.asfortranarray(rng.standard_normal((2000, 40)))
X.setflags(write=False)
y = X[:, :4] @ np.array([1.0, -2.0, 0.5, 1.5]) + 0.1 * rng.standard_normal(2000)
model = {"name": "lasso", "alpha": 0.05}
arm = dict(name="duhl", selection="gap", max_epochs=5, tol=0.0, memory_budget=0.25, device="cpu", random_state=0)
modules = (cpu, gap_block, memory, resident)

def signatures():
    return {f"{m.__name__}.{name}": len(f.signatures) for m in modules for name, f in vars(m).items()
            if isinstance(f, CPUDispatcher)}

warmup(model, X, y, {"gap": arm})
before = signatures()
problem = build_problem(model, X, y)
routes = solver_module.routes
taken = []
solver_module.routes = lambda *args: taken.append(routes(*args)) or taken[-1]  # which loop the arm took
run_arm(problem, arm)
after = signatures()
print("ROUTES", taken)
print("NEW", sorted(k for k in after if after[k] != before[k]))
"""


def test_after_the_warmup_an_arm_compiles_nothing(tmp_path):
    """The warm-up's miniature takes the round loop the real data takes (in RAM: the compiled one)
    and gives its kernels (epochs, the gap selection, the gap memory) their signatures: none is
    compiled or loaded from Numba's cache inside the timed arm. A fresh process: no earlier test
    has compiled anything."""
    import subprocess
    import sys

    script = tmp_path / "arm.py"
    script.write_text(_PYTHON_LOOP_ARM)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ROUTES [True]" in out.stdout, out.stdout  # the arm took the compiled loop
    assert "NEW []" in out.stdout, out.stdout


_ON_DISK_ARM = r"""
import sys
from pathlib import Path

import numpy as np
from numba.core.registry import CPUDispatcher

from tasks.arms import make_solver, warmup
from tasks.problems import build_problem_on_disk, coordinate_stats, read_only_miniature

folder = Path(sys.argv[1])
rng = np.random.default_rng(0)
X = np.asfortranarray(rng.standard_normal((2000, 40)))
y = np.where(X[:, :4] @ np.array([1.0, -2.0, 0.5, 1.5]) + rng.standard_normal(2000) > 0, 1.0, -1.0)
np.save(folder / "X.npy", X)
X = np.load(folder / "X.npy", mmap_mode="r")
small_X, small_y = read_only_miniature("logistic_l1", X, y)
# a C at which the warm-up's 64 rows are solved by w = 0 (the L1 logistic's optimality at 0:
# C max_j |sum_i y_i x_ij| / 2 <= 1) and the whole data is not
C = 0.5 / (np.abs(small_X.T @ small_y).max() / 2)
print("TRIVIAL", C * np.abs(small_X.T @ small_y).max() / 2 <= 1, C * np.abs(X.T @ y).max() / 2 <= 1)
model = {"name": "logistic_l1", "C": float(C), "fit_intercept": False}
arm = dict(name="duhl", selection="gap", max_epochs=40, tol=1e-6, host_budget=0.25, device="cpu", random_state=0)

def signatures():
    return {f"{name}.{key}": len(f.signatures) for name, module in list(sys.modules.items())
            if name.startswith("solvers.") for key, f in vars(module).items() if isinstance(f, CPUDispatcher)}

warmup(model, X, y, {"gap": arm})
problem = build_problem_on_disk(model, folder, y, coordinate_stats("logistic_l1", folder))
before = signatures()
result = make_solver(arm).solve(problem)
after = signatures()
print("STATUS", result.status, int(result.trace["round"].iloc[-1]))
print("NEW", sorted(k for k in after if after[k] != before.get(k, 0)))
"""


def test_after_the_warmup_an_arm_on_disk_compiles_nothing_when_the_miniature_is_solved_at_zero(tmp_path):
    """DuHL's Python round loop (the data on disk) dispatches its kernels one by one, so the warm-up
    compiles only those its miniature calls. An L1 classifier's 64 rows at the data's C can be solved
    by w = 0 at once, before any round; the miniature's C is scaled by the rows it lacks, and its run
    takes enough epochs for a round that does not certify. A fresh process."""
    import subprocess
    import sys

    script = tmp_path / "arm.py"
    script.write_text(_ON_DISK_ARM)
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                         timeout=300, cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "TRIVIAL True False" in out.stdout, out.stdout  # the case: the miniature at 0, the data not
    assert "STATUS converged" in out.stdout, out.stdout
    assert "NEW []" in out.stdout, out.stdout


@pytest.mark.parametrize("sparse", [False, True])
def test_the_warmup_writes_twice_the_largest_budget_then_frees_it(sparse, monkeypatch):
    """_first_touch: twice the largest memory_budget among the arms (a share of the data's bytes,
    or a size), at most the data's twice and FIRST_TOUCH_MAX; nothing without a budgeted arm."""
    import tasks.arms as arms_module

    written = []
    real_ones = np.ones
    monkeypatch.setattr(arms_module.np, "ones", lambda n, *a, **k: (written.append(n * 8), real_ones(1))[1])
    X = sp.random(400, 300, density=0.1, format="csr", random_state=0) if sparse else np.zeros((400, 300))
    total = X.data.nbytes if sparse else X.nbytes
    arms_module._first_touch(X, {"a": {"memory_budget": 0.25}, "b": {"memory_budget": "64KB"}, "c": {}})
    assert written == [2 * max(int(0.25 * total), 64_000) // 8 * 8]
    written.clear()
    arms_module._first_touch(X, {"a": {"memory_budget": None}, "b": {}})
    assert written == []
    monkeypatch.setattr(arms_module, "FIRST_TOUCH_MAX", 4096)
    arms_module._first_touch(X, {"a": {"memory_budget": 0.5}})
    assert written == [4096]


def test_the_warmup_touches_the_blocks_pages_after_compiling(monkeypatch):
    """_first_touch comes last in the warm-up, after every miniature solve: on a fresh machine those
    compile for tens of seconds, and pages touched before them were cold again for the first arm (its first
    block took 0.145 s where a warm run's takes 0.039; the default experiment's duhl-gap 18.8x ->
    40.6x vs sequential on a first run)."""
    import tasks.arms as arms_module

    calls = []
    monkeypatch.setattr(arms_module, "_first_touch", lambda X, arms: calls.append("touch"))
    real = arms_module.make_solver
    monkeypatch.setattr(arms_module, "make_solver", lambda settings: calls.append("solve") or real(settings))
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 8)), rng.standard_normal(60)
    warmup({"name": "lasso", "alpha": 0.1}, X, y, {"duhl-gap": {"name": "duhl", "memory_budget": 0.25},
                                                   "resident": {"name": "duhl"}})
    assert calls[0] == "solve" and calls[-1] == "touch" and calls.count("touch") == 1


class _RecordedContext:
    """multiprocessing's spawn context, keeping the processes the warm-up starts."""

    def __init__(self):
        import multiprocessing

        self.context = multiprocessing.get_context("spawn")
        self.started = []

    def Process(self, *args, **kwargs):
        process = self.context.Process(*args, **kwargs)
        self.started.append(process)
        return process


TWO_LOOPS = {"duhl-gap": {"name": "duhl", "memory_budget": 0.25}, "resident": {"name": "duhl"}}


@pytest.mark.skipif(__import__("os").cpu_count() < 2, reason="the warm-up starts no child on one core")
def test_a_warmup_whose_loop_compiled_nothing_stops_its_child_and_leaves_no_file(monkeypatch, tmp_path):
    """Code that came from Numba's cache (here: compiled by the first warm-up in this process) means a
    child would only spend seconds importing: the second warm-up stops it (SIGTERM) instead of waiting,
    and removes the file the child would have read its miniature from."""
    import signal
    import tempfile

    import tasks.arms as arms_module

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 8)), rng.standard_normal(60)
    warmup({"name": "lasso", "alpha": 0.1}, X, y, TWO_LOOPS)
    recorded = _RecordedContext()
    monkeypatch.setattr(arms_module.multiprocessing, "get_context", lambda method: recorded)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert warmup({"name": "lasso", "alpha": 0.1}, X, y, TWO_LOOPS).compiled == 0
    assert [p.exitcode for p in recorded.started] == [-signal.SIGTERM]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(__import__("os").cpu_count() < 2, reason="the warm-up starts no child on one core")
def test_a_warmup_whose_loop_compiled_waits_for_its_child(monkeypatch):
    """When this process compiled (a first run), the child compiles the other loop to its end."""
    import tasks.arms as arms_module

    class CompiledOnce(arms_module.Compiles):
        def __init__(self):
            super().__init__()
            self.count = 1

    recorded = _RecordedContext()
    monkeypatch.setattr(arms_module.multiprocessing, "get_context", lambda method: recorded)
    monkeypatch.setattr(arms_module, "Compiles", CompiledOnce)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 8)), rng.standard_normal(60)
    warmup({"name": "lasso", "alpha": 0.1}, X, y, TWO_LOOPS)
    assert [p.exitcode for p in recorded.started] == [0]


@pytest.mark.parametrize("settings, access, where", [
    ({"name": "cocoa", "n_parts": 2}, "mmap", True),            # replicas spread over the workers
    ({"name": "cocoa", "n_parts": 2, "host_budget": "1MB"}, "disk", True),  # parts on the workers' shards
    ({"selection": "gap"}, "mmap", True),                         # DuHL runs whole on a worker
    ({"selection": "gap", "host_budget": "1MB"}, "mmap", False),  # ... but reads the cache from disk here
    ({"selection": "gap"}, "disk", False),                        # ... and runs here where workers hold shards
])
def test_runs_on_workers_says_where_run_arm_runs_an_arm(settings, access, where):
    """The report's "worker" columns count an arm's workers only where it ran there: a DuHL arm beside
    CoCoA+'s parts on the workers' disks (experiment=cocoa_disk) reads in this process."""
    placement = SimpleNamespace(client=object(), parts=SimpleNamespace(access=access))
    assert runs_on_workers(settings, placement) is where
    assert runs_on_workers(settings, SimpleNamespace(client=None, parts=placement.parts)) is False
    assert runs_on_workers(settings, None) is False
