"""DistBelief's model parallelism: a replica's step with K partitions against K = 1, side by side.

    python -m benchmarks.distbelief_model_parallel                  # large_k1, large_k2, small_k1, small_k2, 3 repeats
    python -m benchmarks.distbelief_model_parallel --arms all       # every arm of the preset (K = 4, 2 x 2 too)
    python -m benchmarks.distbelief_model_parallel --repeats 5 --steps-scale 2
    python -m benchmarks.distbelief_model_parallel --in-process     # each partition's work alone, no cluster
    python -m benchmarks.distbelief_model_parallel --ping-pong      # what a message between two workers costs

The arms are those of ``experiment=distbelief_model_parallel`` (composed from conf/, so the
data, the two model sizes, the minibatch and the rates are the preset's), run by
``tasks.distbelief.model_parallel.run_model_parallel`` on a LocalCluster of 2 worker processes
of one thread each (each partition pins BLAS to one thread with threadpoolctl; K = 1 runs on
one worker). Each run's first round is warm-up, left out; its step time is the median of its
other steps (a step takes as long as the replica's slowest partition). The arms are
interleaved (large_k1, large_k2, small_k1, small_k2, large_k1, ...) ``--repeats`` times so
that the load of a shared machine hits them alike; reported: each arm's median over the
repeats, and each K > 1 arm's step over its K = 1 arm's, per repeat and the median, with the
load average before and after. No MLflow: ``make reproduce`` and the preset log the curves.

``--in-process`` times, in this process with one BLAS thread and no cluster, each partition's
own work in a step (its fetch's copy, its phases with the messages routed in memory, its
gradient, Adagrad on its shard) and reports the slowest partition's: the step K partitions
would take if no message cost anything and none waited, the bound that communication and
the machine's load eat into.

``--ping-pong`` times round trips of one message between the cluster's first two workers, as a
partition sends it (a direct link, ``tasks.distbelief.links``) and as a Dask actor call: a
few bytes, and one phase's activations of the large model at K = 2 (minibatch x half of the
first hidden layer, 8-byte values). The median over ``--repeats`` x 100 round trips, the first
tenth of each left out.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipelines.config import register_configs
from pipelines.distbelief import plan
from pipelines.distbelief_steps import baseline_of
from pipelines.tracking import PROJECT_ROOT
from solvers.distbelief.partitions import Part, Partitioning
from solvers.distbelief.rules import make_rule
from tasks.cluster import connect
from tasks.data import load_dataset, resolve_path
from tasks.distbelief.common import build_model, data_spec
from tasks.distbelief.links import Links, worker_endpoint
from tasks.distbelief.model_parallel import run_model_parallel
from tasks.distbelief.partition import Inbox, reuse_freed_memory

DEFAULT_ARMS = ("large_k1", "large_k2", "small_k1", "small_k2")


def preset(overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=distbelief_model_parallel", *overrides])
    return cfg, plan(cfg)


def partition_work(model, n_partitions, batch_size, repeats, seed=0):
    """Each partition's own work in a step, timed in this process (the first step is warm-up,
    left out): the medians over ``repeats`` steps of the slowest partition's and of each one's."""
    from threadpoolctl import threadpool_limits

    partitioning = Partitioning(model, n_partitions)
    parts = [Part(partitioning, k) for k in range(n_partitions)]
    served = partitioning.split(model.init(seed))  # the shards' vectors
    rules = [make_rule("adagrad", w.size, 1e-3) for w in served]
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((batch_size, model.sizes[0]))
    y = np.where(rng.standard_normal(batch_size) > 0, 1.0, -1.0)
    times = np.zeros((repeats + 1, n_partitions))
    with threadpool_limits(limits=1, user_api="blas"):
        for step in range(repeats + 1):
            for k, part in enumerate(parts):
                t0 = time.perf_counter()
                part.start(served[k].copy(), X, y)
                times[step, k] += time.perf_counter() - t0
            inbox = {}
            for phase in partitioning.phases():
                outgoing = {}
                for part in parts:
                    t0 = time.perf_counter()
                    received = {j: inbox.pop((part.k, j)) for j in partitioning.senders(phase, part.k)}
                    for receiver, message in part.run(phase, received).items():
                        outgoing[(receiver, part.k)] = message
                    part.settle()
                    times[step, part.k] += time.perf_counter() - t0
                inbox.update(outgoing)
            for k, part in enumerate(parts):
                t0 = time.perf_counter()
                rules[k].apply(served[k], part.finish()[1])
                times[step, k] += time.perf_counter() - t0
    return float(np.median(times[1:].max(axis=1))), np.median(times[1:], axis=0).tolist()


def in_process(names, p, n_features, batch_size, repeats):
    print(f"\n### Model parallelism: each partition's own work in a step, in one process, one BLAS thread "
          f"(median of {repeats} steps; {time.strftime('%Y-%m-%d %H:%M')}; load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())})\n")
    print("| arm | parameters | K | slowest partition (ms) | each partition (ms) | vs K = 1 |")
    print("|---|---:|---:|---:|---|---:|")
    slowest = {}
    for name in names:
        arm = p["arms"][name]
        model = build_model(arm.get("model", p["model"]), n_features, 1)
        slowest[name], each = partition_work(model, arm["n_partitions"], arm.get("batch_size", batch_size), repeats)
        base = baseline_of(name, {n: p["arms"][n] for n in names})
        vs = f"{slowest[name] / slowest[base]:.2f}x" if base and base != name and base in slowest else "-"
        print(f"| {name} | {model.n_params:,} | {arm['n_partitions']} | {slowest[name] * 1e3:.1f} | "
              f"{[round(t * 1e3, 1) for t in each]} | {vs} |", flush=True)


def ping_pong(key, me, peer, peer_address, n, nbytes, via):
    """Worker ``me`` of two: ``n`` round trips of an ``nbytes`` message with the other, ``via``
    "links" or "actor"; the median round trip in seconds, the first tenth left out."""
    from distributed import get_worker, secede

    secede()
    reuse_freed_memory()  # as a partition does: a received array is then not mapped afresh each time
    box = get_worker().state.actors[key]  # the Inbox actor on this worker
    message = np.ones((1, max(1, nbytes // 8)))
    link = Links(me, [peer_address if j != me else None for j in range(2)], 30.0, tls=worker_endpoint()[2]) \
        if via == "links" else None

    def send(i):
        if link is not None:
            link.send(1 - me, i, "p", message)
        else:
            peer.put((i, "p", me), message)

    times = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            if me == 0:
                send(i)
                box.take((i, "p", 1), 30.0)
            else:
                box.take((i, "p", 0), 30.0)
                send(i)
            times.append(time.perf_counter() - t0)
    finally:
        if link is not None:
            link.close()
    return float(np.median(times[n // 10:]))


def ping_pongs(client, sizes, repeats, n=100):
    """{(nbytes, via): [median round trip (s) of each repeat]} between the first two workers."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])[:2]
    if len(workers) < 2:
        raise SystemExit("Error: --ping-pong needs a cluster of at least 2 workers.")
    token = f"{time.time_ns():x}"
    keys = [f"ping-pong-{token}-{k}" for k in range(2)]
    futures = [client.submit(Inbox, key, actor=True, workers=[w], pure=False, key=key) for key, w in zip(keys, workers)]
    boxes = [f.result() for f in futures]
    addresses = [box.endpoint().result() for box in boxes]
    got = {}
    try:
        for _ in range(repeats):
            for nbytes in sizes:
                for via in ("links", "actor"):
                    tasks = [client.submit(ping_pong, keys[k], k, boxes[1 - k], addresses[1 - k], n, nbytes, via,
                                           workers=[workers[k]], allow_other_workers=False, pure=False)
                             for k in range(2)]
                    got.setdefault((nbytes, via), []).append(tasks[0].result(timeout=120))
                    tasks[1].result(timeout=120)
    finally:
        for box in boxes:
            box.close().result()
        client.cancel(futures)
    return got


