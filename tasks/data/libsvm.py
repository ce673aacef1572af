"""LIBSVM / svmlight text files: read with scikit-learn's loader, and when it refuses a
file (or the file holds no sample, or a value that is not finite), one line naming the
file, the line number and what is wrong."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp

from tasks.data.configs import LibsvmData, resolve_path
from tasks.data.errors import DataError
from tasks.data.makers import ProgressFn, binary_target, save_sparse


def _number(text: str) -> float:
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
        for part in label.split(","):
            _number(part)
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
            if not math.isfinite(_number(value)):
                return f"the value of feature {index} is {value!r}, not a finite number"
    except ValueError as error:
        return str(error)
    return None


def first_bad_line(path: Path) -> Optional[tuple]:
    """(line number, what is wrong) of the first line that is not a valid sample."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            problem = check_line(raw.decode("utf-8", errors="replace"))
            if problem:
                return number, problem
    return None


def read(path: Path, dtype: str):
    """(X, y) of a LIBSVM file, or a DataError naming the file and the bad line."""
    from sklearn.datasets import load_svmlight_file

    try:
        X, y = load_svmlight_file(str(path), dtype=np.dtype(dtype))
    except ValueError as error:
        bad = first_bad_line(path)
        where = f"line {bad[0]}: {bad[1]}" if bad else f"scikit-learn's loader refused it ({error})"
        raise DataError(f"Malformed LIBSVM file {path}, {where}.") from None
    if X.shape[0] == 0:
        raise DataError(f"LIBSVM file {path} holds no sample (empty, or comments only).")
    if not np.isfinite(X.data).all() or not np.isfinite(y).all():
        bad = first_bad_line(path)
        raise DataError(f"Malformed LIBSVM file {path}, line {bad[0]}: {bad[1]}." if bad
                        else f"LIBSVM file {path} has a value that is not finite.")
    return X, y


def make_libsvm(c: LibsvmData, out: Path, base_dir: Path, progress: ProgressFn) -> None:
    X, y = read(resolve_path(c.path, base_dir), c.dtype)
    if c.n_features is not None and X.shape[1] < c.n_features:  # n_features is a lower bound
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], c.n_features))
    if c.max_samples is not None:
        X, y = X[: c.max_samples], y[: c.max_samples]
    progress(1, 2)
    save_sparse(X, out)
    np.save(out / "y.npy", binary_target(np.asarray(y, dtype=np.float64), c.positive_class, c.name))
    progress(2, 2)
