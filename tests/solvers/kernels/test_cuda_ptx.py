"""The CUDA kernels compile for a real GPU (sm_90 PTX, linked to a cubin) without a GPU.

The simulator tests run the kernels' Python; this compiles them with numba-cuda's
real target (type inference, lowering to NVVM, ptxas through nvJitLink), which is
where CUDA-only failures show. In a subprocess: this process may have switched
numba.cuda to the simulator.
"""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("ptx_check.py")


def test_every_kernel_signature_compiles_for_sm_90():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--cc", "9.0", "--cubin"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    compiled = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert len(compiled) == 24, done.stdout  # kernels x thetas (float64), x dtypes and index types
