"""Sparse data into the store in bounded RAM (tasks/data: libsvm, criteo, sparse): what is stored is
what an independent reader reads, a bad line is named, a killed conversion leaves nothing, and the
RAM does not grow with the file.

Oracles: scikit-learn's load_svmlight_file; scikit-learn's murmurhash3_32 and a Python reading of
Criteo's layout written here from its description; scipy.sparse.load_npz; /proc/<pid>/status's
VmHWM of a child process (its peak resident memory)."""

import bz2
import gzip
import json
import lzma
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from solvers.storage.sparse_store import open_store
from tasks.data import CriteoData, DataError, LibsvmData, SyntheticCriteoData, load_dataset, read_cached
from tasks.data.criteo import convert_criteo, murmur3_32
from tasks.data.libsvm import convert_libsvm
from tasks.data.sparse import convert_npz, sparse_layout

ROOT = Path(__file__).resolve().parents[2]
W8A = ROOT.parent / "shared" / "datasets" / "w8a"
CRITEO = ROOT.parent / "shared" / "datasets" / "criteo_sample.tsv"
TRICKY = "\n".join([
    "1 1:0.1 2:1e-300 3:123456789012345678901234 4:-0.000000000000000000000001 5:1.7976931348623157e308",
    "-1 qid:3 2:3 5:7   # a comment",
    "", "# a comment line",
    "0.5 6:2.2250738585072014e-308 7:4.9e-324 9:.5 10:5. 11:+3 12:1E+05\r",
    "2 13:0.30000000000000004 14:123456789.123456789 15:-0",
    "-3.25"])  # a label alone, and no newline at the end


def store_and_y(folder, name="X_csr"):
    store = open_store(folder, name)
    return store, store.matrix(), np.load(Path(folder) / "y.npy")


def same(A, B):
    return A.shape == B.shape and (A != B).nnz == 0


# ------------------------------------------------------------------ LIBSVM ---
@pytest.mark.parametrize("opener", [open, gzip.open, bz2.open, lzma.open])
def test_libsvm_equals_scikit_learn(tmp_path, opener):
    """Numbers as float() reads them (correctly rounded: denormals, 24 digits, 1e308), comments,
    qid, CRLF, a label alone, no final newline, every compression; the buffer (4 KB) is smaller
    than the file."""
    plain = tmp_path / "t.svm"
    plain.write_text(TRICKY)
    path = tmp_path / "t.svm.z"
    with opener(path, "wt") as f:
        f.write(TRICKY)
    out = tmp_path / "out"
    out.mkdir()
    seen = []
    convert_libsvm(path, out, buffer_bytes=4096, progress=lambda done, total: seen.append((done, total)))
    store, X, y = store_and_y(out)
    Xs, ys = load_svmlight_file(str(plain))
    assert same(X, Xs) and np.array_equal(y, ys) and store.shape == Xs.shape
    assert seen[-1] == (path.stat().st_size, path.stat().st_size)


def test_w8a_equals_scikit_learn(tmp_path):
    if not W8A.exists():
        pytest.skip(f"{W8A} is absent")
    store = convert_libsvm(W8A, tmp_path, n_features=300, buffer_bytes=1 << 16)
    Xs, ys = load_svmlight_file(str(W8A), n_features=300)
    assert store.binary and same(store.matrix(), Xs)  # binary: no values file
    assert not (tmp_path / "X_csr.values").exists()
    assert np.array_equal(np.load(tmp_path / "y.npy"), ys)


def test_a_late_index_0_makes_the_file_zero_based(tmp_path):
    """scikit-learn's zero_based='auto': one index 0 anywhere makes every index zero-based. Read as
    one-based until line 3000 (many batches written), then shifted once."""
    rng = np.random.default_rng(0)
    lines = [f"{rng.integers(2)} " + " ".join(f"{j}:{rng.integers(1, 9)}" for j in sorted(rng.choice(range(1, 60), 5,
                                                                                               replace=False)))
             for _ in range(4000)]
    lines[3000] = "1 0:1 7:2"
    path = tmp_path / "late.svm"
    path.write_text("\n".join(lines) + "\n")
    convert_libsvm(path, tmp_path, buffer_bytes=4096, dtype="float32")
    store, X, y = store_and_y(tmp_path)
    Xs, ys = load_svmlight_file(str(path), dtype=np.float32)
    assert store.value_dtype == np.float32 and same(X, Xs) and np.array_equal(y, ys)


