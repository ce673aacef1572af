"""LIBSVM conversion: ours (tasks.data.libsvm.convert_libsvm, into the sparse store on disk) against
scikit-learn's load_svmlight_file (into RAM), on the same files, one core, side by side.

Each run is a fresh child process pinned to one core (``taskset -c <core>``, one thread for every
library), the file's pages dropped from the page cache before it (both read it cold), warm-up (our
compiled parser loaded from Numba's cache on a 64 KB file; scikit-learn's import) before the
timer and reported apart. Runs alternate (ours, scikit-learn, ours, ...) so both see the same
load; medians of ``--repeats``. Peak RSS: the child's VmHWM above its value after the warm-up.
Ours writes the store (O_DIRECT) as it parses; scikit-learn only builds the matrix in RAM.

Files: a generated click-like file (``--mb`` MB of ~40 binary features a row, ``j:1``), a generated
valued file (12 features a row, 6 decimals), and ../shared/datasets/w8a if present.

    python benchmarks/sparse_convert.py --mb 300 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
W8A = ROOT.parent / "shared" / "datasets" / "w8a"

CHILD = textwrap.dedent("""
    import json, os, sys, tempfile, time
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"
    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
    def drop(path):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    kind, path, warm, scratch = sys.argv[1:5]
    start = time.perf_counter()
    if kind == "ours":
        from tasks.data.libsvm import convert_libsvm
        with tempfile.TemporaryDirectory(dir=scratch) as d:
            convert_libsvm(warm, d)
        run = lambda d: convert_libsvm(path, d)
    else:
        from sklearn.datasets import load_svmlight_file
        load_svmlight_file(warm)
        run = lambda d: load_svmlight_file(path)
    warmup = time.perf_counter() - start
    before = hwm()
    drop(path)
    with tempfile.TemporaryDirectory(dir=scratch) as d:
        start = time.perf_counter()
        out = run(d)
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "warmup_s": warmup, "peak_rss_growth": hwm() - before}))
""")


def click_like(path: Path, megabytes: int, seed=0):
    """Rows of a 0/1 label and ~40 distinct features of 2^20, power-law frequent (``j:1``)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        written = 0
        while written < megabytes << 20:
            rows = []
            ranks = np.minimum((rng.pareto(0.3, (20000, 40)) * 30).astype(np.int64), (1 << 20) - 1)
            for i in range(20000):
                feats = np.unique((ranks[i] * 2654435761) % (1 << 20) + 1)
                rows.append(f"{int(rng.random() < 0.25)} " + " ".join(f"{j}:1" for j in feats.tolist()))
            text = "\n".join(rows) + "\n"
            f.write(text)
            written += len(text)


def valued(path: Path, megabytes: int, seed=1):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        written = 0
        while written < megabytes << 20:
            rows = []
            for _ in range(20000):
                feats = np.sort(rng.choice(50000, 12, replace=False)) + 1
                rows.append(f"{rng.choice([-1, 1])} " + " ".join(f"{j}:{v:.6f}" for j, v in zip(feats.tolist(),
                                                                                              rng.random(12))))
            text = "\n".join(rows) + "\n"
            f.write(text)
            written += len(text)


def run(kind, path, warm, scratch, core):
    cmd = ["taskset", "-c", str(core), sys.executable, "-c", CHILD, kind, str(path), str(warm), str(scratch)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="size of each generated file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--dir", default=None, help="scratch folder on a disk (default: the system's temporary)")
    parser.add_argument("--json", default=None, help="write the table's rows here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        scratch = Path(scratch)
        files = {"click-like": scratch / "clicks.svm", "valued": scratch / "valued.svm"}
        click_like(files["click-like"], args.mb)
        valued(files["valued"], args.mb)
        if W8A.exists():
            files["w8a"] = W8A
        warm = scratch / "warm.svm"
        warm.write_text("1 1:0.5 3:1\n-1 2:1\n" * 3000)
        rows = []
        for name, path in files.items():
            mb = path.stat().st_size / 1e6
            got = {"ours": [], "sklearn": []}
            for _ in range(args.repeats):
                for kind in ("ours", "sklearn"):
                    got[kind].append(run(kind, path, warm, scratch, args.core))
            row = {"file": name, "MB": round(mb, 1)}
            for kind, runs in got.items():
                seconds = statistics.median(r["seconds"] for r in runs)
                row[f"{kind}_MB/s"] = round(mb / seconds, 1)
                row[f"{kind}_s"] = [round(r["seconds"], 3) for r in runs]
                row[f"{kind}_peak_rss_MB"] = round(statistics.median(r["peak_rss_growth"] for r in runs) / 1e6, 1)
                row[f"{kind}_warmup_s"] = round(statistics.median(r["warmup_s"] for r in runs), 2)
            row["speedup"] = round(row["ours_MB/s"] / row["sklearn_MB/s"], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{'file':12} {'MB':>8} {'ours MB/s':>10} {'sklearn MB/s':>13} {'speedup':>8} "
          f"{'ours RSS MB':>12} {'sklearn RSS MB':>15}")
    for r in rows:
        print(f"{r['file']:12} {r['MB']:8.1f} {r['ours_MB/s']:10.1f} {r['sklearn_MB/s']:13.1f} {r['speedup']:8.2f} "
              f"{r['ours_peak_rss_MB']:12.1f} {r['sklearn_peak_rss_MB']:15.1f}")


if __name__ == "__main__":
    main()
