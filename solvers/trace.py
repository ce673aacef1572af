"""The per-round record every solver emits, in the project's metric vocabulary."""

import pandas as pd

COLUMNS = ("round", "time_s", "epoch", "primal", "dual", "gap", "rel_gap", "bytes_h2d", "swaps",
           "n_resident")


class Trace:
    """Rows of a solve; ``callback(row)`` sees each row as it is recorded."""

    def __init__(self, callback=None):
        self.rows = []
        self.callback = callback

    def record(self, **row):
        missing = set(COLUMNS) - row.keys()
        if missing:
            raise KeyError(f"trace row lacks {sorted(missing)}")
        self.rows.append(row)
        if self.callback is not None:
            self.callback(dict(row))

    def frame(self):
        return pd.DataFrame(self.rows, columns=list(COLUMNS))
