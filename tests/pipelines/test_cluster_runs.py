"""An experiment on a LocalCluster: while its arms run, every socket the run listens on
is on loopback (psutil: what the kernel has open); the log and the runs say where the
cluster listens and how the workers got the data (here shipped: data_access=scatter)."""

import psutil
import pytest

from conftest import family

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]
SMALL = ["experiment=cocoa", "data.n_samples=150", "data.n_features=30", "data.n_informative=5",
         "experiment.max_time=20", "experiment.target_rel_gap=1e-4", "progress=false", "cluster.memory_limit=0",
         "data.n_groups=1", *[f"~experiment.arms.{a}" for a in ("k2", "k2_safe", "k4", "k4_safe", "k4_compressed")],
         "+experiment.arms.k2_adding={n_parts:2}",
         "experiment.main_arm=k2_adding", "experiment.baselines=[k1]"]


def test_a_local_cluster_run_listens_on_loopback_and_says_how_data_reached_the_workers(experiment, capsys,
                                                                                         monkeypatch):
    import pipelines.glm as glm

    seen = []

    def watched(*args, **kwargs):  # the sockets of this process and its children while an arm runs
        me = psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            seen.extend((p.pid, c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet")
                        if c.status == psutil.CONN_LISTEN)
        return run_tracked_arm(*args, **kwargs)

    run_tracked_arm = glm.run_tracked_arm
    monkeypatch.setattr(glm, "run_tracked_arm", watched)
    experiment(*SMALL, "cluster.data_access=scatter")
    out = capsys.readouterr().out
    assert len({pid for pid, _, _ in seen}) >= 3  # this process and the two workers
    assert [s for s in seen if s[1] not in ("127.0.0.1", "::1")] == []
    assert "cluster local: scheduler tcp://127.0.0.1:" in out and "HTTP server http://127.0.0.1:" in out
    assert "data on the workers: scatter: the workers do not see" in out
    parent, arms = family(experiment.uri)
    assert parent.info.status == "FINISHED" and parent.data.tags["data_access"] == "scatter"
    # k1: the whole X in one part; k2: its own cut, each part shipped once
    shipped = {name: run.data.tags["data_shipped"].split(" parts")[0] for name, run in arms.items()}
    assert shipped == {"k1": "1", "k2_adding": "2"}
    assert all(run.data.tags["data_access"] == "scatter" for run in arms.values())
    assert "data shipped to the workers: 3 parts" in out
