"""LIBSVM / svmlight text files, converted to the sparse store in bounded RAM.

The file (plain, gzip, bz2 or xz) is read a fixed buffer at a time and parsed by a compiled
loop (Numba) into batches of rows that are appended to a ``csr`` store
(solvers.storage.sparse_store) and to ``y.npy`` as they come: the RAM is the text buffer and
the batch arrays, whatever the file's size (a line longer than the buffer grows it to the
line). It reads what scikit-learn's ``load_svmlight_file`` reads, and the same way:

- ``label index:value index:value ... # comment``; blank and comment lines skipped; ``qid:``
  pairs ignored; indices strictly increasing along a line;
- indices are one-based unless the file holds an index 0 (scikit-learn's ``zero_based="auto"``):
  they are read as one-based, and the first 0 turns the file zero-based (the indices written
  before it are shifted back once);
- numbers as Python's ``float`` reads them (scikit-learn's parser calls it): correctly
  rounded, the common decimals by an exact fast path (at most 19 significant digits and a
  power of ten up to 10^22: one correctly rounded IEEE operation, Clinger's), anything else
  by C's ``strtod`` (also correctly rounded; its hexadecimal floats refused, as ``float``
  refuses them);
- a binary file (every value 1) gets no values file.

A line that is not a sample stops the conversion with one line naming the file, the line
number and what is wrong (:func:`check_line`, the same words as before), and the cache keeps
nothing (the converter writes into the cache's temporary folder).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
from numba import njit, types

from solvers.storage.sparse_store import SparseStoreWriter, store_name
from tasks.data.configs import LibsvmData, resolve_path
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn
from tasks.data.streams import Source, TargetWriter

# the text buffer; the batch arrays take about 1.3 times as much, the output files' staging buffers
# (indptr, indices, values, y) a quarter of it each
BUFFER_BYTES = 8 << 20

# C's strtod, linked by name (a ctypes pointer would keep Numba from caching the parser): its two
# pointers passed as address-sized integers, which the C calling convention passes alike
_strtod = types.ExternalFunction("strtod", types.float64(types.uintp, types.uintp))

# statuses of _parse
MORE, FULL, ZERO, ERROR = 0, 1, 2, 3
# what is wrong with a line, when check_line does not say (it always should)
PROBLEMS = {1: "its label is not a number", 2: "a pair is not index:value", 3: "a feature index is not an integer",
            4: "a feature index is negative", 5: "its feature indices do not increase",
            6: "a value is not a number", 7: "a value is not a finite number", 8: "multi-label lines are not supported",
            9: "a feature index is too large", 10: "its label is not a finite number"}
_POW10 = np.array([10.0 ** k for k in range(23)])
_MAX_EXACT = 1 << 53  # integers up to here are exact in float64 (Clinger's fast path)


@njit(inline="always")
def _space(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(inline="always")
def _ends_token(buf, q, limit):
    """Whether a number's token ends at q: the end, a blank, a newline or a comment."""
    return q >= limit or _space(buf[q]) or buf[q] == 10 or buf[q] == 35


@njit(inline="always")
def _number(buf, p, limit, endptr):
    """(value, position after it, ok) of the number starting at p: a token of the line that ends
    at a blank, a newline, '#' or ``limit``."""
    q = p
    neg = False
    if q < limit and (buf[q] == 45 or buf[q] == 43):  # - +
        neg = buf[q] == 45
        q += 1
    m = 0
    nd = 0
    e10 = 0
    digits = 0
    exact = True
    while q < limit and 48 <= buf[q] <= 57:
        d = np.int64(buf[q]) - 48
        digits += 1
        if m == 0 and d == 0:
            pass
        elif nd < 18:
            m = m * 10 + d
            nd += 1
        else:
            e10 += 1
            exact = exact and d == 0
        q += 1
    if q < limit and buf[q] == 46:  # .
        q += 1
        while q < limit and 48 <= buf[q] <= 57:
            d = np.int64(buf[q]) - 48
            digits += 1
            if m == 0 and d == 0:
                e10 -= 1
            elif nd < 18:
                m = m * 10 + d
                nd += 1
                e10 -= 1
            else:
                exact = exact and d == 0
            q += 1
    if digits and q < limit and (buf[q] == 101 or buf[q] == 69):  # e E
        q += 1
        eneg = False
        if q < limit and (buf[q] == 45 or buf[q] == 43):
            eneg = buf[q] == 45
            q += 1
        ed = 0
        x = 0
        while q < limit and 48 <= buf[q] <= 57:
            if x < 100000:
                x = x * 10 + (np.int64(buf[q]) - 48)
            ed += 1
            q += 1
        if ed == 0:
            digits = 0  # "1e": not of this simple form
        e10 += -x if eneg else x
    if digits and exact and m <= _MAX_EXACT and -22 <= e10 <= 22 and _ends_token(buf, q, limit):
        v = float(m) * _POW10[e10] if e10 >= 0 else float(m) / _POW10[-e10]
        return (-v if neg else v), q, True
    # anything else (more digits, large exponents, inf, nan): C's strtod, correctly rounded as
    # Python's float() (scikit-learn's); not its hexadecimal floats, which float() refuses
    start = buf[p:].ctypes.data
    v = _strtod(start, endptr.ctypes.data)
    q = p + np.int64(endptr[0] - start)
    ok = q > p and q <= limit and _ends_token(buf, q, limit)
    for k in range(p, min(q, limit)):
        if buf[k] == 120 or buf[k] == 88:  # x X
            ok = False
    return v, q, ok


