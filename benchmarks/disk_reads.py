"""Read throughput of the disk tier: gap-chosen coordinates of a store on disk, as a share of the
disk's cold sequential bandwidth measured here (issue 14: at least 80% while reading).

    python -m benchmarks.disk_reads                        # both presets' stores, ~1.5 GB read each
    python -m benchmarks.disk_reads --paths my/X_rows.npy --densities 0.02 --trials 9
    python -m benchmarks.disk_reads --settings 4:8:0,16:2:0,16:2:1
    python -m benchmarks.disk_reads --stores svm --busy 2   # beside two compute threads, as in a solve
    python -m benchmarks.disk_reads --paths X_rows.npy --pair X_rows_padded.npy --settings 16:2:0

Stores: the out_of_core preset's Lasso X.npy (a feature per coordinate: 320 KB columns) and the
out_of_core_svm preset's sample-major copy (a sample per coordinate: 40 KB rows; the cache writes
it once if it has none), or the .npy files ``--paths`` names. The datasets are used as the cache
holds them (never made or checked here unless missing: a check reads every byte).

Per store: the cold sequential rate (tasks.resources.cold_read_bandwidth: the number the
experiments print beside their arms), then per pattern and per reader setting the rate of
reading a set of ``--set-mb`` of coordinates through solvers.storage.reader.DiskMatrix (O_DIRECT: no
page cache). Every trial also reads 64 MB of adjacent coordinates at a random place as
cold_read_bandwidth reads them (DiskMatrix's defaults): the disk's sequential rate at that
moment, the denominator of the shares (one measurement at the start is at the mercy of a
shared disk). A pattern is a density: the wanted coordinates' share of the span of the file they
come from (2%: scattered over the whole file, as gap-chosen swaps read; 25-75%: a window of the
stale list, as a gap refresh reads it, the rest being in RAM or proven). A setting is
``threads:request_MB:hole_rows`` (DiskMatrix's threads, max_request, and max_hole in rows: holes
up to that many rows are read through and dropped). Each trial picks a fresh set and reads it
with every setting (and the sequential read), in an order rotated per trial; the table gives
medians over trials: useful GB/s (the coordinates' bytes), disk GB/s (holes and alignment
included), useful and disk rates as a share of the same trial's sequential rate, requests per set, bytes read per useful byte, and the median
per-trial speed-up over the first setting (its seconds over theirs, on the same set). The OS's count of bytes read (/proc/self/io) is printed
beside the readers' own. ``--busy N`` runs N compute threads (a Numba loop without the GIL, as
the device's epochs and the host's gap kernel are) beside every read, sequential ones included:
in a solve the reader shares the cores with them, and on 2 cores its threads then wait for a
core after each request. Keep runs short: the disk is shared.
"""

import argparse
import os
import statistics
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.common import print_table
from pipelines.config import register_configs
from pipelines.tracking import PROJECT_ROOT
from solvers.storage.reader import DiskMatrix, aligned_empty
from tasks.data import load_dataset, resolve_path
from tasks.data.cache import cache_key
from tasks.problems import on_disk_path
from tasks.resources import cold_read_bandwidth, os_read_bytes

PRESETS = {"lasso": ("experiment=out_of_core", "lasso"), "svm": ("experiment=out_of_core_svm", "svm")}


def preset_store(name, cache_dir) -> Path:
    """The file the preset's arms read from disk (its dataset made first only if the cache has none)."""
    override, model = PRESETS[name]
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[override])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    cache = Path(cache_dir) if cache_dir else resolve_path(cfg.cache_dir, PROJECT_ROOT)
    folder = cache / cache_key(data, PROJECT_ROOT)
    if not folder.exists():
        print(f"{name}: making the preset's dataset in the cache first")
        folder = load_dataset(data, cache, PROJECT_ROOT).path
    return on_disk_path(model, folder)


@contextmanager
def busy_threads(n):
    """``n`` threads computing (no GIL held) until the block ends."""
    if n <= 0:
        yield
        return
    from numba import njit

    @njit(nogil=True, cache=False)
    def spin(x, repeats):
        total = 0.0
        for _ in range(repeats):
            for i in range(x.size):
                total += x[i] * x[i]
        return total

    x, stop = np.ones(1 << 16), threading.Event()
    spin(x, 1)  # compiled before the reads start

    def work():
        while not stop.is_set():
            spin(x, 100)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def parse_setting(text):
    threads, request_mb, hole_rows = text.split(":")
    return int(threads), int(float(request_mb) * (1 << 20)), int(hole_rows)


def pick(n, k, density, rng):
    """k distinct coordinates (sorted) spread over a span of k / density of the n."""
    span = min(n, max(k, int(round(k / density))))
    lo = int(rng.integers(0, n - span + 1))
    return np.sort(lo + rng.choice(span, k, replace=False))


