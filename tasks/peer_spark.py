"""Spark MLlib's LogisticRegression as an arm: the distributed engine users pick for GLMs, here in
local mode on this machine's cores, on the same data, scored by our certificate.

The objective, written out. Ours (``model=logistic``, solved in the dual; no intercept, or
liblinear's penalised constant feature)::

    P(w) = 1/2 ||w||^2 + C sum_i log(1 + exp(-y_i <w, x_i>)),     y_i in {-1, +1}

Spark's (``LogisticRegression(family="binomial", fitIntercept=False, standardization=False,
elasticNetParam=0, regParam=lambda)``; labels l_i = (y_i + 1) / 2 in {0, 1})::

    L(w) = 1/n sum_i log(1 + exp(-y_i <w, x_i>)) + lambda/2 ||w||^2

so n C L(w) = C sum_i loss_i + (n C lambda / 2) ||w||^2 = P(w) exactly when lambda = 1 / (n C):
the same minimiser, and P = n C L. ``standardization=False`` matters: with Spark's default (True)
the penalty is on the coefficients of standardised features, another objective. Spark's own
intercept is unpenalised; ours (``fit_intercept``) is a penalised constant column, given to Spark
as a column of the data (as liblinear does), with Spark's intercept off.

Spark fits from scratch at a schedule of iteration caps (``maxIter`` 1, 2, 4, ... with its
own tolerance at 1e-12, so the cap stops each fit); each fit is timed alone (wall time of
``fit``: Spark reads the data from Parquet, caches it and runs L-BFGS), and its w is scored by
OUR objective code (tasks/peer_scores.py: the primal P(w), a dual point from w by the KKT
conditions, the certified gap), off the clock. The data goes to Parquet once (untimed, in
chunks: never whole in RAM; a problem on disk is read a chunk at a time), each sample's row and
label flipped by a random sign as the other peers see them (the loss depends on y_i <w, x_i>
only). The Spark session (its JVM) starts in the warm-up and lives as long as this process;
its peak memory is added to the arm's ``peak_rss_delta`` as a child's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import warnings

import numpy as np

from solvers.glm.trace import SolveResult, Trace
from tasks.peer_scores import evaluate, flip_signs
from tasks.resources import note_child_peak, peak_rss_bytes, reset_peak_rss, rss_bytes

SPARK_ITERS = tuple(2 ** k for k in range(0, 10))  # maxIter 1 .. 512
PARQUET_ROWS = 1 << 14  # samples a Parquet row group holds (and a chunk read from disk)
_SESSION: dict = {}  # this process's Spark session and its JVM's pid


def missing_reason():
    """None when pyspark imports and java runs, else why not (one line)."""
    try:
        import pyspark  # noqa: F401
    except Exception as error:
        return f"pyspark is not importable ({type(error).__name__}: {error}); pip install -e .[peers]"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Spark needs Java 17: apt-get install -y openjdk-17-jre-headless"
    return None


def session(cores=None, driver_memory="2g"):
    """This process's SparkSession in local mode on ``cores`` cores (None: all this process may use)."""
    key = (cores, driver_memory)
    if _SESSION.get("key") == key:
        return _SESSION["spark"]
    if _SESSION:
        _SESSION["spark"].stop()
        _SESSION.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's notice about pandas >= 3
        from pyspark.sql import SparkSession

        n = cores or len(os.sched_getaffinity(0))
        spark = (SparkSession.builder.master(f"local[{n}]").appName("duhl-lab peer_spark")
                 .config("spark.driver.memory", driver_memory).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", str(n))
                 .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    _SESSION.update(key=key, spark=spark, pid=pid, cores=n)
    return spark


def signed_rows(problem, seed=0):
    """Yields (rows, labels in {0, 1}) of the problem's samples, a chunk at a time: each sample's
    signed row A_i = y_i x_i (its intercept column too, when fitted) times a random sign t_i, label
    t_i (the same objective; tasks.peer_scores.flip_signs)."""
    A, n = problem.A, problem.n_coords
    t = flip_signs(n, seed)
    if getattr(A, "on_disk", False):
        if not hasattr(A, "chunks") or hasattr(A, "coordinate_bytes"):
            raise ValueError("Spark's arm reads dense data on disk (a sparse store: not yet)")
        width = A.n_features + (A.intercept is not None)
        for lo in range(0, n, PARQUET_ROWS):
            coords = np.arange(lo, min(n, lo + PARQUET_ROWS))
            for part, rows in A.chunks(coords):
                yield np.asarray(rows[:, :width], dtype=np.float64) * t[part, None], (t[part] + 1) / 2
        return
    for lo in range(0, n, PARQUET_ROWS):
        rows = A[lo:lo + PARQUET_ROWS]
        rows = rows.toarray() if hasattr(rows, "toarray") else np.asarray(rows, dtype=np.float64)
        yield rows * t[lo:lo + PARQUET_ROWS, None], (t[lo:lo + PARQUET_ROWS] + 1) / 2


def write_parquet(problem, path) -> int:
    """The problem's data as Parquet (``features``: a fixed-size list of doubles, ``label``), a chunk at
    a time; returns the number of features."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer, width = None, 0
    try:
        for rows, labels in signed_rows(problem):
            width = rows.shape[1]
            table = pa.table({"features": pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), width),
                              "label": pa.array(labels)})
            if writer is None:
                writer = pq.ParquetWriter(str(path), table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return width


class SparkPeer:
    """Spark MLlib's LogisticRegression (``pip install -e .[peers]``, Java 17) on the problem's data, in
    local mode, at a schedule of iteration caps, each fit scored by our objective (see the module).

    Parameters
    ----------
    tol : float
        Stop the schedule once our rel_gap of a fit is <= tol.
    max_time : float or None
        Seconds of fitting for the whole schedule: no fit starts once they are spent, and the fit in
        flight is cancelled (Spark's cancelAllJobs) when it reaches what is left.
    max_epochs : float
        Caps maxIter (the warm-up uses a tiny cap).
    cores : int or None
        Spark's local[cores] (None: every core this process may use: the same cores as the other arms).
    driver_memory : str
        The JVM's heap (spark.driver.memory); local mode runs everything in it.
    folder : str or None
        Where the Parquet copy goes (None: the system's temporary folder); removed after the solve.
    memory_budget, host_budget, selection, local_epochs, device, random_state : accepted so a peer arm
        shares the experiment's solver settings; ignored (Spark holds the data as it decides).
    """

    library = "peer_spark"
    progress_metric = "rel_gap"

    def __init__(self, tol=1e-6, max_time=None, max_epochs=100000, cores=None, driver_memory="2g", folder=None,
                 memory_budget=None, host_budget=None, selection="gap", local_epochs=1, device="cpu", random_state=0,
                 callback=None):
        if not (isinstance(tol, (int, float)) and tol >= 0):
            raise ValueError(f"The 'tol' parameter of peer_spark must be a float >= 0. Got {tol!r} instead.")
        if not (max_time is None or (isinstance(max_time, (int, float)) and max_time >= 0)):
            raise ValueError(f"The 'max_time' parameter of peer_spark must be a float >= 0 or None. "
                             f"Got {max_time!r} instead.")
        if not (cores is None or (isinstance(cores, int) and cores >= 1)):
            raise ValueError(f"The 'cores' parameter of peer_spark must be an int >= 1 or None. Got {cores!r} instead.")
        self.tol, self.max_time, self.max_epochs = tol, max_time, max_epochs
        self.cores, self.driver_memory, self.folder = cores, driver_memory, folder
        self.callback = callback
        self.memory_budget, self.host_budget, self.selection = memory_budget, host_budget, selection
        self.local_epochs, self.device, self.random_state = local_epochs, device, random_state

    def _check(self, problem):
        reason = missing_reason()
        if reason:
            raise ImportError(reason)
        if problem.name != "logistic":
            raise ValueError(f"Spark's arm here is logistic regression (LogisticRegression). Got model "
                             f"{problem.name!r} instead.")

    def warm_up(self, problem):
        """Start the JVM and fit once on ``problem`` (a miniature), untimed; returns seconds."""
        start = time.perf_counter()
        self._check(problem)
        folder = tempfile.mkdtemp(prefix="spark-", dir=self.folder)
        try:
            write_parquet(problem, os.path.join(folder, "data.parquet"))
            self._fit(problem, os.path.join(folder, "data.parquet"), 2)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return time.perf_counter() - start

    def _fit(self, problem, path, max_iter):
        """w of one fit capped at ``max_iter`` iterations, and its wall time."""
        from pyspark.ml.classification import LogisticRegression
        from pyspark.ml.functions import array_to_vector

        spark = session(self.cores, self.driver_memory)
        data = spark.read.parquet(path).select(array_to_vector("features").alias("features"), "label")
        n, C = problem.n_coords, float(problem.params["C"])
        fit = LogisticRegression(maxIter=int(max_iter), regParam=1.0 / (n * C), elasticNetParam=0.0,
                                 fitIntercept=False, standardization=False, tol=1e-12, family="binomial")
        start = time.perf_counter()
        model = fit.fit(data)
        w = model.coefficients.toArray()
        return np.asarray(w, dtype=np.float64), time.perf_counter() - start, model.summary.totalIterations

    def _row(self, problem, rnd, time_s, knob, w):
        full = np.zeros(problem.A.shape[1])  # (a row on disk may be padded past the features Spark sees)
        full[:w.shape[0]] = w
        primal, dual, gap = evaluate(problem, full)
        rel = max(gap, 0.0) / problem.P0 if problem.P0 > 0 else 0.0
        return dict(round=rnd, time_s=time_s, epoch=float(knob), primal=primal, dual=dual, gap=gap, rel_gap=rel,
                    certified=1, bytes_h2d=0, swaps=0, n_resident=problem.n_coords)

    def solve(self, problem):
        self._check(problem)
        folder = tempfile.mkdtemp(prefix="spark-", dir=self.folder)
        path = os.path.join(folder, "data.parquet")
        try:
            start = time.perf_counter()
            write_parquet(problem, path)
            parquet_s = time.perf_counter() - start
            return self._schedule(problem, path, parquet_s)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _schedule(self, problem, path, parquet_s):
        spark = session(self.cores, self.driver_memory)
        pid = _SESSION["pid"]
        reset_peak_rss(pid)  # the JVM's peak from now: this schedule's
        jvm0 = rss_bytes(pid)
        trace = Trace(self.callback)
        width = self._width(problem)
        row0 = self._row(problem, 0, 0.0, 0, np.zeros(width))
        trace.record(**row0)
        best = (np.zeros(width), row0, 0.0, 0.0)
        spent, status, iters_seen, stalled = 0.0, "max_epochs", None, 0
        for rnd, knob in enumerate([k for k in SPARK_ITERS if k <= self.max_epochs] or [1], start=1):
            if self.max_time is not None and spent >= self.max_time:
                status = "max_time"
                break
            cut = threading.Event()
            timer = None
            if self.max_time is not None:  # the fit in flight stops at the time left

                def stop():
                    cut.set()
                    spark.sparkContext.cancelAllJobs()

                timer = threading.Timer(max(self.max_time - spent, 0.0), stop)
                timer.start()
            try:
                w, seconds, iters = self._fit(problem, path, knob)
            except Exception:  # cancelled at max_time (a Py4J error wraps Spark's), or a failure
                if cut.is_set():
                    status = "max_time"
                    break
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            spent += seconds
            row = self._row(problem, rnd, seconds, knob, w)
            trace.record(**row)
            if row["rel_gap"] < best[1]["rel_gap"]:
                best = (w, row, seconds, float(knob))
            if row["rel_gap"] <= self.tol:
                status = "converged"
                break
            stalled = stalled + 1 if iters == iters_seen else 0  # Spark stopped below the cap: the same fit again
            iters_seen = iters
            if stalled >= 1:
                break
        w, row, elapsed, knob = best
        jvm_peak = peak_rss_bytes(pid)
        note_child_peak(jvm_peak - jvm0)
        notes = [f"Spark local[{_SESSION['cores']}], spark.driver.memory {self.driver_memory}; the data written to "
                 f"Parquet once in {parquet_s:.2f} s (in no fit's time_s); each fit reads it, caches it and runs "
                 f"L-BFGS; regParam = 1 / (n C) = {1.0 / (problem.n_coords * problem.params['C']):.6g}",
                 f"the JVM's peak resident memory: {jvm_peak / 1e9:.2f} GB ({(jvm_peak - jvm0) / 1e9:.2f} GB above its "
                 "start: in the arm's peak_rss_delta)"]
        # each fit is timed alone, and Spark's fixed cost (reading the Parquet, caching it, its jobs' set-up)
        # dwarfs an iteration's at small sizes: a fit of more iterations can take less time than one of
        # fewer. The curve keeps the fits no quicker fit beat (each row's gap below every quicker fit's), so
        # the time to a gap is that of the quickest fit that reached it and the last row is the best fit
        frame = trace.frame().sort_values("time_s", kind="stable", ignore_index=True)
        best_before = np.minimum.accumulate(np.r_[np.inf, frame["rel_gap"].to_numpy()[:-1]])
        kept = frame["rel_gap"].to_numpy() < best_before
        if not kept.all():
            notes.append(f"{int((~kept).sum())} of {len(frame) - 1} fits left off the curve: a quicker fit had reached "
                         "a smaller gap (their rows: maxIter " + ", ".join(f"{e:g}" for e in frame.epoch[~kept]) + ")")
        frame = frame[kept].reset_index(drop=True)
        return SolveResult(a=np.asarray(w), v=None, trace=frame, status=status, primal=row["primal"], dual=row["dual"],
                           gap=row["gap"], rel_gap=row["rel_gap"], time_s=elapsed, epochs=knob, bytes_h2d=0,
                           n_rounds=len(trace.rows) - 1, notes=notes)

    def _width(self, problem):
        A = problem.A
        if getattr(A, "on_disk", False):
            return A.n_features + (A.intercept is not None)
        return A.shape[1]
