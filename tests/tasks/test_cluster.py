"""tasks.cluster: a LocalCluster listens on loopback only (checked with psutil, the
oracle of what the kernel has open), TLS settings of cluster=remote are checked before
anything starts, the SLURM job script renders without SLURM, a lost scheduler is one
ClusterLost line, a worker whose nanny the cluster gave up on is replaced."""

import math
import os
import signal
import time
from pathlib import Path

import dask
import distributed  # noqa: F401 (its config defaults)
import psutil
import pytest
from dask.utils import parse_timedelta

from tasks.cluster import (ClusterLost, cluster_lost_as_error, connect, describe, job_script, restore_workers,
                           security, validate_cluster_config)

LOOPBACK = ("127.0.0.1", "::1")


def listening(pids):
    """(ip, port) of every listening TCP socket of these processes."""
    found = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found += [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_local_cluster_listens_on_loopback_only_and_says_where():
    me = psutil.Process()
    before = set(listening([me.pid]))
    patience_before = parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout"))
    with connect({"name": "local", "n_workers": 2, "memory_limit": 0, "timeout_s": 60}) as client:
        pids = [me.pid] + [p.pid for p in me.children(recursive=True)]
        opened = [s for s in listening(pids) if s not in before]
        info = describe(client)
        patience = dask.config.get("distributed.deploy.lost-worker-timeout")  # a nanny's restart gets timeout_s
    assert parse_timedelta(patience) == max(60, patience_before)  # and as it was after
    assert parse_timedelta(dask.config.get("distributed.deploy.lost-worker-timeout")) == patience_before
    # scheduler, its HTTP server, 2 nannies, 2 workers (each with an HTTP server)
    assert len(opened) >= 6, opened
    assert [s for s in opened if s[0] not in LOOPBACK] == []
    assert info["scheduler"].startswith("tcp://127.0.0.1:") and len(info["workers"]) == 2
    assert all(w.startswith("tcp://127.0.0.1:") for w in info["workers"])
    assert info["http"] and all(h.startswith("http://127.0.0.1:") for h in info["http"])
    assert {int(h.rsplit(":", 1)[1]) for h in info["http"]} <= {port for _, port in opened}


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))
    return True


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("on", [True, False])
def test_worker_profile_false_keeps_no_profile_history_in_the_workers(on):
    """cluster.worker_profile: Dask's profiler samples every worker thread and keeps a profile a
    second (cycle) for an hour: with it off (cluster=local_disk, whose workers' RAM is budgeted)
    a worker that has computed for 2.5 s holds no history; with it on (the default) it does. A
    worker started later (as restore_workers replaces a lost one) has the same setting."""
    settings = {"name": "local", "n_workers": 1, "memory_limit": 0, "timeout_s": 60, "worker_profile": on}
    with dask.config.set({"distributed.worker.profile.cycle": "200ms"}):
        with connect(settings) as client:
            assert client.submit(_busy, 2.5, pure=False).result()
            time.sleep(0.5)
            history = client.run(lambda dask_worker: len(dask_worker.profile_history))
            client.cluster.scale(2)
            client.wait_for_workers(2, timeout=60)
            enabled = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
    assert list(enabled.values()) == [on, on]
    assert (list(history.values())[0] > 0) == on, history
    assert dask.config.get("distributed.worker.profile.enabled") is True  # this process's as it was


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_worker_whose_nanny_the_cluster_gave_up_on_is_replaced(dask_client):
    """CI's flake made certain: a worker killed while Dask's lost-worker-timeout is shorter than its
    nanny's restart (15 s by default; a loaded machine) has its nanny closed by the cluster: it never
    comes back. restore_workers starts a fresh one (the scheduler counts the workers that run)."""
    client = dask_client
    victim, info = sorted(client.scheduler_info(n_workers=-1)["workers"].items())[0]
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "0s"}):
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while info["name"] in client.cluster.workers:  # the cluster closes the restarting nanny
            assert time.monotonic() < deadline, "the cluster kept the nanny"
            time.sleep(0.05)
    with pytest.raises(TimeoutError):
        client.wait_for_workers(2, timeout=0.2)
    restore_workers(client, 2, timeout_s=60, patience_s=0.2)
    running = client.scheduler_info(n_workers=-1)["workers"]
    assert [w["status"] for w in running.values()] == ["running", "running"] and victim not in running


def test_a_dashboard_port_alone_binds_the_configured_host():
    from tasks.cluster import _http_kwargs

    assert _http_kwargs("127.0.0.1", ":8787") == {"dashboard_address": "127.0.0.1:8787"}
    assert _http_kwargs("10.0.0.5", "0.0.0.0:8787") == {"dashboard_address": "0.0.0.0:8787"}  # asked for
    assert _http_kwargs("127.0.0.1", None)["scheduler_kwargs"]["dashboard_address"] == "127.0.0.1:0"


