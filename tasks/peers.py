"""Peer solvers (scikit-learn, celer, skglm, Snap ML, dask-glm) as experiment arms.

A peer runs at a schedule of its own tolerances (or iteration caps); each fit
starts from zero and is timed alone (its wall time, the median of ``repeats``
fits). Every returned coefficient vector is then re-evaluated by OUR code on
OUR objective (:class:`solvers.glm.problems.Problem`), off the clock:

- regression (coordinates = features): ``a = coef``, and the Problem gives the
  primal, the dual and the duality gap directly;
- classification (coordinates = samples): the peer's ``w`` gives the primal
  P(w) = 1/2 ||w||^2 + sum_i g_i*(-<A_i, w>) (our conjugates), and a dual point
  ``a`` is built from ``w`` by the KKT conditions (logistic: a_i = C sigmoid(-m_i);
  hinge: a_i = C below the margin, 0 above, the margin points by a
  box-constrained least squares fit of w = A^T a). The certified gap is
  P(w) - D(a) = sum_i gap_i(a, u=w) + 1/2 ||w - A^T a||^2 >= 0 for any feasible a.

So every arm's curve is rel_gap (gap / P(0)) against the fit's wall time,
measured the same way. The result looks like DuHL's (trace in the metric
vocabulary, status, rel_gap, time_s, ...), so the experiment report works
unchanged. The peer sees the data the Problem holds: regression X = A^T, y = b
(centred when an intercept is fitted); classification the signed rows A_i with
each row's sign flipped at random (t_i A_i, label t_i): the same objective as
the caller's (x_i, y_i), since the losses depend only on y_i <w, x_i>, with the
intercept column (if any) as a penalised feature, as liblinear does.
"""

from __future__ import annotations

import functools
import importlib
import statistics
import time
import warnings
from unittest import mock

import numpy as np
import scipy.sparse as sp

from solvers.glm.trace import SolveResult, Trace
from tasks.peer_scores import is_hinge, dual_point, evaluate, peer_data  # noqa: F401 (dual_point: re-exported)
from tasks.stoppable import FitCut, StoppableFits

TOLS = tuple(10.0 ** -k for k in range(2, 13))           # 1e-2 .. 1e-12
ITERS = tuple(2 ** k for k in range(0, 12))                # 1 .. 2048


class PeerUnsupported(Exception):
    """This peer cannot solve this problem on the same objective (the reason is the message)."""


PeerResult = SolveResult


