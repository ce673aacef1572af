"""Start-up cost of getting the data onto the workers: shipped from the driver
(``data_access=scatter``) vs memory-mapped from the cache (``mmap``), on the default presets.

    python -m benchmarks.data                 # make bench-data; --reps 5, --presets cocoa,duhl
    python -m benchmarks.data --address tcp://10.0.0.1:8786   # a running cluster (its workers)

For each preset at its default size, the parts its arms give the workers, cut as the
arms cut them (CoCoA+: K = 1, 2, 4 feature parts; DIANA: 4 row shards; DistBelief: 2
Downpour replicas and Sandblaster's 8 units; the DuHL arm: the whole dataset), placed
round-robin on a LocalCluster of 2 worker processes. Timed from the driver: every part
delivered (scatter: the driver slices, copies and ships it) and read once on its
worker (a sum over every byte, so a memory map's pages are really read). ``mmap`` is
timed warm (pages in the page cache, as right after the driver made the data) and cold
(pages dropped with posix_fadvise first: a fresh host; a hypervisor may still cache).
Medians (min-max) of ``--reps`` repeats, modes interleaved; one untimed warm-up round.
With ``--address``, the workers of that scheduler (only ``scatter`` where they do not see
the cache).
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipelines.config import register_configs
from pipelines.tracking import PROJECT_ROOT
from solvers.distbelief.sandblaster import unit_ranges
from solvers.distributed_glm.cocoa import partition
from solvers.distributed_glm.diana import shard_rows
from tasks.cluster import connect
from tasks.data import load_dataset, resolve_path
from tasks.distbelief.common import data_spec, load_rows
from tasks.parts import DataParts, choose_access, columns, materialize, rows, whole

PRESETS = {"cocoa": "experiment=cocoa", "diana": "experiment=diana", "distbelief": "experiment=distbelief",
           "duhl": "experiment=default"}


def touch(ref) -> float:
    """On a worker: the part, every byte read once (a sum)."""
    def total(value):
        if isinstance(value, (tuple, list)):
            return sum(total(v) for v in value)
        if sp.issparse(value):
            return float(value.data.sum())
        return float(np.asarray(value).sum()) if isinstance(value, np.ndarray) else 0.0

    return total(materialize(ref))


def preset_parts(name, cfg, ds):
    """(fn, args) of every part the preset's arms hand to workers."""
    path = str(ds.path)
    if name == "cocoa":
        ks = sorted({arm.get("n_parts", 2) for arm in OmegaConf.to_container(cfg.experiment.arms).values()})
        return [(columns, (path, lo, hi)) for k in ks for lo, hi in partition(ds.shape[1], k)]
    if name == "diana":
        return [(rows, (path, lo, hi)) for lo, hi in shard_rows(ds.shape[0], cfg.solver.n_workers)]
    if name == "distbelief":
        db = cfg.experiment.distbelief
        spec = data_spec(ds, db.test_fraction, db.shuffle_seed)
        model = cfg.model.name
        ranges = [spec.replica_rows(k, 2) for k in range(2)] + unit_ranges(spec.n_train, 4 * 2)
        return [(load_rows, (spec, model, lo, hi)) for lo, hi in ranges]
    return [(whole, (path,))]


def drop_page_cache(folder: Path) -> None:
    for f in folder.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def deliver(client, ds, parts_spec, access, workers):
    """Seconds until every part is on its worker and read there; bytes shipped."""
    if access == "mmap-cold":
        drop_page_cache(ds.path)
    parts = DataParts(client, ds.path, "scatter" if access == "scatter" else "mmap")
    start = time.perf_counter()
    futures = []
    for i, (fn, args) in enumerate(parts_spec):
        worker = workers[i % len(workers)]
        futures.append(client.submit(touch, parts.ref(fn, *args, worker=worker), workers=[worker], pure=False))
    client.gather(futures)
    seconds = time.perf_counter() - start
    shipped = parts.stats["bytes"]
    del futures
    parts.release()
    while sum(client.run(lambda dask_worker: len(dask_worker.data)).values()):  # freed before the next repeat
        time.sleep(0.02)
    return seconds, shipped


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--address", default=None, help="a running scheduler (default: a LocalCluster of 2 workers)")
    args = ap.parse_args(argv)
    register_configs()
    print(f"load average at start {os.getloadavg()}, {os.cpu_count()} CPUs")
    results = []
    cluster = {"name": "remote", "address": args.address} if args.address else \
        {"name": "local", "n_workers": 2, "threads_per_worker": 1, "memory_limit": 0}
    with connect(cluster) as client:
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        print(f"workers: {workers}")
        for name in args.presets.split(","):
            with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
                cfg = compose(config_name="config", overrides=[PRESETS[name]])
            data = OmegaConf.to_container(cfg.data, resolve=True)
            ds = load_dataset(data, resolve_path(cfg.cache_dir, PROJECT_ROOT), PROJECT_ROOT)
            spec = preset_parts(name, cfg, ds)
            seen = choose_access(client, ds.path, "auto") == "mmap"
            modes = ("mmap-warm", "mmap-cold", "scatter") if seen else ("scatter",)
            for mode in modes:  # warm-up: imports, first tasks, the driver's own page cache
                deliver(client, ds, spec, mode, workers)
            times, shipped = {m: [] for m in modes}, 0
            for _ in range(args.reps):
                for mode in modes:
                    seconds, nbytes = deliver(client, ds, spec, mode, workers)
                    times[mode].append(seconds)
                    shipped = max(shipped, nbytes)
            med = {m: statistics.median(t) for m, t in times.items()}
            results.append({"preset": name, "data": f"{ds.shape[0]}x{ds.shape[1]} {ds.nbytes / 1e6:.1f} MB",
                            "parts": len(spec), "shipped MB": round(shipped / 1e6, 1),
                            **{f"{m} s": f"{med[m]:.3f} ({min(t):.3f}-{max(t):.3f})" for m, t in times.items()},
                            **({"scatter / mmap-warm": round(med["scatter"] / med["mmap-warm"], 1),
                                "scatter / mmap-cold": round(med["scatter"] / med["mmap-cold"], 1)} if seen else
                               {"MB/s shipped": round(shipped / 1e6 / med["scatter"])})})
            print(results[-1], flush=True)
    keys = list(results[0])
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in results:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    print(f"\nload average at end {os.getloadavg()}; medians of {args.reps} (min-max); "
          "to be re-measured on a quiet machine")


if __name__ == "__main__":
    main()