@pytest.fixture
def pem(tmp_path):
    files = {}
    for name in ("ca", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text("-----BEGIN-----\n")
    return files


REMOTE = {"name": "remote", "address": "tls://10.0.0.1:8786"}


@pytest.mark.parametrize("change,message", [
    ({"tls_ca_file": "ca"}, "The 'tls_client_cert' parameter of cluster 'remote' must be the path of an existing "
                            "file when any tls_* file is set. Got None instead."),
    ({"tls_ca_file": "/nope/ca.pem"}, "The 'tls_ca_file' parameter of cluster 'remote' must be None or the path of an "
                                      "existing file. Got '/nope/ca.pem' instead."),
    ({"address": "tcp://10.0.0.1:8786", "tls_ca_file": "ca", "tls_client_cert": "cert", "tls_client_key": "key"},
     "The 'address' parameter of cluster 'remote' must start with 'tls://' when the tls_* files are set. "
     "Got 'tcp://10.0.0.1:8786' instead."),
    ({}, "The 'tls_ca_file' parameter of cluster 'remote' must be the path of an existing file for the address "
         "'tls://10.0.0.1:8786'"),
    ({"data_access": "nfs", "address": "tcp://h:1"}, "The 'data_access' parameter of cluster 'remote' must be one "
                                                     "of ('auto', 'mmap', 'scatter', 'disk'). Got 'nfs' instead."),
])
def test_bad_remote_settings_are_one_line_errors(pem, change, message):
    cfg = {**REMOTE, **{k: str(pem.get(v, v)) for k, v in change.items()}}
    with pytest.raises(ValueError) as error:
        validate_cluster_config(cfg)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_tls_files_make_a_security_that_requires_encryption(pem):
    c = validate_cluster_config({**REMOTE, "tls_ca_file": str(pem["ca"]), "tls_client_cert": str(pem["cert"]),
                                 "tls_client_key": str(pem["key"])})
    sec = security(c)
    assert sec.require_encryption and sec.tls_ca_file == str(pem["ca"])
    assert (sec.tls_client_cert, sec.tls_client_key) == (str(pem["cert"]), str(pem["key"]))
    assert security(validate_cluster_config({"name": "remote", "address": "tcp://h:1"})) is None


@pytest.mark.timeout(60)
def test_an_unreachable_scheduler_is_one_line(tmp_path):
    with pytest.raises(ConnectionError) as error:
        with connect({"name": "remote", "address": "tcp://127.0.0.1:9", "timeout_s": 2}):
            pass
    assert str(error.value).startswith("Could not reach the dask scheduler at 'tcp://127.0.0.1:9' (waited up to 2s): ")
    assert "\n" not in str(error.value)


def test_errors_of_a_lost_scheduler_become_one_cluster_lost_line():
    class Client:
        status = "connecting"

        class scheduler:
            address = "tcp://10.0.0.1:8786"

    with pytest.raises(ClusterLost) as error:
        with cluster_lost_as_error(Client):
            raise RuntimeError("x cancelled for reason: scheduler-connection-lost.\nClient lost the connection")
    assert str(error.value) == ("lost the dask scheduler at tcp://10.0.0.1:8786 (client connecting; RuntimeError: "
                                "x cancelled for reason: scheduler-connection-lost.)")
    Client.status = "running"
    with pytest.raises(KeyError):  # any other error passes through
        with cluster_lost_as_error(Client):
            raise KeyError("mine")


@pytest.mark.timeout(120)
def test_slurm_job_script_renders_without_slurm():
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is in the dev extra: pip install -e .[dev]")
    script = job_script({"name": "slurm", "queue": "compute", "account": "duhl", "cores": 4, "processes": 1,
                         "memory": "16GB", "walltime": "01:00:00", "python": "python", "local_directory": "$TMPDIR",
                         "job_script_prologue": ["source ~/duhl-lab/.venv/bin/activate"], "interface": "lo"})
    lines = script.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    for directive in ("#SBATCH -p compute", "#SBATCH -A duhl", "#SBATCH -n 1", "#SBATCH --cpus-per-task=4",
                      "#SBATCH -t 01:00:00"):
        assert directive in lines, (directive, script)
    # 16 GB = 14.90 GiB: SLURM's --mem in whole GiB rounded up, the worker's limit to 2 decimals
    gib = 16e9 / 2**30
    assert f"#SBATCH --mem={math.ceil(gib)}G" in lines and f"--memory-limit {gib:.2f}GiB" in script
    assert "source ~/duhl-lab/.venv/bin/activate" in lines
    worker = lines[-1].split()
    assert worker[:3] == ["python", "-m", "distributed.cli.dask_worker"] and worker[3].startswith("tcp://127.0.0.1:")
    for option in (["--nthreads", "4"], ["--local-directory", "$TMPDIR"], ["--nanny"]):
        assert any(worker[i:i + len(option)] == option for i in range(len(worker))), (option, worker)
    with pytest.raises(ValueError, match="'name' parameter of cluster must be 'slurm'"):
        job_script({"name": "local"})


def test_the_slurm_preset_renders_its_defaults():
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is in the dev extra: pip install -e .[dev]")
    from hydra import compose, initialize_config_dir

    from pipelines.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["cluster=slurm", "cluster.interface=lo"])
    script = job_script(cfg.cluster)
    assert "#SBATCH --cpus-per-task=4" in script and "#SBATCH -t 01:00:00" in script
