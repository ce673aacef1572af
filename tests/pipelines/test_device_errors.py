"""device=cuda without a GPU: one line, exit code 2, no MLflow run left RUNNING."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _has_gpu():
    from solvers.duhl.devices import NoCudaDevice, check_device

    try:
        check_device("cuda")
    except NoCudaDevice:
        return False
    return True


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present")
def test_cuda_without_gpu_exits_2_with_one_line(tmp_path):
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    proc = subprocess.run([sys.executable, "-m", "pipelines.experiment", "device=cuda",
                           f"hydra.run.dir={tmp_path}/out"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and "no CUDA device found: use device=cpu or device=cuda_sim" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    if db.exists():  # the check runs before any run is opened
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{db}")
        runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
        assert all(r.info.status != "RUNNING" for r in runs)
