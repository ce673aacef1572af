"""A compiled function rounds as its own options say, whichever caller compiled it first.

Numba gives a function that leaves ``fastmath`` unset its caller's flags when the caller compiles
it, and keeps that one compilation for the signature (in the process and in its disk cache). The
face solve (``_face_step``) is shared by the dense Newton pass (fastmath) and the sparse one
(strict): compiled under the dense pass first, every later sparse solve rounded with reassociated
sums, and the iterates depended on the cache's history. The oracle is the LLVM IR itself: a
function compiled without fastmath carries no fast-math flag on its own floating-point ops.
A fresh process and an empty cache, so that the functions compile here (the IR exists only then).
"""

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import re
import sys

import numpy as np
from numba.core.registry import CPUDispatcher

from solvers.glm.problems import make_problem
from solvers.kernels import cpu

rng = np.random.default_rng(0)
X = rng.standard_normal((200, 12))
y = np.where(X[:, 0] + 0.3 * rng.standard_normal(200) > 0, 1.0, -1.0)
p = make_problem("logistic_l1", X, y, C=1.0)  # 12 features: the dense pass takes its Hessian step
m = p.n_samples
order = np.arange(p.A.shape[0])
a, z, off = np.zeros(p.A.shape[0]), np.full(m, -0.5 * p.theta.C), np.zeros(m + 1)
cpu.newton_pass_dense(p.A, order, order, a, z, off, p.mu, p.sqnorm, p.c, p.theta)  # compiles the face solve first

FAST = re.compile(r"= f(?:add|sub|mul|div|neg) (?:fast|reassoc|contract|nnan|ninf|nsz|arcp|afn)")
checked, wrong = [], []
for mod in [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("solvers.")]:
    for name, disp in vars(mod).items():
        if not isinstance(disp, CPUDispatcher) or disp.targetoptions.get("fastmath"):
            continue
        for cres in disp.overloads.values():
            ir = cres.library.get_llvm_str()
            define = re.search(rf"^define [^\n]*@{re.escape(cres.fndesc.mangled_name)}\(", ir, re.M)
            body = ir[define.end():]
            body = body[:body.find("\n}\n")]
            checked.append(name)
            if FAST.search(body):
                wrong.append(name)
print("CHECKED", sorted(set(checked)))
print("WRONG", sorted(set(wrong)))
"""


def test_a_strict_function_compiled_under_a_fastmath_caller_stays_strict(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=Path(__file__).resolve().parents[3], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("CHECKED", "WRONG")))
    assert "_face_step" in lines["CHECKED"], lines
    assert lines["WRONG"] == "[]", lines
