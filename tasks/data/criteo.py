"""Click logs in Criteo's layout, hashed into a binary sparse store; and a synthetic set shaped like them.

**Criteo's TSV** (the display-advertising challenge's ``train.txt``, and the 1 TB logs): one
line per impression, 40 tab-separated fields: the label (0 / 1: clicked), 13 integer fields
``I1..I13`` (counts; a few are negative) and 26 categorical fields ``C1..C26`` (32-bit hex
hashes); any field may be empty (missing). Converted in bounded RAM (a fixed text buffer,
plain / gzip / bz2 / xz, as the LIBSVM converter) into a binary ``csr`` store by the *hashing
trick*, documented so that anyone can reproduce an index:

- field f (1..13 for I1..I13, 14..39 for C1..C26) with a value becomes one token, and the
  feature ``MurmurHash3_x86_32(token, seed=f) mod 2^hash_bits`` (the hash scikit-learn's
  FeatureHasher and Vowpal Wabbit use: ``sklearn.utils.murmurhash3_32(token, seed=f,
  positive=True) % 2**hash_bits`` computes the same); an empty field gives no feature;
- a categorical token is the field's bytes as written (``b"68fd1e64"``);
- an integer v's token is its decimal (``b"-1"``, ``b"0"``, ``b"2"``) when v <= 2, else ``b"L"``
  and the decimal of floor(ln(v)^2): counts binned on a log-squared scale, as the winning
  solution of the Kaggle challenge did (Juan et al., 2014), so a count is a category;
- the features of a row are binary (value 1); two fields of one row that hash to the same
  feature make one entry (no value 2).

``n_features = 2^hash_bits``. Labels go to ``y.npy`` as written (0 / 1; the classifiers train
the larger class, clicks, as +1).

**Synthetic clicks** (:func:`make_synthetic_criteo`): as Criteo's rows, ``nnz_per_row``
fields, each with a value (with probability 1 - ``missing``) from a vocabulary of its own
(2^hash_bits / nnz_per_row features), drawn with power-law frequencies (rank r with
probability proportional to r^-zipf; the feature's index a fixed bijection of (field, rank),
so frequent features are spread over the index space): binary rows of about ``nnz_per_row``
entries. Labels from a sparse logistic model: y = 1 with probability sigmoid(<w, x> +
logit(base_rate)), w standard normal on ``n_informative`` features drawn as the rows' are.
Made block by block straight into the store (blocks of a fixed number of rows, each from its
own seed: the data never depend on the buffer), in bounded RAM (and w: 8 bytes a feature).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
from numba import njit

from solvers.storage.sparse_store import SparseStoreWriter, store_name
from tasks.data.configs import CriteoData, SyntheticCriteoData, resolve_path
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn
from tasks.data.streams import Source, TargetWriter

N_INT, N_CAT = 13, 26
N_FIELDS = 1 + N_INT + N_CAT
BUFFER_BYTES = 16 << 20
ROWS_PER_BLOCK = 1 << 16  # synthetic rows made per step: fixed, so the data never depend on it
MORE, FULL, ERROR = 0, 1, 2
PROBLEMS = {1: "fields", 2: "label", 3: "integer"}


@njit(inline="always")
def _rotl(x, r):
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def murmur3_32(data, lo, hi, seed):
    """MurmurHash3_x86_32 of data[lo:hi] (uint8) with ``seed``, as an unsigned 32-bit integer."""
    mask = np.uint64(0xFFFFFFFF)
    c1, c2 = np.uint64(0xCC9E2D51), np.uint64(0x1B873593)
    h = np.uint64(seed) & mask
    n = hi - lo
    nblocks = n // 4
    for b in range(nblocks):
        p = lo + 4 * b
        k = (np.uint64(data[p]) | (np.uint64(data[p + 1]) << np.uint64(8)) | (np.uint64(data[p + 2]) << np.uint64(16))
             | (np.uint64(data[p + 3]) << np.uint64(24)))
        k = (k * c1) & mask
        k = _rotl(k, 15)
        k = (k * c2) & mask
        h ^= k
        h = _rotl(h, 13)
        h = (h * np.uint64(5) + np.uint64(0xE6546B64)) & mask
    tail = lo + 4 * nblocks
    k = np.uint64(0)
    rest = n & 3
    if rest >= 3:
        k ^= np.uint64(data[tail + 2]) << np.uint64(16)
    if rest >= 2:
        k ^= np.uint64(data[tail + 1]) << np.uint64(8)
    if rest >= 1:
        k ^= np.uint64(data[tail])
        k = (k * c1) & mask
        k = _rotl(k, 15)
        k = (k * c2) & mask
        h ^= k
    h ^= np.uint64(n)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & mask
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & mask
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, nogil=True)
def integer_token(v, out):
    """The token of an integer field's value v into ``out`` (uint8); its length."""
    if v > 2:
        v = int(math.floor(math.log(v) ** 2))
        out[0] = 76  # 'L'
        start = 1
    else:
        start = 0
    if v < 0:
        out[start] = 45  # '-'
        start += 1
        v = -v
    n = 1
    x = v
    while x >= 10:
        x //= 10
        n += 1
    for k in range(n - 1, -1, -1):
        out[start + k] = 48 + v % 10
        v //= 10
    return start + n