def test_max_samples_n_features_and_a_line_longer_than_the_buffer(tmp_path):
    wide = "1 " + " ".join(f"{j}:{j % 7 + 1}" for j in range(1, 3000)) + "\n"
    path = tmp_path / "wide.svm"
    path.write_text("-1 2:1\n" + wide + "1 5:2\n" * 10)
    convert_libsvm(path, tmp_path, buffer_bytes=4096, max_samples=3, n_features=5000)
    store, X, y = store_and_y(tmp_path)
    Xs, ys = load_svmlight_file(str(path), n_features=5000)
    assert same(X, Xs[:3]) and np.array_equal(y, ys[:3]) and X.shape == (3, 5000)


def test_a_bad_line_deep_in_the_file_is_named_and_nothing_is_cached(tmp_path):
    path = tmp_path / "deep.svm"
    path.write_text("1 1:0.5 3:2\n" * 5000 + "1 2:1 x:3\n" + "1 1:1\n" * 10)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"Malformed LIBSVM file .*deep\.svm, line 5001: feature index 'x' is not "
                                        r"an integer\.$"):
        load_dataset(LibsvmData(path=str(path)), cache)
    assert list(cache.iterdir()) == []
    path.write_text("1 1:1\n-1,1 2:3\n")
    with pytest.raises(DataError, match=r"line 2: the label '-1,1' has several classes: multi-label lines"):
        load_dataset(LibsvmData(path=str(path)), cache)
    path.write_text("1 1:1\n1 2:0x1p3\n")  # float() refuses hexadecimal floats: so do we
    with pytest.raises(DataError, match=r"line 2: '0x1p3' is not a number"):
        load_dataset(LibsvmData(path=str(path)), cache)
    assert list(cache.iterdir()) == []


# ------------------------------------------------------------------ Criteo ---
def criteo_features(line, bits):
    """Criteo's line hashed as tasks/data/criteo.py documents it, with scikit-learn's murmurhash3_32."""
    from sklearn.utils import murmurhash3_32

    fields = line.rstrip("\n").split("\t")
    out = set()
    for f in range(1, 40):
        if fields[f] == "":
            continue
        if f <= 13:
            v = int(fields[f])
            token = str(v) if v <= 2 else "L" + str(int(math.floor(math.log(v) ** 2)))
        else:
            token = fields[f]
        out.add(murmurhash3_32(token.encode(), seed=f, positive=True) % (1 << bits))
    return sorted(out), int(fields[0])


@pytest.mark.skipif(not CRITEO.exists(), reason=f"{CRITEO} is absent")
@pytest.mark.parametrize("bits,opener", [(20, open), (8, gzip.open)])
def test_criteo_equals_the_documented_hash(tmp_path, bits, opener):
    """200 real rows (missing fields, negative integers); 2^8 features: collisions within a row
    make one entry."""
    text = CRITEO.read_text()
    path = tmp_path / "c.tsv"
    with opener(path, "wt") as f:
        f.write(text)
    store = convert_criteo(path, tmp_path, hash_bits=bits, buffer_bytes=4096)
    X, y = store.matrix(), np.load(tmp_path / "y.npy")
    assert store.binary and store.shape == (200, 1 << bits)
    for i, line in enumerate(text.splitlines()):
        feats, label = criteo_features(line, bits)
        assert list(X.indices[X.indptr[i]:X.indptr[i + 1]]) == feats and y[i] == label
    assert 0 < y.mean() < 1