@njit(cache=True, nogil=True)
def _parse(buf, n, final, shift, max_rows, labels, lengths, indices, values, endptr):
    """Parse the complete lines of buf[:n] (and a last one without newline when ``final``), in one
    pass over their bytes.

    Returns (bytes consumed, rows, entries, lines passed, status, problem): status MORE (all
    complete lines parsed), FULL (the output arrays or ``max_rows`` are full), ZERO (an index 0
    while reading one-based: the line at ``consumed`` is to be parsed again zero-based), ERROR
    (the line at ``consumed`` is not a sample: ``problem`` says which kind)."""
    limit = n
    if not final:  # up to the last newline: every line before it is whole
        while limit > 0 and buf[limit - 1] != 10:
            limit -= 1
    p = 0
    rows = 0
    ent = 0
    lines = 0
    rows_cap = min(labels.shape[0], max_rows)
    ent_cap = indices.shape[0]
    while p < limit:
        line = p
        while p < limit and _space(buf[p]):
            p += 1
        if p >= limit:
            break
        c = buf[p]
        if c == 10 or c == 35:  # a blank line, or a comment: to the next line
            while p < limit and buf[p] != 10:
                p += 1
            p += 1
            lines += 1
            continue
        if rows >= rows_cap:
            return line, rows, ent, lines, FULL, 0
        label, p, ok = _number(buf, p, limit, endptr)
        if not ok:
            return line, rows, ent, lines, ERROR, 1
        if not math.isfinite(label):
            return line, rows, ent, lines, ERROR, 10
        start = ent
        prev = -1
        while True:
            while p < limit and _space(buf[p]):
                p += 1
            if p >= limit or buf[p] == 10:
                break
            if buf[p] == 35:  # the rest of the line is a comment
                while p < limit and buf[p] != 10:
                    p += 1
                break
            t = p
            if limit - t > 4 and buf[t] == 113 and buf[t + 1] == 105 and buf[t + 2] == 100 and buf[t + 3] == 58:
                while p < limit and not _space(buf[p]) and buf[p] != 10:  # qid:n, ignored
                    p += 1
                continue
            negative = False
            if buf[p] == 45 or buf[p] == 43:
                negative = buf[p] == 45
                p += 1
            idx = 0
            nd = 0
            while p < limit and 48 <= buf[p] <= 57:
                if idx > 100000000000000000:
                    return line, rows, start, lines, ERROR, 9
                idx = idx * 10 + (np.int64(buf[p]) - 48)
                nd += 1
                p += 1
            if p >= limit or buf[p] != 58 or nd == 0:
                return line, rows, start, lines, ERROR, 3
            if negative and idx > 0:
                return line, rows, start, lines, ERROR, 4
            if idx <= prev:
                return line, rows, start, lines, ERROR, 5
            prev = idx
            v, p, ok = _number(buf, p + 1, limit, endptr)
            if not ok:
                return line, rows, start, lines, ERROR, 6
            if not math.isfinite(v):
                return line, rows, start, lines, ERROR, 7
            if idx - shift < 0:
                return line, rows, start, lines, ZERO, 0
            if ent >= ent_cap:
                return line, rows, start, lines, FULL, 0
            indices[ent] = idx - shift
            values[ent] = v
            ent += 1
        labels[rows] = label
        lengths[rows] = ent - start
        rows += 1
        p += 1  # past the newline
        lines += 1
    return min(p, n), rows, ent, lines, MORE, 0