@njit(cache=True, nogil=True)
def _sort_unique(a, lo, hi):
    """Sort a[lo:hi] (insertion: a row has at most 39 entries) and drop repeats; the new end."""
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x
    end = lo
    for i in range(lo, hi):
        if i == lo or a[i] != a[end - 1]:
            a[end] = a[i]
            end += 1
    return end


@njit(cache=True, nogil=True)
def _parse(buf, n, final, mask, max_rows, labels, lengths, indices, scratch):
    """Parse the complete lines of buf[:n]: (consumed, rows, entries, lines, status, problem, field)."""
    p = 0
    rows = 0
    ent = 0
    lines = 0
    rows_cap = min(labels.shape[0], max_rows)
    ent_cap = indices.shape[0]
    while p < n:
        e = p
        while e < n and buf[e] != 10:
            e += 1
        if e == n and not final:
            break
        nxt = e + 1 if e < n else e
        end = e
        if end > p and buf[end - 1] == 13:  # \r\n
            end -= 1
        if end == p:  # a blank line
            p = nxt
            lines += 1
            continue
        if rows >= rows_cap or ent + N_FIELDS > ent_cap:
            return p, rows, ent, lines, FULL, 0, 0
        start = ent
        field = 0
        q = p
        label = -1
        while True:
            t = q
            while t < end and buf[t] != 9:
                t += 1
            if field >= N_FIELDS:
                return p, rows, start, lines, ERROR, 1, field + 1
            if field == 0:
                if t - q != 1 or (buf[q] != 48 and buf[q] != 49):
                    return p, rows, start, lines, ERROR, 2, 0
                label = buf[q] - 48
            elif t > q:
                if field <= N_INT:
                    r = q
                    neg = False
                    if buf[r] == 45:
                        neg = True
                        r += 1
                    if r == t:
                        return p, rows, start, lines, ERROR, 3, field
                    v = 0
                    while r < t:
                        d = buf[r] - 48
                        if d < 0 or d > 9 or v > 100000000000000000:
                            return p, rows, start, lines, ERROR, 3, field
                        v = v * 10 + d
                        r += 1
                    k = integer_token(-v if neg else v, scratch)
                    h = murmur3_32(scratch, 0, k, field)
                else:
                    h = murmur3_32(buf, q, t, field)
                indices[ent] = np.int64(h & mask)
                ent += 1
            field += 1
            if t >= end:
                break
            q = t + 1
        if field != N_FIELDS:
            return p, rows, start, lines, ERROR, 1, field
        ent = _sort_unique(indices, start, ent)
        labels[rows] = label
        lengths[rows] = ent - start
        rows += 1
        p = nxt
        lines += 1
    return p, rows, ent, lines, MORE, 0, 0


def _field_name(f: int) -> str:
    return "the label" if f == 0 else (f"I{f}" if f <= N_INT else f"C{f - N_INT}")


def _malformed(path, line_number, line: bytes, problem: int, field: int) -> DataError:
    fields = line.rstrip(b"\r").split(b"\t")
    if problem == 1:
        what = (f"{len(fields)} tab-separated fields, not {N_FIELDS} (a label, {N_INT} integers, "
                f"{N_CAT} categories)")
    elif problem == 2:
        what = f"the label is {fields[0].decode('utf-8', 'replace')!r}, not 0 or 1"
    else:
        what = f"field {_field_name(field)} is {fields[field].decode('utf-8', 'replace')!r}, not an integer"
    return DataError(f"Malformed Criteo file {path}, line {line_number}: {what}.")


