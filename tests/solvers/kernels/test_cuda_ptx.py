"""The CUDA kernels compile for a real GPU (sm_90 PTX, linked to a cubin) without a GPU.

The simulator tests run the kernels' Python; this compiles them with numba-cuda's
real target (type inference, lowering to NVVM, ptxas through nvJitLink), which is
where CUDA-only failures show. In a subprocess: this process may have switched
numba.cuda to the simulator.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from solvers.glm.models import MODELS

SCRIPT = Path(__file__).with_name("ptx_check.py")


def test_every_kernel_signature_compiles_for_sm_90():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--cc", "9.0", "--cubin"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    # every kernel with the theta of every registered model that launches it (float64 data, int32
    # indices): TPA-SCD for a quadratic data term, the Newton pass's kernels for a loss of the margins
    # (the classifiers in the primal), the gap kernels for all; and with one model of each kind every
    # other dtype and index type
    quadratic = {type(m.theta(dict(m.params), 1.0)).__name__ for m in MODELS.values() if m.math.loss is None}
    loss = {type(m.theta(dict(m.params), 1.0)).__name__ for m in MODELS.values() if m.math.loss is not None}
    assert len(quadratic) == 3 and len(loss) == 2  # ElasticNet, SVM, Logistic; the two primal losses
    expected = {"tpa_scd_dense": quadratic, "tpa_scd_sparse": quadratic, "gaps_dense": quadratic | loss,
                "gaps_sparse": quadratic | loss, "gaps_from_dots": quadratic | loss, "tpa_newton_dense": loss,
                "tpa_newton_sparse": loss, "newton_setup": loss, "loss_changes": loss, "g_changes": loss,
                "margins_commit": loss}
    launched = {}
    for line in compiled:
        kernel, theta = re.match(r"ok   sm_90 (\w+) \(([^,]+),", line).groups()
        launched.setdefault(kernel, set()).add(theta)
    assert {k: launched.get(k, set()) for k in expected} == expected, done.stdout
    assert "newton_commit" in launched  # no theta: one signature
    # one model of each kind with float32 data and int64 indices too: 3 more of each sparse kernel
    # (tpa_scd_sparse, tpa_newton_sparse, gaps_sparse), 1 more of each dense one (tpa_scd_dense,
    # tpa_newton_dense, gaps_dense, gaps_from_dots)
    assert len(compiled) == sum(len(v) for v in expected.values()) + 1 + 3 * 3 + 4, done.stdout
