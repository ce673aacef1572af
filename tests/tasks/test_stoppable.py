"""tasks/stoppable.py: fits in a forked child that a limit or a signal stops at once, even
inside a C call that never returns to Python (time.sleep, a long scikit-learn fit)."""

import os
import signal
import time

import numpy as np
import pytest

from tasks.stoppable import FitCut, StoppableFits

SLACK_S = 2.0  # fork, pipe and kill on a loaded 2-core machine: what a stop may take beyond its limit


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_results_and_the_childs_own_fit_time_come_back():
    fits = {"sum": lambda: np.arange(10.0).sum(), "nap": lambda: time.sleep(0.2) or "woke"}
    with StoppableFits(lambda key: fits[key]) as child:
        assert child.run("sum", None) == (45.0, pytest.approx(0.0, abs=0.1))
        result, seconds = child.run("nap", 5.0)
        assert result == "woke" and 0.2 <= seconds < 0.2 + SLACK_S
        assert child.pid != os.getpid() and child.startup_s > 0
        pid = child.pid
    assert _gone(pid)


def test_a_fit_past_its_limit_is_killed_and_no_fit_runs_after():
    with StoppableFits(lambda key: lambda: time.sleep(60)) as child:
        pid = child.pid
        start = time.perf_counter()
        with pytest.raises(FitCut) as cut:
            child.run("long", 0.5)
        took = time.perf_counter() - start
        assert 0.5 <= cut.value.seconds < 0.5 + SLACK_S and took < 0.5 + SLACK_S
        assert _gone(pid)
        with pytest.raises(RuntimeError, match="stopped"):
            child.run("long", 0.5)


def test_a_build_past_the_fits_limit_is_killed_too():
    """A fit's build is untimed but not unbounded: Vowpal Wabbit's --bfgs workspace on a million
    rows was seen building for more than 8 minutes of an arm's 300 s."""
    def make_fit(key):
        time.sleep(60)
        return lambda: "never"

    with StoppableFits(make_fit) as child:
        pid = child.pid
        start = time.perf_counter()
        with pytest.raises(FitCut, match="build") as cut:
            child.run("slow build", 0.5)
        assert cut.value.building and 0.5 <= cut.value.seconds < 0.5 + SLACK_S
        assert time.perf_counter() - start < 0.5 + SLACK_S and _gone(pid)


def test_the_fits_exception_is_raised_in_the_parent_and_the_child_serves_on():
    def bad():
        raise ValueError("The 'alpha' parameter of Lasso must be >= 0. Got -1 instead.")

    with StoppableFits(lambda key: bad if key == "bad" else (lambda: "fine")) as child:
        with pytest.raises(ValueError, match="'alpha' parameter"):
            child.run("bad", None)
        assert child.run("good", None)[0] == "fine"


def test_a_child_killed_from_outside_is_an_error_not_a_hang():
    with StoppableFits(lambda key: lambda: time.sleep(60)) as child:
        os.kill(child.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="ended without a result"):
            child.run("long", None)


def test_a_signal_in_the_parent_interrupts_the_wait_and_kills_the_fit():
    """As SIGTERM's handler (pipelines.tracking.stop_on_sigterm) raises SystemExit: an alarm
    whose handler raises ends a fit with no limit within the slack, and the child is gone."""
    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with StoppableFits(lambda key: lambda: time.sleep(60)) as child:
            pid = child.pid
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            start = time.perf_counter()
            with pytest.raises(Stop):
                child.run("long", None)
            assert time.perf_counter() - start < 0.5 + SLACK_S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone(pid)


def _hold(mb, then_sleep=0.0):
    """A fit that touches ``mb`` MB of new memory (np.ones writes every page) and returns its sum."""
    def fit():
        block = np.ones(mb * 1_000_000 // 8)
        time.sleep(then_sleep)
        return float(block.sum())
    return fit


@pytest.mark.parametrize("cut", [False, True])
def test_the_childs_memory_counts_in_the_arms_peak_rss(cut):
    """The child's fit touches 200 MB the parent never holds: the child's rise is read from
    /proc (after the fit, or before the kill of a fit cut at its limit) and ArmResources'
    peak_rss_delta includes it, while the parent's own rise stays small."""
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("VmHWM reset needs Linux")
    from tasks.resources import ArmResources, peak_rss_bytes
    with ArmResources() as used:
        parent_peak = peak_rss_bytes()
        with StoppableFits(lambda key: _hold(200, then_sleep=60 if cut else 0)) as child:
            if cut:
                with pytest.raises(FitCut):
                    child.run("hold", 1.0)
            else:
                assert child.run("hold", None)[0] == 200_000_000 // 8
            rise = child.peak_rss_delta
        parent_rise = peak_rss_bytes() - parent_peak
    assert 200e6 <= rise < 200e6 + 30e6
    assert parent_rise < 30e6
    assert rise <= used.peak_rss_delta < rise + 30e6 + max(parent_rise, 0)