def convert_criteo(path, folder, name: str = store_name("csr"), hash_bits: int = 20,
                   max_samples: Optional[int] = None, buffer_bytes: int = BUFFER_BYTES,
                   progress: Optional[ProgressFn] = None, target: Optional[Path] = None):
    """Convert the Criteo TSV ``path`` into the binary store ``name`` in ``folder`` (2^hash_bits
    features, see the module's docstring) and its labels into ``target`` (default
    ``folder / 'y.npy'``); returns the store. ``progress(done, total)``: bytes of the file as stored."""
    path = Path(path)
    buffer_bytes = max(1 << 12, int(buffer_bytes))
    report = progress or (lambda done, total: None)
    max_rows = np.iinfo(np.int64).max if max_samples is None else int(max_samples)
    buf = np.empty(buffer_bytes + 1, np.uint8)
    rows_cap = max(16, buffer_bytes // 64)  # a row of 40 fields takes at least 40 bytes
    labels, lengths = np.empty(rows_cap), np.empty(rows_cap, np.int64)
    indices = np.empty(rows_cap * N_FIELDS, np.int64)
    scratch = np.empty(32, np.uint8)
    mask = np.uint64((1 << int(hash_bits)) - 1)
    target = Path(folder) / "y.npy" if target is None else Path(target)
    stage = max(1 << 18, buffer_bytes // 4)  # each output file's staging buffer
    writer = SparseStoreWriter(folder, name, "csr", length=1 << int(hash_bits), binary=True, stage_bytes=stage)
    y = TargetWriter(target, stage)
    fill, line_number, rows_done, eof = 0, 0, 0, False
    try:
        with Source(path) as source:
            while True:
                if not eof:
                    got = source.readinto(memoryview(buf)[fill:buffer_bytes])
                    eof = fill + got < buffer_bytes
                    fill += got
                consumed, rows, ent, lines, status, problem, field = _parse(
                    buf, fill, eof, mask, max_rows - rows_done, labels, lengths, indices, scratch)
                if rows:
                    writer.append(lengths[:rows], indices[:ent])
                    y.write(labels[:rows])
                    rows_done += rows
                line_number += lines
                if status == ERROR:
                    stop = buf[consumed:fill]
                    end = consumed + (int(np.argmax(stop == 10)) if (stop == 10).any() else stop.size)
                    raise _malformed(path, line_number + 1, bytes(buf[consumed:end]), problem, field)
                if rows_done >= max_rows:
                    break
                rest = fill - consumed
                if status == MORE and eof and rest == 0:
                    break
                if status == MORE and rest == buffer_bytes:  # a line longer than the buffer: grow it
                    buffer_bytes *= 2
                    bigger = np.empty(buffer_bytes + 1, np.uint8)
                    bigger[:rest] = buf[:rest]
                    buf = bigger
                else:
                    buf[:rest] = buf[consumed:fill]
                fill = rest
                report(source.position, source.size)
        if rows_done == 0:
            raise DataError(f"Criteo file {path} holds no impression (empty).")
        y.close()
        store = writer.close()
        report(source.size, source.size)
        return store
    except BaseException:
        writer.abort()
        y.abort()
        target.unlink(missing_ok=True)
        raise


def make_criteo(c: CriteoData, out: Path, base_dir: Path, progress: ProgressFn):
    """The cache's maker for ``data=criteo``: the store ``X_csr`` and ``y.npy``; the checksums known."""
    store = convert_criteo(resolve_path(c.path, base_dir), out, hash_bits=c.hash_bits, max_samples=c.max_samples,
                           progress=progress)
    return store.checksums


# ------------------------------------------------------ synthetic clicks ---
@njit(inline="always")
def _rank(u, n_ranks, log_top, top, inv_a):
    """The rank in [0, n_ranks) of a uniform draw u under the density r^-zipf on [1, n_ranks + 1)
    (inverse CDF; ``top`` = (n_ranks + 1)^(1 - zipf) - 1, ``inv_a`` = 1 / (1 - zipf), or zipf = 1:
    ``inv_a`` = 0 and ``log_top`` = ln(n_ranks + 1))."""
    if inv_a == 0.0:
        r = math.exp(u * log_top)
    else:
        r = (top * u + 1.0) ** inv_a
    return min(max(np.int64(r) - 1, 0), n_ranks - 1)


@njit(inline="always")
def _feature(field, rank, vocabulary, mask):
    """Field ``field``'s feature of rank ``rank``: a fixed bijection of (field, rank) onto the
    index space (an odd factor mod 2^k), so that a field's frequent features are spread out."""
    return np.int64((np.uint64(field * vocabulary + rank) * np.uint64(0x9E3779B1)) & mask)


@njit(cache=True, nogil=True)
def _click_rows(u, present, n_fields, vocabulary, zipf, mask, w, bias, v, indices, lengths, labels):
    """Rows from uniform draws: ``u`` (rows x fields) the features' ranks, ``present`` whether a
    field has a value, ``v`` the label's draw. Returns the entries written."""
    log_top = math.log(vocabulary + 1.0)
    one = abs(zipf - 1.0) < 1e-12
    inv_a = 0.0 if one else 1.0 / (1.0 - zipf)
    top = 0.0 if one else (vocabulary + 1.0) ** (1.0 - zipf) - 1.0
    ent = 0
    for i in range(u.shape[0]):
        start = ent
        m = bias
        for f in range(n_fields):
            if present[i, f]:
                j = _feature(f, _rank(u[i, f], vocabulary, log_top, top, inv_a), vocabulary, mask)
                indices[ent] = j
                m += w[j]
                ent += 1
        ent = _sort_unique(indices, start, ent)  # fields' features are distinct: a sort
        lengths[i] = ent - start
        labels[i] = 1.0 if v[i] < 1.0 / (1.0 + math.exp(-m)) else 0.0
    return ent


def synthetic_criteo_weights(c: SyntheticCriteoData) -> np.ndarray:
    """The true logistic weights of the synthetic clicks (2^hash_bits float64): standard normal on
    ``n_informative`` distinct features, each drawn as a row's are (a field at random, its rank
    by the power law), so informative features are frequent ones as often as the data's are."""
    n = 1 << c.hash_bits
    vocabulary = n // c.nnz_per_row
    rng = np.random.default_rng(np.random.SeedSequence([c.seed, 0]))
    chosen = np.zeros(0, np.int64)
    while chosen.size < c.n_informative:
        k = 4 * c.n_informative
        fields = rng.integers(0, c.nnz_per_row, k)
        ranks = _ranks(rng.random(k), vocabulary, c.zipf)
        features = ((fields * vocabulary + ranks).astype(np.uint64) * np.uint64(0x9E3779B1)) & np.uint64(n - 1)
        both = np.concatenate([chosen, features.astype(np.int64)])
        _, first = np.unique(both, return_index=True)
        chosen = both[np.sort(first)][:c.n_informative]  # distinct, in the order drawn
    w = np.zeros(n)
    w[chosen] = rng.standard_normal(chosen.size)
    return w


def _ranks(u, n_ranks, zipf):
    if abs(zipf - 1.0) < 1e-12:
        r = np.exp(u * np.log(n_ranks + 1.0))
    else:
        a = 1.0 - zipf
        r = (((n_ranks + 1.0) ** a - 1.0) * u + 1.0) ** (1.0 / a)
    return np.clip(r.astype(np.int64) - 1, 0, n_ranks - 1)


def make_synthetic_criteo(c: SyntheticCriteoData, out: Path, base_dir: Path, progress: ProgressFn):
    """The cache's maker for ``data=synthetic_criteo`` (see the module's docstring): the store
    ``X_csr``, ``y.npy`` (0 / 1) and ``coef.npy`` (the true weights); the checksums known."""
    n = 1 << c.hash_bits
    vocabulary = n // c.nnz_per_row
    w = synthetic_criteo_weights(c)
    bias = math.log(c.base_rate / (1.0 - c.base_rate))
    mask = np.uint64(n - 1)
    writer = SparseStoreWriter(out, store_name("csr"), "csr", length=n, binary=True)
    y = TargetWriter(out / "y.npy")
    rows = min(ROWS_PER_BLOCK, c.n_samples)
    indices = np.empty(rows * c.nnz_per_row, np.int64)
    lengths, labels = np.empty(rows, np.int64), np.empty(rows)
    try:
        for b, lo in enumerate(range(0, c.n_samples, ROWS_PER_BLOCK)):
            k = min(ROWS_PER_BLOCK, c.n_samples - lo)
            rng = np.random.default_rng(np.random.SeedSequence([c.seed, 1, b]))
            u = rng.random((k, c.nnz_per_row))
            present = rng.random((k, c.nnz_per_row)) >= c.missing
            v = rng.random(k)
            ent = _click_rows(u, present, c.nnz_per_row, vocabulary, c.zipf, mask, w, bias, v, indices, lengths,
                              labels)
            writer.append(lengths[:k], indices[:ent])
            y.write(labels[:k])
            progress(lo + k, c.n_samples)
        y.close()
        store = writer.close()
    except BaseException:
        writer.abort()
        y.abort()
        raise
    np.save(out / "coef.npy", w)
    return store.checksums
