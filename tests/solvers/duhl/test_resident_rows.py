"""The dense resident set's rows under random swaps and prefetches: what it holds, against
Python sets (the oracle), and the data its rows hold, against the matrix."""

import numpy as np
import pytest

from solvers.duhl.gaps.memory import GapMemory, RefreshPlan
from solvers.duhl.block.resident import make_resident_set
from solvers.glm.problems import make_problem


@pytest.mark.parametrize("stage", [0.0, 0.4])
def test_swaps_and_prefetches_keep_rows_and_counts_exact(stage):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 7))
    problem = make_problem("svm", X, np.sign(X[:, 0]), C=1.0, fit_intercept=False)
    rset = make_resident_set(problem, 20 * problem.coord_bytes[0], prefetch=stage)
    n_rows = rset.row_coord.shape[0]
    slots = rset.capacity_bytes // int(problem.coord_bytes[0])
    assert n_rows == slots + (8 if stage else 0)
    block, staged, hits = set(), set(), 0
    for step in range(60):
        if stage and step % 2:
            ahead = rng.choice(60, 12, replace=False)
            before = set(rset.row_coord[rset.row_coord >= 0].tolist())
            wanted = [i for i in ahead.tolist() if i not in before]
            usable = n_rows - len(block | (before & set(ahead.tolist())))
            placed = min(usable, len(wanted))
            rset.prefetch(ahead)
            on_device = set(rset.row_coord[rset.row_coord >= 0].tolist())
            # the wanted coordinates not held go, in order, into rows outside the block that hold
            # none of them, empty rows first; nothing in the block moves, no wanted one leaves
            assert block <= on_device and set(rset.resident().tolist()) == block
            assert before & set(ahead.tolist()) <= on_device and set(wanted[:placed]) <= on_device
            assert len(on_device) == len(before) + min(placed, n_rows - len(before))
            staged = on_device - block
        k = int(rng.integers(1, slots + 1))
        coords = rng.choice(60, k, replace=False)
        if step % 3:
            coords = np.sort(coords)
        before = set(rset.row_coord[rset.row_coord >= 0].tolist())
        joined = rset.assign(coords)
        new = set(coords.tolist())
        # a coordinate no row holds goes to an empty row while there is one
        assert np.count_nonzero(rset.row_coord >= 0) == len(before) + min(len(new - before), n_rows - len(before))
        hits += len((new - block) & staged)
        assert joined == len(new - block)
        assert rset.prefetch_hits == hits
        assert set(rset.resident().tolist()) == new
        rows = rset._visit(None)
        assert np.array_equal(rset.row_coord[rows], np.sort(coords))
        held = rset.row_coord >= 0
        np.testing.assert_array_equal(rset.data[:n_rows][held], problem.A[rset.row_coord[held]])
        assert np.array_equal(rset.slot[rset.row_coord[held]], np.flatnonzero(held))
        assert np.count_nonzero(rset.slot >= 0) == np.count_nonzero(held)
        active = np.sort(rng.choice(coords, max(1, k // 2), replace=False))
        assert np.array_equal(rset.row_coord[rset._visit(active)], active)
        block = new
        staged = set(rset.row_coord[held].tolist()) - block


def test_plan_takes_the_oldest_stale_in_increasing_order():
    """The refresh plan (solvers.duhl.gaps.memory.RefreshPlan) against its definition: the stale
    coordinates from the cursor on, wrapping, while their bytes fit (at least one); returned sorted."""
    rng = np.random.default_rng(1)
    n = 50
    coord_bytes = rng.integers(1, 9, n).astype(np.int64)
    memory = GapMemory(np.ones(n), np.zeros(n), coord_bytes)
    plan = RefreshPlan(planning=True)
    cursor = 0
    for _ in range(40):
        memory.fresh[:] = rng.random(n) < 0.3
        stale = np.flatnonzero(~memory.fresh)
        budget = int(rng.integers(0, 80))
        order = [i for i in stale if i >= cursor] + [i for i in stale if i < cursor]
        take, used = [], 0
        for i in order:
            if used + coord_bytes[i] > budget and take:
                break
            take.append(i)
            used += coord_bytes[i]
        got = plan.plan(memory.stale(), coord_bytes, budget)
        assert np.array_equal(got, np.sort(take))
        if take:
            cursor = take[-1] + 1
