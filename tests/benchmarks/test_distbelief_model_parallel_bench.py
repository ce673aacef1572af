"""benchmarks.distbelief_model_parallel on tiny models: it runs the preset's arms interleaved,
writes its table and JSON, and the bytes it reports are the count the layer widths give."""

import json
import statistics
import sys

import pytest

import benchmarks.distbelief_model_parallel as bench

TINY = ["data.n_samples=400", "data.n_features=8", "data.n_informative=4", "model.hidden=[6,6]",
        "experiment.arms.small_k1.model.hidden=[4,4]", "experiment.arms.small_k2.model.hidden=[4,4]",
        *[f"experiment.arms.{a}.{k}={v}" for a in ("large_k1", "large_k2", "small_k1", "small_k2")
          for k, v in (("steps_per_round", 2), ("max_steps", 4))]]


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_the_bench_runs_the_arms_and_reports_steps_against_one_partition(dask_client, tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench.json"
    monkeypatch.setattr(sys, "argv", ["bench", "--repeats", "2", "--out", str(out), *TINY, "cluster=remote",
                                      f"cluster.address={dask_client.scheduler.address}",
                                      f"cache_dir={tmp_path / 'cache'}"])
    bench.main()
    table = capsys.readouterr().out
    assert "### Model parallelism: one replica's step (2 repeats" in table
    rows = {r["arm"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(bench.DEFAULT_ARMS)
    for name, r in rows.items():
        assert len(r["step_ms_each"]) == 2 and r["step_ms"] > 0 and r["steps_measured"] == 2
        assert r["blas_threads"] == [1] and f"| {name} |" in table
    # K = 2 sends layer 1's activations forward and gradients back, and each partition's share of the
    # logit to the other: 8 bytes x 64 rows x (2 h_1 + 2)
    assert rows["large_k2"]["MB_per_step"] == rows["large_k2"]["MB_predicted"] == 8 * 64 * (2 * 6 + 2) / 1e6
    assert rows["small_k2"]["MB_per_step"] == 8 * 64 * (2 * 4 + 2) / 1e6
    assert rows["large_k1"]["MB_per_step"] == 0 and rows["large_k1"]["vs_K1"] is None
    each = rows["large_k2"]["vs_K1_each"]
    assert len(each) == 2 and rows["large_k2"]["vs_K1"] == pytest.approx(statistics.median(each), abs=1e-3)
    assert rows["large_k1"]["parameters"] == 8 * 6 + 6 + 6 * 6 + 6 + 6 + 1


def test_in_process_times_every_partitions_work_without_a_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench", "--in-process", "--arms", "large_k1,large_k2,large_k4", *TINY,
                                      "model.hidden=[8,8]", "cluster=remote", "cluster.address=tcp://0.0.0.0:1",
                                      f"cache_dir={tmp_path / 'cache'}"])
    bench.main()  # an address nobody listens on: the in-process times need no cluster
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| large_k")}
    assert set(rows) == {"large_k1", "large_k2", "large_k4"}
    for name, K in (("large_k1", 1), ("large_k2", 2), ("large_k4", 4)):
        each = json.loads(rows[name][4])
        assert rows[name][2] == str(K) and len(each) == K and all(t > 0 for t in each)
        assert float(rows[name][3]) >= max(each) - 0.05  # the slowest partition's step, each rounded to 0.1 ms
    assert rows["large_k1"][5].strip(" |") == "-" and rows["large_k2"][5].strip(" |").endswith("x")


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ping_pong_times_a_round_trip_over_a_link_and_as_an_actor_call(dask_client, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench", "--ping-pong", "--repeats", "1", *TINY, "cluster=remote",
                                      f"cluster.address={dask_client.scheduler.address}"])
    bench.main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and
            line[2].isdigit()]
    # a few bytes, and a phase's activations at K = 2: 64 rows x half of the 6 units x 8 bytes
    assert [r[0].strip("| ") for r in rows] == ["64", f"{64 * 3 * 8:,}"]
    for r in rows:
        link, actor = float(r[1]), float(r[2])
        assert 0 < link and 0 < actor  # the ratio, of the unrounded times:
        assert float(r[3].strip(" |x")) == pytest.approx(actor / link, rel=0.01, abs=0.1)