def test_murmurhash_equals_scikit_learn():
    from sklearn.utils import murmurhash3_32

    data = np.frombuffer(b"68fd1e64 and some more bytes", np.uint8)
    for n in range(len(data)):
        for seed in (0, 1, 39):
            assert murmur3_32(data, 0, n, seed) == murmurhash3_32(data[:n].tobytes(), seed=seed, positive=True)


@pytest.mark.parametrize("line,message", [
    ("1\t2\t3\n", r"line 2: 3 tab-separated fields, not 40 \(a label, 13 integers, 26 categories\)"),
    ("2" + "\t" * 39 + "\n", r"line 2: the label is '2', not 0 or 1"),
    ("0\t1\t2.5" + "\t" * 37 + "\n", r"line 2: field I2 is '2.5', not an integer"),
])
def test_bad_criteo_lines(tmp_path, line, message):
    path = tmp_path / "bad.tsv"
    path.write_text("0" + "\t" * 39 + "\n" + line)
    with pytest.raises(DataError, match=r"Malformed Criteo file .*bad\.tsv, " + message):
        convert_criteo(path, tmp_path / "out" if (tmp_path / "out").mkdir() is None else None)
    assert list((tmp_path / "out").iterdir()) == []


def test_synthetic_criteo_follows_its_model(tmp_path):
    """Deterministic; about nnz_per_row (1 - missing) entries a row; the labels' rate is the
    logistic model's mean probability; one field's frequencies fall as rank^-zipf."""
    c = SyntheticCriteoData(n_samples=30000, hash_bits=16, nnz_per_row=20, missing=0.1, n_informative=50, seed=3)
    a = load_dataset(c, tmp_path / "a")
    b = load_dataset(c, tmp_path / "b")
    assert json.loads((a.path / "meta.json").read_text())["files"] == \
        json.loads((b.path / "meta.json").read_text())["files"]
    X, y, w = a.X, np.asarray(a.y), np.asarray(a.coef)
    counts = np.diff(X.indptr)
    assert X.shape == (30000, 1 << 16) and counts.max() <= 20 and abs(counts.mean() - 18) < 0.1
    assert np.count_nonzero(w) == 50 and set(np.unique(y)) == {0.0, 1.0}
    margin = np.asarray(X @ w).ravel() + math.log(c.base_rate / (1 - c.base_rate))
    p = 1 / (1 + np.exp(-margin))
    assert abs(y.mean() - p.mean()) < 4 * math.sqrt(p.mean() * (1 - p.mean()) / y.size)
    one = SyntheticCriteoData(n_samples=40000, hash_bits=12, nnz_per_row=1, missing=0.0, zipf=1.3, seed=1)
    d = load_dataset(one, tmp_path / "c")
    inverse = pow(0x9E3779B1, -1, 1 << 12)
    ranks = (np.asarray(d.X.indices, np.int64) * inverse) % (1 << 12)
    freq = np.bincount(ranks, minlength=40)[:40]
    slope = np.polyfit(np.log(np.arange(1, 41) + 0.5), np.log(freq), 1)[0]
    assert abs(slope + 1.3) < 0.15, slope


# -------------------------------------------------------------- npz, cache ---
@pytest.mark.parametrize("kind,compressed", [("csr", True), ("csc", False)])
def test_npz_streamed_equals_scipy(tmp_path, kind, compressed):
    X = sp.random(700, 90, density=0.05, format=kind, random_state=0, dtype=np.float32)
    path = tmp_path / "x.npz"
    sp.save_npz(path, X, compressed=compressed)
    store = convert_npz(path, tmp_path, batch_entries=64)
    assert store.layout == kind and same(store.matrix(), sp.load_npz(path))
    sp.save_npz(path, X.tocoo())
    with pytest.raises(DataError, match=r"holds a coo matrix; convert_npz reads CSR or CSC"):
        convert_npz(path, tmp_path, name="coo")


