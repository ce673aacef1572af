"""compile_kernels: after it, a solve of the same model and dtype, all resident or under a
memory_budget, dense or sparse, needs no new kernel signature (none compiled, none loaded from Numba's
cache inside the solve). With jobs=2 the SVM's kernels compile in a child process while this one
compiles the Lasso's, and this one then loads the SVM's from Numba's cache: it never compiles both
(with a warm cache it compiles neither). A fresh process: no earlier test has given a kernel its
signatures."""

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import sys

import numpy as np
import scipy.sparse as sp
from numba.core import event
from numba.core.registry import CPUDispatcher

from solvers.duhl import DuHL, compile_kernels
from solvers.glm.problems import make_problem


def signatures():
    return {f"{m.__name__}.{name}": len(f.signatures) for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("solvers.") for name, f in vars(m).items()
            if isinstance(f, CPUDispatcher)}


class Compiles(event.Listener):
    def __init__(self):
        self.args = []

    def on_start(self, ev):
        self.args.append(str(ev.data["args"]))

    def on_end(self, ev):
        pass


compiles = Compiles()
with event.install_listener("numba:compile", compiles):
    compile_kernels(["lasso", "svm"], (np.float64,), jobs=2)  # lasso here, svm in the child
print("HERE", sum("ElasticNetTheta" in a for a in compiles.args), sum("SVMTheta" in a for a in compiles.args))
before = signatures()
rng = np.random.default_rng(1)
X = rng.standard_normal((300, 40))
y = X[:, :4] @ np.array([1.0, -2.0, 0.5, 1.5]) + 0.1 * rng.standard_normal(300)
for data in (X, sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))):
    for budget in (None, 0.3):
        DuHL(memory_budget=budget, tol=1e-8, max_epochs=10000).solve(make_problem("lasso", data, y, alpha=0.1))
        DuHL(memory_budget=budget, tol=1e-8, max_epochs=10000).solve(make_problem("svm", data, np.sign(y), C=1.0))
after = signatures()
print("SOLVERS", len(before))
print("NEW", sorted(k for k in after if after[k] != before.get(k)))
"""


def test_after_compile_kernels_no_solve_of_its_models_needs_a_new_signature(tmp_path):
    script = tmp_path / "solves.py"
    script.write_text(_SCRIPT)
    root = str(Path(__file__).parents[3])
    env = dict(os.environ, PYTHONPATH=root)  # this checkout's solvers
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                         cwd=root, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split("SOLVERS ")[1].split()[0]) > 20, out.stdout  # the dispatchers were found
    assert "NEW []" in out.stdout, out.stdout
    here_lasso, here_svm = map(int, out.stdout.split("HERE ")[1].split()[:2])
    assert here_lasso == 0 or here_svm == 0, out.stdout  # compiling the Lasso here, the SVM came from the child
