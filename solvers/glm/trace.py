"""The per-round record every solver emits, in the project's metric vocabulary."""

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

COLUMNS = ("round", "time_s", "epoch", "primal", "dual", "gap", "rel_gap", "certified", "bytes_h2d", "swaps",
           "n_resident")


def _require(named, message):
    """KeyError naming the COLUMNS that ``named`` lacks."""
    missing = set(COLUMNS) - named.keys()
    if missing:
        raise KeyError(f"{message} {sorted(missing)}")


class Trace:
    """Rows of a solve; ``callback(row)`` sees each row as it is recorded."""

    def __init__(self, callback=None):
        self.rows = []
        self.callback = callback

    def record(self, **row):
        _require(row, "trace row lacks")
        self.rows.append(row)
        if self.callback is not None:
            self.callback(dict(row))

    def extend(self, **columns):
        """Rows from columns of one length (arrays, or scalars for every row), as ``record`` adds
        them one at a time: a compiled loop's slice hands over its rows at once (~1 us a row
        where ``record`` takes ~4, a round of a small problem's loop ~2.5)."""
        _require(columns, "trace rows lack")
        length = max(np.size(v) for v in columns.values())
        keys = list(columns)
        for values in zip(*(np.broadcast_to(np.asarray(columns[k]), (length,)).tolist() for k in keys)):
            row = dict(zip(keys, values))
            self.rows.append(row)
            if self.callback is not None:
                self.callback(dict(row))

    def frame(self):
        """The rows as a table: COLUMNS, then any extra columns a solver records."""
        extra = [k for k in (self.rows[0] if self.rows else {}) if k not in COLUMNS]
        return pd.DataFrame(self.rows, columns=list(COLUMNS) + extra)


@dataclass
class SolveResult:
    """What every solver returns: the final point, its certificate and the trace."""

    a: np.ndarray            # coefficients (regression) or dual variables (classification)
    v: Optional[np.ndarray]  # A a (w for the classifiers), when the solver has it
    trace: pd.DataFrame
    status: str              # "converged", "max_epochs" or "max_time"
    primal: float
    dual: float
    gap: float
    rel_gap: float
    time_s: float
    epochs: float
    n_rounds: int
    bytes_h2d: int = 0
    prefetch_hits: int = 0     # swapped-in coordinates already on the device (DuHL's prefetch)
    bytes_prefetched: int = 0  # bytes copied ahead of their swap (part of bytes_h2d)
    notes: list = field(default_factory=list)  # what a user should know (a setting adjusted)
    iterates: Optional[np.ndarray] = None  # a at the first trace rows, when asked to keep them
    settings: dict = field(default_factory=dict)  # choices made from measured rates: passed back, the same run

    @property
    def converged(self):
        return self.status == "converged"