def bench_store(label, path, args, rng):
    """Rows of the table for one store, the cold sequential rate, and the bytes the readers and the
    OS counted."""
    seq = cold_read_bandwidth(path, max_bytes=args.seq_mb << 20)
    settings = args.settings.split(",")
    readers, rows = {}, []
    for s in settings:
        threads, request, hole_rows = parse_setting(s)
        for name, p in [(s, path)] + ([(f"{s} {Path(args.pair).name}", args.pair)] if args.pair else []):
            probe = DiskMatrix(p, threads=1)
            readers[name] = DiskMatrix(p, threads=threads, max_request=request, max_hole=hole_rows * probe.row_bytes)
            probe.close()
    settings = list(readers)  # with --pair: each setting on each file, the same sets
    sequential = DiskMatrix(path)  # cold_read_bandwidth's reader
    first = readers[settings[0]]
    k = max(1, min(first.shape[0], (args.set_mb << 20) // first.row_bytes))
    outs = {s: aligned_empty((k, m.shape[1]), m.dtype) for s, m in readers.items()}
    print(f"{label}: {path}, {first.shape[0]} coordinates of {first.row_bytes / 1e3:.0f} KB "
          f"({first!r}); sequential {seq:.2f} GB/s; sets of {k} coordinates ({k * first.row_bytes / 1e6:.1f} MB)",
          flush=True)
    counted, os_before = 0, os_read_bytes()
    densities = [float(d) for d in args.densities.split(",")]
    seq_rows = max(1, min(first.shape[0], (64 << 20) // first.row_bytes))  # cold_read_bandwidth's chunk
    seq_out = aligned_empty((seq_rows, first.shape[1]), first.dtype)
    got, seq_now = {(d, s): [] for d in densities for s in settings}, []
    with busy_threads(args.busy):
        for trial in range(args.trials):
            sets = {d: pick(first.shape[0], k, d, rng) for d in densities}  # one per density: every setting reads it
            order = [(d, s) for d in densities for s in settings] + [None]  # None: the sequential read
            for job in order[trial % len(order):] + order[:trial % len(order)]:
                if job is None:
                    lo = int(rng.integers(0, first.shape[0] - seq_rows + 1))
                    st = sequential.read_into(np.arange(lo, lo + seq_rows), seq_out)
                    seq_now.append(st.gbps)
                else:
                    st = readers[job[1]].read_into(sets[job[0]], outs[job[1]])
                    got[job].append((st.gbps, st.bytes_read / st.seconds / 1e9, st.requests,
                                     st.bytes_read / st.useful_bytes, st.seconds))
                counted += st.bytes_read
    for density in densities:
        for s in settings:
            def med(f, s=s, density=density):
                return statistics.median(f(g, q) for g, q in zip(got[(density, s)], seq_now))
            # the same sets' seconds (not GB/s: a padded file's coordinates hold more bytes)
            ratio = statistics.median(b[4] / a[4] for a, b in zip(got[(density, s)], got[(density, settings[0])]))
            rows.append({"store": label, "KB per coordinate": round(first.row_bytes / 1e3),
                         "density": density, "threads:request MB:hole rows": s,
                         "useful GB/s": round(med(lambda g, q: g[0]), 3), "disk GB/s": round(med(lambda g, q: g[1]), 3),
                         "sequential GB/s": round(statistics.median(seq_now), 3),
                         "useful / sequential": f"{med(lambda g, q: g[0] / q):.0%}",
                         "disk / sequential": f"{med(lambda g, q: g[1] / q):.0%}",
                         "requests": int(med(lambda g, q: g[2])), "read / useful": round(med(lambda g, q: g[3]), 2),
                         f"x {settings[0]}": round(ratio, 2)})
            print(rows[-1], flush=True)
    os_bytes = os_read_bytes() - os_before
    for m in (*readers.values(), sequential):
        m.close()
    return rows, seq, counted, os_bytes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", default="lasso,svm", help="presets' stores: lasso, svm")
    ap.add_argument("--paths", default=None, help="comma-separated .npy files instead of the presets' stores")
    ap.add_argument("--cache-dir", default=None, help="the dataset cache (default: the config's cache_dir)")
    ap.add_argument("--settings", default="4:8:0,16:2:0,16:2:1", help="threads:request_MB:hole_rows, ...")
    ap.add_argument("--densities", default="0.02,0.25,0.75")
    ap.add_argument("--set-mb", type=int, default=12, help="MB of coordinates per read (a refresh chunk's size)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seq-mb", type=int, default=256, help="MB of the cold sequential read")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pair", default=None, help="an .npy with the same coordinates (e.g. rows padded): every "
                    "set is also read from it, so the ratio column compares the two files on the same sets")
    ap.add_argument("--busy", type=int, default=0, help="compute threads beside the reads (a solve's epochs and gaps)")
    args = ap.parse_args(argv)
    register_configs()
    print(f"load average at start {os.getloadavg()}, {os.cpu_count()} CPUs, {args.busy} compute thread(s) beside "
          "the reads")
    if args.paths:
        stores = {Path(p).name: Path(p) for p in args.paths.split(",")}
    else:
        stores = {name: preset_store(name, args.cache_dir) for name in args.stores.split(",")}
    rng = np.random.default_rng(args.seed)
    table, notes = [], []
    for label, path in stores.items():
        rows, seq, counted, os_bytes = bench_store(label, path, args, rng)
        table += rows
        notes.append(f"{label}: sequential {seq:.2f} GB/s; the readers counted {counted / 1e9:.3f} GB, "
                     f"the OS {os_bytes / 1e9:.3f} GB (/proc/self/io read_bytes)")
    print_table(table, f"Scattered reads vs the disk's cold sequential rate: medians of {args.trials} trials, "
                       f"settings interleaved, {args.busy} compute thread(s) beside")
    print("\n" + "\n".join(notes))
    print(f"load average at end {os.getloadavg()}; to be re-measured on a quiet machine")


if __name__ == "__main__":
    main()