def report_ping_pongs(got, repeats):
    print(f"\n### A message between two workers: round trip ({repeats} repeats of 100; "
          f"{time.strftime('%Y-%m-%d %H:%M')}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())})\n")
    print("| message (bytes) | direct link (ms) | Dask actor call (ms) | actor over link |")
    print("|---:|---:|---:|---:|")
    for nbytes in sorted({nbytes for nbytes, _ in got}):
        link, actor = statistics.median(got[(nbytes, "links")]), statistics.median(got[(nbytes, "actor")])
        print(f"| {nbytes:,} | {link * 1e3:.3f} | {actor * 1e3:.3f} | {actor / link:.1f}x |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help="arm names of the preset, or 'all'")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply each arm's max_steps")
    parser.add_argument("--out", default=None, help="write the numbers as JSON here")
    parser.add_argument("--in-process", action="store_true",
                        help="time each partition's own work in this process instead (no cluster, no messages' cost)")
    parser.add_argument("--ping-pong", action="store_true",
                        help="time a message's round trip between two workers, over a link and as an actor call")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the preset (e.g. model.hidden=[1024,1024])")
    args = parser.parse_args()
    cfg, p = preset(args.overrides)
    names = list(p["arms"]) if args.arms == "all" else args.arms.split(",")
    unknown = sorted(set(names) - set(p["arms"]))
    if unknown:
        raise SystemExit(f"Error: arm(s) {unknown} are not in the preset: {sorted(p['arms'])}")
    if args.in_process:
        in_process(names, p, cfg.data.n_features, p["settings"]["batch_size"], max(5, 2 * args.repeats + 1))
        return
    if args.ping_pong:
        batch, width = p["settings"]["batch_size"], list(p["model"]["hidden"])[0]
        with connect(OmegaConf.to_container(cfg.cluster, resolve=True)) as client:
            report_ping_pongs(ping_pongs(client, [64, batch * (width // 2) * 8], args.repeats), args.repeats)
        return
    dataset = load_dataset(p["data"], resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT)
    db = p["settings"]
    spec = data_spec(dataset, db["test_fraction"], db["shuffle_seed"])
    load_before = os.getloadavg()
    started = time.perf_counter()
    steps = {name: [] for name in names}
    parts = {name: {"wait_s": [], "ps_s": []} for name in names}  # a step's waiting for peers, with the shards
    counters = {}
    with connect(OmegaConf.to_container(cfg.cluster, resolve=True)) as client:
        for repeat in range(args.repeats):
            for name in names:
                kwargs = dict(p["arms"][name])
                kwargs.pop("algo")
                model = kwargs.pop("model", p["model"])
                kwargs["max_steps"] = max(2 * kwargs["steps_per_round"],
                                          round(kwargs["max_steps"] * args.steps_scale))
                kwargs["max_time"] = 10 * kwargs["max_time"]  # the steps end an arm, not the clock
                result = run_model_parallel(client, spec, model, **kwargs)
                steps[name].append(result.counters["step_s"])
                measured = result.trace[result.trace["warmup"] == 0]
                for column in parts[name]:
                    parts[name][column].append(float(measured[column].median()))
                counters[name] = result.counters
                print(f"repeat {repeat + 1}/{args.repeats} {name}: step {result.counters['step_s'] * 1e3:.1f} ms "
                      f"(median of {result.counters['steps_measured']}), load {os.getloadavg()[0]:.2f}", flush=True)
    load_after = os.getloadavg()
    rows = []
    for name in names:
        base = baseline_of(name, {n: p["arms"][n] for n in names})
        ratios = [s / b for s, b in zip(steps[name], steps[base])] if base and base != name else []
        c = counters[name]
        rows.append({"arm": name, "parameters": build_model(p["arms"][name].get("model", p["model"]),
                                                           spec.n_features, 1).n_params,
                     "K": c["n_partitions"], "R": c["n_replicas"],
                     "step_ms": statistics.median(steps[name]) * 1e3,
                     "step_ms_each": [round(s * 1e3, 1) for s in steps[name]],
                     "vs_K1": statistics.median(ratios) if ratios else None,
                     "vs_K1_each": [round(r, 3) for r in ratios], "samples_per_s": c["samples_per_s"],
                     "wait_ms": statistics.median(parts[name]["wait_s"]) * 1e3,
                     "ps_ms": statistics.median(parts[name]["ps_s"]) * 1e3,
                     "MB_per_step": c["bytes_per_step"] / 1e6, "MB_predicted": c["bytes_per_step_predicted"] / 1e6,
                     "steps_measured": c["steps_measured"], "blas_threads": c["blas_threads"]})
    print(f"\n### Model parallelism: one replica's step ({args.repeats} repeats, arms interleaved; "
          f"{time.strftime('%Y-%m-%d %H:%M')})\n")
    print(f"{platform.node()}, {os.cpu_count()} cores; load average (1, 5, 15 min) "
          f"{', '.join(f'{x:.2f}' for x in load_before)} before, {', '.join(f'{x:.2f}' for x in load_after)} after; "
          f"{time.perf_counter() - started:.0f}s\n")
    print("| arm | parameters | K | R | step (ms), median | each repeat | vs K = 1, median | each repeat | "
          "waiting for peers (ms) | with the shards (ms) | samples/s | MB sent/step (predicted) |")
    print("|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        vs = f"{r['vs_K1']:.2f}x" if r["vs_K1"] is not None else "-"
        print(f"| {r['arm']} | {r['parameters']:,} | {r['K']} | {r['R']} | {r['step_ms']:.1f} | {r['step_ms_each']} | "
              f"{vs} | {r['vs_K1_each'] or '-'} | {r['wait_ms']:.1f} | {r['ps_ms']:.1f} | {r['samples_per_s']:.0f} | "
              f"{r['MB_per_step']:.3f} ({r['MB_predicted']:.3f}) |")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rows": rows, "load_before": load_before, "load_after": load_after,
                                   "repeats": args.repeats, "overrides": args.overrides}, indent=1))
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
