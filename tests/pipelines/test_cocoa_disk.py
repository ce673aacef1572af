"""experiment=cocoa_disk end to end in this process (cluster=none: each part's shard in the cache's shards/
folder), tiny, without the Spark arm (tests/tasks/test_peer_spark.py covers it); the preset's plan on its
own cluster (data_access=disk) checked before any data. The workers' disks: tests/tasks/distributed_glm/
test_disk_replicas.py."""

import json
import re

import pytest
from mlflow.tracking import MlflowClient

from conftest import compose_config, family
from pipelines.glm import plan
from tasks.peers import missing_reason

pytestmark = pytest.mark.timeout(300)

TINY = ["cluster=none", "progress=false", "data.n_samples=1200", "data.n_features=64", "data.block_rows=256",
        "device.host_budget=48KB", "experiment.target_rel_gap=1e-5", "experiment.max_time=60",
        "~experiment.arms.peer_spark", "experiment.baselines=[duhl,k1,k2]"]


def test_the_preset_plans_its_arms_on_the_workers_disks():
    spark = missing_reason("peer_spark")  # None where the peers extra is installed
    if spark:  # without pyspark the Spark arm is named before any data is made; the rest plans
        with pytest.raises(ValueError, match=re.escape(f"Arm 'peer_spark': {spark}")):
            plan(compose_config("experiment=cocoa_disk"))
    cfg = compose_config("experiment=cocoa_disk",
                         *(["~experiment.arms.peer_spark", "experiment.baselines=[duhl,k1,k2]"] if spark else []))
    assert cfg.cluster.name == "local" and cfg.cluster.data_access == "disk" and cfg.cluster.n_workers == 4
    p = plan(cfg)
    assert set(p.arms) == {"k1", "k2", "k4", "duhl", *([] if spark else ["peer_spark"])} and p.main_arm == "k4"
    assert {p.arms[k]["n_parts"] for k in ("k1", "k2", "k4")} == {1, 2, 4}
    assert p.arms["k4"]["host_budget"] == p.arms["duhl"]["host_budget"] == "20MB"
    # the dataset is several times all the workers' host_budgets together
    assert cfg.data.n_samples * cfg.data.n_features * 8 >= 4 * 4 * 20e6


def test_the_preset_runs_and_every_part_reads_its_shard(experiment, capsys):
    result = experiment("experiment=cocoa_disk", *TINY)
    out = capsys.readouterr().out
    assert "shards of arm k4: 4" in out
    parent, arms = family(experiment.uri)
    assert set(arms) == set(result) == {"k1", "k2", "k4", "duhl"} and parent.info.status == "FINISHED"
    client = MlflowClient(experiment.uri)
    shard_bytes = 1200 * 64 * 8
    for name, run in arms.items():
        m = run.data.metrics
        assert run.info.status == "FINISHED" and m["reached_target"] == 1, name
        reads = client.get_metric_history(run.info.run_id, "bytes_disk")
        assert reads and reads[-1].value >= shard_bytes, name  # (every arm passes over all the data at least once)
        if name != "duhl":
            shards = json.loads(run.data.tags["shards"])
            K = int(run.data.params["solver.n_parts"])
            assert len(shards) == K and sum(s["bytes"] - 4096 for s in shards) == shard_bytes
            for k in range(K):
                assert client.get_metric_history(run.info.run_id, f"part{k}_bytes_disk")
