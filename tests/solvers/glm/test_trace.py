"""solvers.glm.trace: rows added at once (``extend``) are the rows ``record`` adds one by one."""

import numpy as np
import pandas as pd
import pytest

from solvers.glm.trace import COLUMNS, Trace


def _columns(k):
    rng = np.random.default_rng(0)
    cols = {c: rng.random(k) for c in COLUMNS}
    for c in ("round", "certified", "bytes_h2d", "swaps", "n_resident"):
        cols[c] = rng.integers(0, 1000, k)
    cols["certified"] = 1  # a scalar: every row's
    return cols


def test_extend_adds_the_rows_record_adds():
    cols = _columns(7)
    seen_one, seen_many = [], []
    one, many = Trace(seen_one.append), Trace(seen_many.append)
    for i in range(7):
        one.record(**{c: (v if np.isscalar(v) else v[i].item()) for c, v in cols.items()})
    many.extend(**cols)
    assert many.rows == one.rows and seen_many == seen_one and len(seen_many) == 7
    pd.testing.assert_frame_equal(many.frame(), one.frame())
    assert many.frame()["round"].dtype == np.int64 and many.frame()["certified"].tolist() == [1] * 7


def test_extend_names_what_is_missing():
    cols = _columns(3)
    del cols["gap"]
    with pytest.raises(KeyError, match="gap"):
        Trace().extend(**cols)