def test_cache_entry_gets_the_other_layout_once(tmp_path):
    path = tmp_path / "a.svm"
    rng = np.random.default_rng(1)
    path.write_text("".join(f"{rng.choice([-1, 1])} {j + 1}:{rng.integers(1, 5)} {j + 40}:1.5\n"
                            for j in range(30)))
    ds = load_dataset(LibsvmData(path=str(path)), tmp_path / "cache")
    assert ds.store is not None and ds.store.layout == "csr" and ds.nbytes == ds.store.nbytes + ds.store.indptr.nbytes
    csc = sparse_layout(ds.path, "csc", buffer_bytes=1 << 16)
    assert same(csc.matrix().tocsr(), ds.X)
    files = json.loads((ds.path / "meta.json").read_text())["files"]
    assert {"X_csc.indptr", "X_csc.indices", "X_csc.values", "X_csc.json"} <= set(files)
    assert sparse_layout(ds.path, "csc").checksums == csc.checksums  # not written twice
    from tasks.data import cache

    cache._CHECKED.clear()
    assert read_cached(ds.path).verified == "checksum"  # the new files' checksums hold


def test_criteo_config_through_the_cache(tmp_path):
    if not CRITEO.exists():
        pytest.skip(f"{CRITEO} is absent")
    ds = load_dataset(CriteoData(path=str(CRITEO), hash_bits=18, max_samples=50), tmp_path)
    assert ds.X.shape == (50, 1 << 18) and ds.store.binary


# ------------------------------------------------- killed, RAM, in a child ---
def write_big_libsvm(path, megabytes):
    rng = np.random.default_rng(0)
    lines = [f"{rng.choice([-1, 1])} " + " ".join(f"{j}:{rng.random():.6f}"
                                                   for j in sorted(rng.choice(range(1, 5000), 12, replace=False)))
             for _ in range(4000)]
    block = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        for _ in range(-(-megabytes * (1 << 20) // len(block))):
            f.write(block)


CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tasks.data import LibsvmData, load_dataset
    def progress(done, total):
        print("progress", done, flush=True)
    load_dataset(LibsvmData(path=sys.argv[1]), Path(sys.argv[2]), progress=progress)
    print("done", flush=True)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_conversion_leaves_nothing(tmp_path, sig):
    """SIGTERM: the temporary entry is removed on the way out; SIGKILL: it stays until the next
    load, which removes it (its process is gone) and makes the entry whole."""
    path = tmp_path / "big.svm"
    write_big_libsvm(path, 24)
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(cache)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("progress"), line
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    left = list(cache.iterdir())
    if sig == signal.SIGTERM:
        assert left == []
    else:
        assert left and all(".tmp-" in p.name for p in left)
        ds = load_dataset(LibsvmData(path=str(path)), cache, progress=lambda done, total: None)
        assert [p.name for p in cache.iterdir()] == [ds.path.name] and ds.X.shape[0] > 0


RSS_CHILD = textwrap.dedent("""
    import sys, tempfile
    from tasks.data.libsvm import convert_libsvm
    def hwm():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
    with tempfile.TemporaryDirectory(dir=sys.argv[3]) as d:
        convert_libsvm(sys.argv[1], d, buffer_bytes=1 << 20)  # compiled code and imports loaded
    before = hwm()
    with tempfile.TemporaryDirectory(dir=sys.argv[3]) as d:
        convert_libsvm(sys.argv[2], d, buffer_bytes=1 << 20)
    print(hwm() - before)
""")


def test_ram_is_bounded_by_the_buffer_not_the_file(tmp_path):
    """The peak RSS a conversion adds (1 MB text buffer) is the same for a 3 MB and a 24 MB file,
    and a small part of the file (scikit-learn's loader holds it all, several times)."""
    small, big = tmp_path / "small.svm", tmp_path / "big.svm"
    write_big_libsvm(small, 3)
    write_big_libsvm(big, 24)
    growth = {}
    for name, path in (("small", small), ("big", big)):
        out = subprocess.run([sys.executable, "-c", RSS_CHILD, str(small), str(path), str(tmp_path)], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        growth[name] = int(out.stdout.split()[-1])
    assert growth["big"] < growth["small"] + (3 << 20), growth  # 3 buffers: no part of the file is kept
    assert growth["big"] < (24 << 20) // 6, growth