# ---------------------------------------------------------- the peers ---
def _quietly(fit):
    """fit() with the libraries' warnings (convergence, deprecation) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit()


def _centred_dense(problem, X, library):
    """Peers without an unpenalised intercept get centred dense columns instead."""
    if not problem.info.get("fit_intercept") or not np.any(problem.mu):
        return X
    if sp.issparse(X):
        raise PeerUnsupported(f"{library} fits no unpenalised intercept, and centring sparse "
                              "data would densify it: use fit_intercept=false")
    return np.asfortranarray(X - problem.mu[None, :])


def _sklearn(problem, X, y, knob, method):
    import sklearn.linear_model as lm
    from sklearn.svm import LinearSVC

    p = problem.params
    fi = bool(p.get("fit_intercept")) and not problem.dual_form
    name = problem.name
    if method == "lbfgs":
        if name != "logistic":
            raise PeerUnsupported("scikit-learn's lbfgs arm is for logistic regression only")
        est = lm.LogisticRegression(C=p["C"], solver="lbfgs", tol=knob, max_iter=10000, fit_intercept=False)
    elif name == "lasso":
        est = lm.Lasso(alpha=p["alpha"], tol=knob, max_iter=100000, fit_intercept=fi)
    elif name == "elastic_net":
        est = lm.ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], tol=knob, max_iter=100000,
                            fit_intercept=fi)
    elif name == "ridge":
        est = lm.Ridge(alpha=p["alpha"], tol=knob, fit_intercept=fi)
    elif name == "svm":
        est = LinearSVC(C=p["C"], loss=p["loss"], dual=True, tol=knob, max_iter=1000000, fit_intercept=False)
    elif name == "logistic":
        est = lm.LogisticRegression(C=p["C"], solver="liblinear", dual=True, tol=knob, max_iter=1000000,
                                    fit_intercept=False)
    else:
        raise PeerUnsupported(f"scikit-learn has no {name} arm here")
    return lambda: est.fit(X, y).coef_


def _celer(problem, X, y, knob, method):
    import celer

    p = problem.params
    fi = bool(problem.info.get("fit_intercept"))
    if problem.name == "lasso":
        est = celer.Lasso(alpha=p["alpha"], tol=knob, fit_intercept=fi)
    elif problem.name == "elastic_net":
        est = celer.ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], tol=knob, fit_intercept=fi)
    else:
        raise PeerUnsupported(f"celer has no {problem.name} solver here (Lasso, ElasticNet)")
    return lambda: est.fit(X, y).coef_


def _skglm(problem, X, y, knob, method):
    import skglm

    p = problem.params
    fi = bool(problem.info.get("fit_intercept"))
    if problem.name == "lasso":
        est = skglm.Lasso(alpha=p["alpha"], tol=knob, fit_intercept=fi)
    elif problem.name == "elastic_net":
        est = skglm.ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], tol=knob, fit_intercept=fi)
    else:
        raise PeerUnsupported(f"skglm has no {problem.name} arm here (Lasso, ElasticNet)")
    return lambda: est.fit(X, y).coef_


def _snapml(problem, X, y, knob, method):
    import snapml

    p = problem.params
    n = problem.n_samples
    common = dict(tol=knob, max_iter=100000, n_jobs=1, fit_intercept=False)
    if problem.name == "lasso":      # snapml's l1 needs the primal solver and alpha * n_samples
        X = _centred_dense(problem, X, "Snap ML")
        est = snapml.LinearRegression(penalty="l1", regularizer=p["alpha"] * n, dual=False, **common)
    elif problem.name == "ridge":
        X = _centred_dense(problem, X, "Snap ML")
        est = snapml.LinearRegression(penalty="l2", regularizer=p["alpha"], **common)
    elif problem.name == "svm":
        if not is_hinge(problem):
            raise PeerUnsupported("Snap ML's SupportVectorMachine has the hinge loss only")
        est = snapml.SupportVectorMachine(regularizer=1.0 / p["C"], **common)
    elif problem.name == "logistic":
        est = snapml.LogisticRegression(regularizer=1.0 / p["C"], **common)
    else:
        raise PeerUnsupported(f"Snap ML has no {problem.name} arm here")
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    return lambda: np.asarray(est.fit(X, y).coef_).ravel()


# dask-glm reads row chunks: they are C-ordered once per schedule, not at every point (4 GB:
# 74 s under load, untimed). dask's from_array copies a NumPy array each call: _Rows hides .copy.
_ROWS = {}


class _Rows:
    def __init__(self, X):
        self.X, self.shape, self.dtype, self.ndim = X, X.shape, X.dtype, X.ndim

    def __getitem__(self, key):
        return self.X[key]


def _daskml(problem, X, y, knob, method):
    import dask
    import dask.array as da
    from dask_glm import algorithms, families
    from dask_glm.regularizers import ElasticNet

    if sp.issparse(X):
        raise PeerUnsupported("dask-glm runs on dense dask arrays only here (sparse needs pydata/sparse chunks)")
    p = problem.params
    n = problem.n_samples
    key = (id(problem), id(X))  # the last data, kept with its arrays (so their ids stay theirs)
    if _ROWS.get("key") != key:
        _ROWS.clear()
        Xc = np.ascontiguousarray(_centred_dense(problem, X, "dask-glm") if not problem.dual_form else X)
        _ROWS.update(key=key, held=(problem, X), X=Xc)
    X = _ROWS["X"]
    chunks = (max(1, -(-X.shape[0] // 4)), X.shape[1])
    Xd = da.from_array(_Rows(X), chunks=chunks, name=False, asarray=True)  # row blocks of X: views
    if problem.name in ("lasso", "elastic_net", "ridge"):
        family = families.Normal      # sum (y - Xb)^2: twice n times scikit-learn's objective
        if problem.name == "lasso":
            reg, lam = "l1", 2.0 * n * p["alpha"]
        elif problem.name == "ridge":
            reg, lam = "l2", 2.0 * p["alpha"]       # ||y - Xb||^2 + alpha ||b||^2
        else:
            reg, lam = ElasticNet(weight=p["l1_ratio"]), 2.0 * n * p["alpha"]
        yd = da.from_array(np.asarray(y, dtype=np.float64), chunks=chunks[0], name=False)
    elif problem.name == "logistic":
        family, reg, lam = families.Logistic, "l2", 1.0 / p["C"]
        yd = da.from_array((np.asarray(y) > 0).astype(np.float64), chunks=chunks[0], name=False)
    else:
        raise PeerUnsupported("dask-glm has no hinge loss")
    algo = method or ("proximal_grad" if reg != "l2" else "lbfgs")
    if algo == "admm":
        kw = dict(max_iter=int(knob), abstol=0.0, reltol=0.0)
    elif algo == "lbfgs":
        kw = dict(tol=knob, max_iter=10000)
    else:  # proximal_grad's own tol barely moves its answer: cap its iterations instead
        kw = dict(tol=0.0, max_iter=int(2 ** (1 - np.log10(knob))))   # 1e-1 -> 4 ... 1e-12 -> 8192
    solve = getattr(algorithms, algo)

    def fit():
        # one thread, like every other arm; dask-glm would scatter its iterate to a distributed client
        # that this process holds (a cluster arm's), where the synchronous scheduler cannot find it
        with dask.config.set(scheduler="synchronous"), mock.patch.object(algorithms, "get_distributed_client",
                                                                         lambda: None):
            return np.asarray(solve(Xd, yd, regularizer=reg, lamduh=lam, family=family,
                                    normalize=False, **kw))
    return fit


# name -> (import name, pip name, builder, method, schedule)
PEERS = {
    "peer_sklearn": ("sklearn", "scikit-learn", _sklearn, None, TOLS),
    "peer_sklearn_lbfgs": ("sklearn", "scikit-learn", _sklearn, "lbfgs", TOLS),
    "peer_celer": ("celer", "celer", _celer, None, TOLS),
    "peer_skglm": ("skglm", "skglm", _skglm, None, TOLS),
    "peer_snapml": ("snapml", "snapml", _snapml, None, TOLS),
    "peer_daskml": ("dask_glm", "dask-ml", _daskml, None, TOLS),
    "peer_daskml_admm": ("dask_glm", "dask-ml", _daskml, "admm", ITERS),
}


def missing_reason(name):
    """None when the peer's library imports, else why not (one line)."""
    module, pip, *_ = PEERS[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except Exception as error:  # ImportError, or a binary that fails to load
        return f"{pip} is not importable ({type(error).__name__}: {error}); pip install -e .[peers]"
    return None


class Peer:
    """A peer library's solver with DuHL's interface: ``solve(problem)`` -> result with a trace.

    Parameters
    ----------
    tol : float
        Stop the schedule once our rel_gap of a fit is <= tol.
    max_time : float or None
        Seconds of fitting for the whole schedule (the sum of its points' times), as DuHL's
        max_time is for its run: no point starts once they are spent, and the fit in flight
        is killed when it reaches what is left (each repeat may take that); the points fitted
        before stay in the trace, status "max_time".
    max_epochs : float
        Caps the peer's iterations at each point (the warm-up uses a tiny cap).
    repeats : int
        Each point's time is the median of this many fits.
    memory_budget, selection, local_epochs, device, random_state : accepted so a peer
        arm shares the experiment's solver settings; ignored (peers hold all data).

    The fits run in a forked child (tasks/stoppable.py), which can be stopped even inside a C call.
    """

    library = None

    def __init__(self, tol=1e-6, max_time=None, max_epochs=100000, repeats=1, memory_budget=None,
                 selection="gap", local_epochs=1, device="cpu", random_state=0, callback=None):
        self.tol, self.max_time, self.max_epochs, self.repeats = tol, max_time, max_epochs, repeats
        self.memory_budget, self.selection, self.local_epochs = memory_budget, selection, local_epochs
        self.device, self.random_state, self.callback = device, random_state, callback
        if not (isinstance(tol, (int, float)) and tol >= 0):
            raise ValueError(f"The 'tol' parameter of {self.library} must be a float >= 0. Got {tol!r} instead.")
        if not (isinstance(repeats, (int, np.integer)) and repeats >= 1):
            raise ValueError(f"The 'repeats' parameter of {self.library} must be an int >= 1. "
                             f"Got {repeats!r} instead.")
        if not (max_time is None or (isinstance(max_time, (int, float)) and max_time >= 0)):
            raise ValueError(f"The 'max_time' parameter of {self.library} must be a float >= 0 or None. "
                             f"Got {max_time!r} instead.")

    def fits(self, problem):
        """(knob, a function that builds its fit) for the schedule; raises ImportError."""
        reason = missing_reason(self.library)
        if reason:
            raise ImportError(reason)
        _, _, build, method, schedule = PEERS[self.library]
        X, y = peer_data(problem, seed=0)
        if schedule is ITERS:
            schedule = [k for k in schedule if k <= self.max_epochs] or [1]
        # built one at a time as the schedule goes: a builder may copy the data (centring)
        return [(knob, lambda knob=knob: build(problem, X, y, knob, method)) for knob in schedule]

    def warm_up(self, problem):
        """The schedule's first fit in this process, untimed (imports, JIT compilation), so that
        the fits forked later inherit it; returns seconds."""
        start = time.perf_counter()
        for _, make_fit in self.fits(problem)[:1]:
            _quietly(make_fit())
        return time.perf_counter() - start

    def _row(self, problem, rnd, time_s, knob, w):
        primal, dual, gap = evaluate(problem, w)
        rel = max(gap, 0.0) / problem.P0 if problem.P0 > 0 else 0.0
        return dict(round=rnd, time_s=time_s, epoch=float(knob), primal=primal, dual=dual, gap=gap, rel_gap=rel,
                    certified=1, bytes_h2d=0, swaps=0, n_resident=problem.n_coords)

    def solve(self, problem, warm_up=False):
        """The schedule's fits (``warm_up``: its first fit once more before, untimed, in the child
        that runs them, its seconds in ``self.warmup_s``), each point scored by our code."""
        fits = self.fits(problem)
        trace = Trace(self.callback)
        w0 = np.zeros(problem.A.shape[1] if problem.dual_form else problem.n_coords)
        rows = [self._row(problem, 0, 0.0, 0, w0)]      # where every fit starts, as DuHL's round 0
        trace.record(**rows[0])  # each point reaches the callback (the progress bar, MLflow) as it is made
        best = (w0, rows[0]["rel_gap"], rows[0]["primal"], rows[0]["dual"], rows[0]["gap"], 0.0, 0.0)
        spent, status, stalled = 0.0, "max_epochs", 0
        with StoppableFits(lambda k: functools.partial(_quietly, fits[k][1]())) as child:
            if warm_up:
                start = time.perf_counter()
                child.run(0, None)
                self.warmup_s = time.perf_counter() - start
            for rnd, (knob, _) in enumerate(fits, start=1):
                if self.max_time is not None and spent >= self.max_time:
                    status = "max_time"
                    break
                try:  # the fit is built in the child, untimed: the data as the library takes it
                    times, w = [], None
                    for _ in range(self.repeats):
                        w, seconds = child.run(rnd - 1, None if self.max_time is None else self.max_time - spent)
                        times.append(seconds)
                except FitCut:  # the point in flight reached the time left: no row from it
                    status = "max_time"
                    break
                elapsed = statistics.median(times)
                spent += elapsed
                row = self._row(problem, rnd, elapsed, knob, w)
                rows.append(row)
                trace.record(**row)
                rel = row["rel_gap"]
                stalled = 0 if rel < 0.9 * best[1] else stalled + 1
                if rel < best[1]:
                    best = (w, rel, row["primal"], row["dual"], row["gap"], elapsed, float(knob))
                if rel <= self.tol:
                    status = "converged"
                    break
                if stalled >= 5:   # the peer's own stopping rule no longer moves the point
                    break
        w, rel, primal, dual, gap, elapsed, knob = best
        notes = [f"the fits ran in a forked child process (stopped at max_time, or by a signal, even inside a "
                 f"C call): its start-up, {1e3 * child.startup_s:.1f} ms, is in no fit's time_s"]
        if child.peak_rss_delta > 0:
            notes.append(f"the child's peak memory above its start: {child.peak_rss_delta / 1e6:.1f} MB (in the "
                         f"arm's peak_rss_delta)")
        # the curve in time order (a looser tolerance can, rarely, take longer)
        frame = trace.frame().sort_values("time_s", kind="stable", ignore_index=True)
        return PeerResult(a=np.asarray(w, dtype=np.float64).ravel(), v=None, trace=frame,
                          status=status, primal=primal, dual=dual, gap=gap, rel_gap=rel, time_s=elapsed,
                          epochs=knob, bytes_h2d=0, n_rounds=len(rows) - 1, notes=notes)


def _peer_class(name):
    return type(f"Peer_{name}", (Peer,), {"library": name, "__doc__": Peer.__doc__})


PEER_SOLVERS = {name: _peer_class(name) for name in PEERS}


def make_peer(name, **kwargs):
    return PEER_SOLVERS[name](**kwargs)
