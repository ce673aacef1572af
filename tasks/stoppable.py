"""A peer's fits in a child process, so that they can be stopped.

A peer library's fit is often one long C call (scikit-learn's coordinate descent,
liblinear, Snap ML) that never returns to Python until it is done: Python cannot cut it at
an arm's ``max_time``, and a SIGTERM or Ctrl-C is only handled once it returns. So a
peer's fits run in one forked child per solve: the data and everything already imported
or compiled are shared copy-on-write (nothing is pickled but the requests and the
results), the child times each fit itself (the fork and the transfers are not counted),
and the parent waits on a pipe, interruptibly, until the fit's deadline, then kills the
child. A signal that reaches the parent ends the wait at once (the handler's exception
propagates) and the child is killed on the way out; a child whose parent dies is killed
by the kernel (``PR_SET_PDEATHSIG``). One child serves the whole schedule, so pages that
the first fit copied on write stay its own for the next fits. What the child's fits add to
its memory (its peak RSS above its RSS when it was ready: the pages it copied or allocated)
is read by the parent from ``/proc`` after each fit and before a kill, and noted for the
arm's peak RSS (tasks/resources.py).
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import time
from typing import Any, Callable, Optional, Tuple

from tasks.resources import note_child_peak, peak_rss_bytes, reset_peak_rss, rss_bytes

START_TIMEOUT_S = 60.0  # a child that never says it is ready (only a broken fork could do that)


class FitCut(Exception):
    """The fit (or its build, ``building``) ran for its limit and was killed (``seconds``: how
    long it ran)."""

    def __init__(self, seconds: float, building: bool = False):
        what = "the fit's build" if building else "the fit"
        super().__init__(f"{what} ran {seconds:.3f} s, its limit, and was stopped")
        self.seconds, self.building = seconds, building


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel sends the child SIGKILL when the parent thread that forked it dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _serve(make_fit: Callable[[Any], Callable[[], Any]], conn: Any, parent: int) -> None:
    """The child: for each request ``key``, build ``make_fit(key)`` (untimed; kept for the
    repeats of the same key), send ("start", t0), fit, send ("done", seconds, result)."""
    code = 1
    try:
        gc.disable()  # a collection would touch every object the parent holds: a copy of its heap
        _die_with_parent(parent)
        for sig in (signal.SIGTERM, signal.SIGINT):  # die at once, even inside a C call
            signal.signal(sig, signal.SIG_DFL)
        reset_peak_rss()  # the child's peak from here: the parent's pages it shares are at its start
        conn.send(("ready", rss_bytes()))
        built = (object(), None)
        while True:
            key = conn.recv()
            if key is None:
                break
            try:
                if built[0] != key:
                    built = (key, make_fit(key))
                t0 = time.perf_counter()  # CLOCK_MONOTONIC: the parent's clock too
                conn.send(("start", t0))
                result = built[1]()
                conn.send(("done", time.perf_counter() - t0, result))
            except Exception as error:  # reported to the parent, which raises it
                try:
                    conn.send(("error", error))
                except Exception:  # an exception that does not pickle: its type and message
                    conn.send(("error", RuntimeError(f"{type(error).__name__}: {error}")))
        code = 0
    except BaseException:  # never unwind into the parent's stack (its runs, its handlers)
        pass
    finally:
        os._exit(code)  # no atexit handlers, no flushing of the parent's buffers


class StoppableFits:
    """``with StoppableFits(make_fit) as fits: result, seconds = fits.run(key, limit)``: each
    ``make_fit(key)()`` runs in one forked child; ``fits.startup_s``: the fork until the child
    was ready (not counted in any fit). Raises :class:`FitCut` when a fit ran ``limit``
    seconds, or its build did (``None``: no limit; the child is killed, no fit runs after), the fit's own
    exception when it raised one, RuntimeError when the child died without a word. A signal
    handler's exception in the parent (SIGTERM's SystemExit, Ctrl-C's KeyboardInterrupt)
    propagates at once; the child is always killed and reaped on exit."""

    def __init__(self, make_fit: Callable[[Any], Callable[[], Any]]):
        self.make_fit = make_fit
        self.pid: Optional[int] = None
        self.startup_s = 0.0
        self.peak_rss_delta = 0.0  # the child's largest rise above its RSS when it was ready

    def __enter__(self) -> "StoppableFits":
        self.conn, child_end = multiprocessing.Pipe()
        forked, parent = time.perf_counter(), os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            self.conn.close()
            _serve(self.make_fit, child_end, parent)
        child_end.close()
        try:
            ready = self._receive(forked + START_TIMEOUT_S)
            if ready is None:
                raise RuntimeError(f"the peer's fit process did not start within {START_TIMEOUT_S:.0f} s")
            self._rss0 = ready[1]
        except BaseException:
            self.__exit__()
            raise
        self.startup_s = time.perf_counter() - forked
        return self

    def run(self, key: Any, limit: Optional[float]) -> Tuple[Any, float]:
        """(the fit's result, its seconds by the child's clock)."""
        if self.pid is None:
            raise RuntimeError("this peer's fit process was stopped: no fit runs after a cut")
        try:
            self.conn.send(key)
        except OSError:  # a child that died: said by _receive
            pass
        # after the build (untimed: it may copy or hash the data), which gets the same limit: a fit
        # whose build alone outlasts the time left has no time to run
        asked = time.perf_counter()
        message = self._receive(None if limit is None else asked + max(limit, 0.0))
        if message is None:
            self._stop()
            raise FitCut(time.perf_counter() - asked, building=True)
        if message[0] == "error":
            raise message[1]
        started = message[1]
        message = self._receive(None if limit is None else started + max(limit, 0.0))
        self._note_peak()
        if message is None:
            self._stop()
            raise FitCut(time.perf_counter() - started)
        if message[0] == "error":
            raise message[1]
        return message[2], message[1]

    def _note_peak(self) -> None:
        """The child's peak RSS so far above its start, for this object and the arm's count."""
        if self.pid is not None:
            self.peak_rss_delta = max(self.peak_rss_delta, peak_rss_bytes(str(self.pid)) - self._rss0)
            note_child_peak(self.peak_rss_delta)

    def _receive(self, deadline: Optional[float]):
        """The child's next message, or None at the deadline; EOF (the child died): RuntimeError."""
        timeout = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
        if not self.conn.poll(timeout):  # interruptible: a signal handler's exception propagates
            return None
        try:
            return self.conn.recv()
        except (EOFError, OSError):  # closed or reset by a child that died
            self._stop()
            raise RuntimeError("the peer's fit process ended without a result (killed from outside?)") from None

    def _stop(self) -> None:
        """Kill (if still running) and reap the child."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # already reaped
            pass

    def __exit__(self, *exc: Any) -> None:
        try:
            self.conn.close()
        finally:
            self._stop()
