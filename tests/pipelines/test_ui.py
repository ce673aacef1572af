"""`make ui` serves the experiment store; its runs are found through the REST API."""

import os
import signal
import socket
import subprocess
import time

import pytest
import requests

from conftest import PROJECT_ROOT
from pipelines.tracking import Tracker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_make_ui_serves_the_runs(tmp_path):
    db = tmp_path / "mlflow.db"
    tracker = Tracker(f"sqlite:///{db}", "ui-test")
    with tracker.run("parent") as parent_id:
        with tracker.run("duhl-gap", parent_id) as arm_id:
            tracker.log_metrics(arm_id, {"rel_gap": 1e-6})
    port = free_port()
    server = subprocess.Popen(["make", "--no-print-directory", "ui", f"PORT={port}", f"MLFLOW_DB={db}"],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)  # its own process group: stopped as one below
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{base}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert server.poll() is None, server.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the UI did not start in 120 s"
            time.sleep(1)
        experiment = requests.get(f"{base}/api/2.0/mlflow/experiments/get-by-name",
                                  params={"experiment_name": "ui-test"}, timeout=10).json()["experiment"]
        runs = requests.post(f"{base}/api/2.0/mlflow/runs/search",
                             json={"experiment_ids": [experiment["experiment_id"]]}, timeout=10).json()["runs"]
        assert {r["info"]["run_id"] for r in runs} == {parent_id, arm_id}
        arm = next(r for r in runs if r["info"]["run_id"] == arm_id)
        assert {"key": "mlflow.parentRunId", "value": parent_id} in arm["data"]["tags"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
