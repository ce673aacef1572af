"""Budgets: a user's ``memory_budget`` in bytes, and its split into resident set and staging
memory, in whole units (a dense row, a sparse entry); ``max_epochs`` in whole coordinate updates."""

import math

import scipy.sparse as sp

from solvers.glm.checks import parse_size


def parse_budget(memory_budget, total_bytes):
    """Bytes the device may hold: None -> all, a fraction of the data, or a size string
    (the form is checked where the user sets it, by solvers.glm.checks)."""
    if memory_budget is None:
        return None
    if isinstance(memory_budget, str):
        return parse_size(memory_budget)
    return int(memory_budget * total_bytes)


def holds_part(memory_budget, total_bytes):
    """Whether ``memory_budget`` holds less than ``total_bytes`` of data (None holds it all)."""
    budget = parse_budget(memory_budget, total_bytes)
    return budget is not None and budget < total_bytes


def update_budget(max_epochs, n):
    """The coordinate updates ``max_epochs`` epochs of ``n`` coordinates allow, a whole number: a
    product a rounding error short of one (158/600 * 600 = 157.99999999999997) would leave a last
    round no update to make, and the budget would never be reached."""
    x = max_epochs * n
    if math.isinf(x):
        return x
    whole = round(x)
    return float(whole if abs(x - whole) <= 1e-9 * max(1.0, x) else math.floor(x))


def unit_bytes(A):
    """Bytes of a resident set's unit of memory: a sparse entry (value and index), a dense row."""
    if sp.issparse(A):
        return A.data.itemsize + A.indices.itemsize
    if is_sparse_on_disk(A):
        return A.store.index_dtype.itemsize + A.dtype.itemsize
    return A.shape[1] * A.itemsize


def is_sparse_on_disk(A):
    """Whether A is a sparse store on disk (solvers.storage.sparse_on_disk.SparseOnDisk)."""
    return getattr(A, "on_disk", False) and hasattr(A, "read_block")


def split_budget(problem, budget, prefetch):
    """(resident bytes, staging bytes) of a budget in bytes, in whole units (a dense
    row, a sparse entry): a staging share too small for one unit takes nothing from
    the resident set, and a budget that holds all data needs no staging."""
    unit = unit_bytes(problem.A)
    total = int(problem.coord_bytes.sum())
    staging = int(prefetch * budget) // unit if budget < total else 0
    return (budget // unit - staging) * unit, staging * unit