# ------------------------------------------------------------- messages ---
def _word(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def check_line(text: str) -> Optional[str]:
    """What is wrong with one line ('label idx:value ...'), or None."""
    text = text.split("#", 1)[0].strip()
    if not text:
        return None
    label, *pairs = text.split()
    try:
        if "," in label:
            return f"the label {label!r} has several classes: multi-label lines are not supported"
        if not math.isfinite(_word(label)):
            return f"the label is {label!r}, not a finite number"
        previous = None
        for pair in pairs:
            key, sep, value = pair.partition(":")
            if not sep:
                return f"{pair!r} is not index:value"
            if key == "qid":
                continue
            try:
                index = int(key)
            except ValueError:
                return f"feature index {key!r} is not an integer"
            if index < 0:
                return f"feature index {index} is negative"
            if previous is not None and index <= previous:
                word = "repeats" if index == previous else "comes after"
                return f"feature index {index} {word} {previous}: indices must increase along a line"
            previous = index
            if not math.isfinite(_word(value)):
                return f"the value of feature {index} is {value!r}, not a finite number"
    except ValueError as error:
        return str(error)
    return None


def _malformed(path, line_number, line: bytes, problem: int) -> DataError:
    text = line.decode("utf-8", errors="replace")
    what = check_line(text) or PROBLEMS.get(problem, "it is not a sample")
    return DataError(f"Malformed LIBSVM file {path}, line {line_number}: {what}.")


# ------------------------------------------------------------ conversion ---
def convert_libsvm(path, folder, name: str = store_name("csr"), dtype="float64", n_features: Optional[int] = None,
                   max_samples: Optional[int] = None, buffer_bytes: int = BUFFER_BYTES,
                   progress: Optional[ProgressFn] = None, target: Optional[Path] = None):
    """Convert the LIBSVM file ``path`` into the store ``name`` in ``folder`` and its labels into
    ``target`` (default ``folder / 'y.npy'``); returns the store. ``n_features``: at least this
    many features (the file's own count when larger); ``max_samples``: the first rows only.
    ``progress(done, total)``: bytes of the file as stored."""
    path = Path(path)
    buffer_bytes = max(1 << 12, int(buffer_bytes))
    report = progress or (lambda done, total: None)
    max_rows = np.iinfo(np.int64).max if max_samples is None else int(max_samples)
    buf = np.empty(buffer_bytes + 1, np.uint8)  # +1: a NUL after the data (strtod stops there)
    rows_cap, ent_cap = max(16, buffer_bytes // 64), max(16, buffer_bytes // 16)  # more: a batch is written
    labels, lengths = np.empty(rows_cap), np.empty(rows_cap, np.int64)
    indices, values = np.empty(ent_cap, np.int64), np.empty(ent_cap)
    endptr = np.zeros(1, np.uint64)
    target = Path(folder) / "y.npy" if target is None else Path(target)
    stage = max(1 << 18, buffer_bytes // 4)  # each output file's staging buffer
    writer = SparseStoreWriter(folder, name, "csr", dtype=dtype, stage_bytes=stage)
    y = TargetWriter(target, stage)
    shift, fill, line_number, rows_done, eof = 1, 0, 0, 0, False
    try:
        with Source(path) as source:
            while True:
                if not eof:
                    got = source.readinto(memoryview(buf)[fill:buffer_bytes])
                    eof = fill + got < buffer_bytes
                    fill += got
                buf[fill] = 0
                consumed, rows, ent, lines, status, problem = _parse(
                    buf, fill, eof, shift, max_rows - rows_done, labels, lengths, indices, values, endptr)
                if rows:
                    writer.append(lengths[:rows], indices[:ent], values[:ent])
                    y.write(labels[:rows])
                    rows_done += rows
                line_number += lines
                if status == ERROR:
                    end = consumed + int(np.argmax(buf[consumed:fill] == 10)) if 10 in buf[consumed:fill] else fill
                    raise _malformed(path, line_number + 1, bytes(buf[consumed:end]), problem)
                if status == ZERO:  # an index 0: the file is zero-based after all
                    writer.shift_indices(1)
                    shift = 0
                if rows_done >= max_rows:
                    break
                if status == FULL and rows == 0:  # one line larger than the batch arrays: grow them
                    ent_cap *= 2
                    indices, values = np.empty(ent_cap, np.int64), np.empty(ent_cap)
                rest = fill - consumed
                if status == MORE and eof and rest == 0:
                    break
                if status == MORE and rest == buffer_bytes:  # one line larger than the text buffer: grow it
                    buffer_bytes *= 2
                    bigger = np.empty(buffer_bytes + 1, np.uint8)
                    bigger[:rest] = buf[:rest]
                    buf = bigger
                else:
                    buf[:rest] = buf[consumed:fill]
                fill = rest
                report(source.position, source.size)
        if rows_done == 0:
            raise DataError(f"LIBSVM file {path} holds no sample (empty, or comments only).")
        length = max(int(n_features or 0), writer.max_index + 1)
        y.close()
        store = writer.close(length=length)
        report(source.size, source.size)
        return store
    except BaseException:
        writer.abort()
        y.abort()
        target.unlink(missing_ok=True)
        raise


def make_libsvm(c: LibsvmData, out: Path, base_dir: Path, progress: ProgressFn):
    """The cache's maker for ``data=libsvm``: the file converted to the sparse store ``X_csr``
    (and ``y.npy``) in the cache entry; returns the checksums computed while writing."""
    from tasks.data.makers import binary_target_in_place

    store = convert_libsvm(resolve_path(c.path, base_dir), out, dtype=c.dtype, n_features=c.n_features,
                           max_samples=c.max_samples, progress=progress)
    binary_target_in_place(out / "y.npy", c.positive_class, c.name)
    return store.checksums
