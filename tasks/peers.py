"""Peer solvers (scikit-learn, celer, skglm, Snap ML, dask-glm, Vowpal Wabbit; Spark MLlib:
tasks/peer_spark.py) as experiment arms.

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
import os
import statistics
import time
import warnings
from typing import NamedTuple
from unittest import mock

import numpy as np
import scipy.sparse as sp

from solvers.glm.trace import SolveResult, Trace
from tasks.peer_scores import is_hinge, dual_point, evaluate, peer_data  # noqa: F401 (dual_point: re-exported)
from tasks.peer_spark import SparkPeer
from tasks.peer_spark import missing_reason as spark_missing_reason
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
    fi = bool(p.get("fit_intercept")) and not problem.dual_form and not problem.loss
    name = problem.name
    if problem.loss:  # a classifier in the primal (the intercept, if any, a column of X already)
        return _sklearn_primal(problem, X, y, knob, method)
    if method in ("saga", "newton-cholesky"):
        raise PeerUnsupported(f"scikit-learn's {method} arm is for the classifiers in the primal only")
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


def _sklearn_primal(problem, X, y, knob, method):
    """scikit-learn on a classifier in the primal: liblinear's primal solvers (newGLMNET for the L1
    logistic, trust-region Newton for the L2, CDN for the L1 squared hinge), or saga, lbfgs,
    newton-cholesky for the logistic loss."""
    import sklearn.linear_model as lm
    from sklearn.svm import LinearSVC

    p, name = problem.params, problem.name
    l1 = {"logistic_l1": 1.0, "logistic_l2": 0.0, "svm_l1": 1.0, "svm_l2": 0.0}.get(name, p.get("l1_ratio"))
    if name.startswith("svm"):
        if method is not None:
            raise PeerUnsupported(f"scikit-learn's {method} arm has no squared hinge")
        est = LinearSVC(C=p["C"], penalty="l1" if l1 == 1.0 else "l2", dual=False, tol=knob, max_iter=1000000,
                        fit_intercept=False)
        X = sp.csr_matrix(X) if sp.issparse(X) else np.ascontiguousarray(X)  # liblinear's layout, untimed
    else:
        solver = method or "liblinear"
        if solver == "liblinear" and 0.0 < l1 < 1.0:
            raise PeerUnsupported("liblinear has no elastic net (scikit-learn's saga arm has)")
        if solver in ("lbfgs", "newton-cholesky") and l1 > 0.0:
            raise PeerUnsupported(f"scikit-learn's {solver} has the L2 penalty only")
        est = lm.LogisticRegression(C=p["C"], l1_ratio=l1, solver=solver, tol=knob, max_iter=1000000,
                                    fit_intercept=False)
        if solver in ("liblinear", "saga") or sp.issparse(X):
            X = sp.csr_matrix(X) if sp.issparse(X) else np.ascontiguousarray(X)  # row solvers, untimed
    return lambda: est.fit(X, y).coef_


def _celer(problem, X, y, knob, method):
    import celer

    p = problem.params
    fi = bool(problem.info.get("fit_intercept"))
    if problem.name == "lasso":
        est = celer.Lasso(alpha=p["alpha"], tol=knob, fit_intercept=fi)
    elif problem.name == "elastic_net":
        est = celer.ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], tol=knob, fit_intercept=fi)
    elif problem.name == "logistic_l1":  # sum loss + 1/C ||w||_1: ours divided by C
        est = celer.LogisticRegression(C=p["C"], penalty="l1", tol=knob, fit_intercept=False)
    else:
        raise PeerUnsupported(f"celer has no {problem.name} solver here (Lasso, ElasticNet, L1 logistic)")
    return lambda: est.fit(X, y).coef_


def _skglm(problem, X, y, knob, method):
    import skglm

    p = problem.params
    fi = bool(problem.info.get("fit_intercept"))
    if problem.name == "lasso":
        est = skglm.Lasso(alpha=p["alpha"], tol=knob, fit_intercept=fi)
    elif problem.name == "elastic_net":
        est = skglm.ElasticNet(alpha=p["alpha"], l1_ratio=p["l1_ratio"], tol=knob, fit_intercept=fi)
    elif problem.name in ("logistic_l1", "logistic_elasticnet"):  # ours divided by C n
        l1 = 1.0 if problem.name == "logistic_l1" else p["l1_ratio"]
        est = skglm.SparseLogisticRegression(alpha=1.0 / (p["C"] * problem.n_samples), l1_ratio=l1, tol=knob,
                                             max_iter=1000, fit_intercept=False)
    else:
        raise PeerUnsupported(f"skglm has no {problem.name} arm here (Lasso, ElasticNet, sparse logistic)")
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
    elif problem.name in ("logistic_l1", "logistic_l2"):  # (1/C) penalty + sum loss: ours divided by C
        penalty = "l1" if problem.name == "logistic_l1" else "l2"
        est = snapml.LogisticRegression(regularizer=1.0 / p["C"], penalty=penalty, dual=False, **common)
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


# ---------------------------------------------------------- Vowpal Wabbit ---
VW_PASSES = tuple(range(1, 11))                            # online: 1 .. 10 passes
VW_BFGS_PASSES = tuple(2 ** k for k in range(1, 11))      # --bfgs: 2 .. 1024 passes
VW_LOSSES = {"logistic": "logistic", "svm": "hinge"}
VW_TEXT_ROWS = 1 << 14  # rows formatted at a time


def vw_l2(problem, method):
    """VW's ``--l2`` for our ``C`` (see :class:`VowpalWabbitPeer`): 1 / C for ``--bfgs``, whose
    objective sums the losses; 1 / (n C) online, whose updates minimise their average."""
    C = float(problem.params["C"])
    return 1.0 / C if method == "bfgs" else 1.0 / (problem.n_coords * C)


def _vw_rows(problem, seed=0):
    """(labels, CSR rows x_i) the VW text is written from, a block at a time: the problem's
    signed rows A_i = s_i x_i back as (x_i, s_i) on disk (a SparseOnDisk's signs), in RAM with
    each row's sign flipped at random as the other peers see them (peer_data); the intercept
    column, when fitted, a penalised feature as in liblinear. Yields (labels, csr block)."""
    A = problem.A
    if getattr(A, "on_disk", False):
        if not hasattr(A, "read_block"):
            raise PeerUnsupported("Vowpal Wabbit's arm reads data on disk from a sparse store only")
        signs = A.scale if A.scale is not None else np.ones(problem.n_coords)
        for lo in range(0, problem.n_coords, VW_TEXT_ROWS):
            coords = np.arange(lo, min(problem.n_coords, lo + VW_TEXT_ROWS))
            block = A.read_block(coords).csr(A.shape[1])
            t = signs[coords]
            yield t, sp.diags(t) @ block  # s_i (s_i x_i) = x_i
        return
    X, t = peer_data(problem, seed)
    X = sp.csr_matrix(X)
    for lo in range(0, X.shape[0], VW_TEXT_ROWS):
        yield t[lo:lo + VW_TEXT_ROWS], X[lo:lo + VW_TEXT_ROWS]


def write_vw_text(problem, path):
    """VW's text format of the problem's data: ``label | j:x_ij ...`` (``j`` alone when x_ij = 1),
    features named by their column, in the default namespace (whose hash is 0: VW's index of a
    feature named by an integer j is j itself). Returns the number of features."""
    with open(path, "w") as f:
        for labels, rows in _vw_rows(problem):
            rows.sort_indices()
            out = []
            for i in range(rows.shape[0]):
                lo, hi = rows.indptr[i], rows.indptr[i + 1]
                pairs = " ".join(str(j) if v == 1.0 else f"{j}:{float(v)!r}"
                                 for j, v in zip(rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist()))
                out.append(f"{int(labels[i])} | {pairs}\n")
            f.write("".join(out))
    return problem.A.shape[1]


class _VwCache:
    """A problem's data in VW's binary cache (built once per problem and peer, timed: ``seconds``)."""

    def __init__(self, problem, folder=None):
        import tempfile

        import vowpalwabbit

        self.folder = tempfile.mkdtemp(prefix="vw-", dir=folder)
        text, self.path = f"{self.folder}/data.vw", f"{self.folder}/data.cache"
        self.n_features = write_vw_text(problem, text)
        self.bits = max(18, int(np.ceil(np.log2(max(2, self.n_features)))))  # every column its own weight
        start = time.perf_counter()  # VW's parse of the text into its cache: timed apart from the fits
        ws = vowpalwabbit.Workspace(f"-d {text} --cache_file {self.path} -b {self.bits} --noconstant --noop --quiet")
        ws.run_parser()
        ws.finish()
        self.seconds = time.perf_counter() - start
        os.unlink(text)

    def remove(self):
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


class Trained(NamedTuple):
    """A fit's weights with the seconds it trained, for a fit whose weights take longer to read out
    than a peer's arm should count (Vowpal Wabbit's, one call a weight)."""
    w: np.ndarray
    seconds: float


def _vw_fit(problem, cache, knob, method, vw_args=""):
    """A fit of ``knob`` passes over the cache; returns :class:`Trained` (w with the contraction
    applied, see VowpalWabbitPeer; the seconds of the passes)."""
    import vowpalwabbit

    if problem.name not in VW_LOSSES or (problem.name == "svm" and not is_hinge(problem)):
        raise PeerUnsupported("Vowpal Wabbit's arm here is logistic regression or the hinge-loss SVM "
                              f"(VW has no squared hinge or {problem.name} with our objective)")
    args = (f"--cache_file {cache.path} -b {cache.bits} --noconstant --holdout_off --quiet "
            f"--loss_function {VW_LOSSES[problem.name]} --l2 {vw_l2(problem, method)!r} --passes {int(knob)}"
            + (" --bfgs" if method == "bfgs" else "") + (f" {vw_args}" if vw_args else ""))

    def fit():
        start = time.perf_counter()
        ws = vowpalwabbit.Workspace(args)  # a workspace given data runs its passes as it is built
        seconds = time.perf_counter() - start
        w = np.array([ws.get_weight(j) for j in range(cache.n_features)])  # a call a weight: not the fit's time
        big = int(np.argmax(np.abs(w))) if w.size else 0
        if w.size and w[big] != 0.0:  # online --l2 keeps w / contraction: a prediction gives the factor
            w *= ws.predict(f"| {big}:1") / w[big]
        ws.finish()
        return Trained(w, seconds)
    return fit


# name -> (import name, pip name, builder, method, schedule)
PEERS = {
    "peer_sklearn": ("sklearn", "scikit-learn", _sklearn, None, TOLS),
    "peer_sklearn_lbfgs": ("sklearn", "scikit-learn", _sklearn, "lbfgs", TOLS),
    "peer_sklearn_saga": ("sklearn", "scikit-learn", _sklearn, "saga", TOLS),
    "peer_sklearn_newton": ("sklearn", "scikit-learn", _sklearn, "newton-cholesky", TOLS),
    "peer_celer": ("celer", "celer", _celer, None, TOLS),
    "peer_skglm": ("skglm", "skglm", _skglm, None, TOLS),
    "peer_snapml": ("snapml", "snapml", _snapml, None, TOLS),
    "peer_daskml": ("dask_glm", "dask-ml", _daskml, None, TOLS),
    "peer_daskml_admm": ("dask_glm", "dask-ml", _daskml, "admm", ITERS),
    "peer_vw": ("vowpalwabbit", "vowpalwabbit", _vw_fit, "online", VW_PASSES),
    "peer_vw_bfgs": ("vowpalwabbit", "vowpalwabbit", _vw_fit, "bfgs", VW_BFGS_PASSES),
}


def missing_reason(name):
    """None when the peer's library imports, else why not (one line)."""
    if name == SparkPeer.library:
        return spark_missing_reason()
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
                        if isinstance(w, Trained):
                            w, seconds = w
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


class VowpalWabbitPeer(Peer):
    """Vowpal Wabbit (``pip install vowpalwabbit``) on the problem's data, scored by our objective.

    Logistic regression (``--loss_function logistic``) and the hinge-loss SVM (``hinge``), no
    constant (``--noconstant``: our problem's intercept, when fitted, is liblinear's penalised
    feature, a column of the data VW sees), every pass on all data (``--holdout_off``).
    The regularisation, for our P(w) = 1/2 ||w||^2 + C sum_i loss(y_i <w, x_i>):

    - ``--bfgs`` (``peer_vw_bfgs``; the schedule: 2 .. 1024 passes) minimises
      sum_i loss_i(w) + l2/2 ||w||^2 = P(w) / C, so ``--l2 = 1 / C``;
    - online (``peer_vw``; 1 .. 10 passes) updates w <- (1 - l2 eta) w - eta grad loss_i(w)
      example by example (its ``--l2`` enters as a contraction of w), a stochastic gradient of
      loss_i(w) + l2/2 ||w||^2, whose average over the n examples is P(w) / (n C): ``--l2 = 1 / (n C)``.
      VW skips the update, contraction included, of an example whose loss has no gradient (the
      hinge beyond the margin): online, the hinge's regularisation is weaker than asked, and
      no ``--l2`` matches C exactly there; its points are scored by our objective as they are.

    Both were checked against scikit-learn's optimum (tests/tasks/test_peer_vw.py). Online, VW
    keeps its weights divided by the running contraction; the weights returned are multiplied
    back (the factor read from one prediction). The data go to VW's text format once, then VW
    parses them into its binary cache (``--cache_file``): that parse is timed apart
    (``cache_s``, and a note in the result), each fit then reads the cache only. A fit's time is
    its workspace's construction, which runs the passes over the cache; reading the weights back
    (a call a weight) is not counted. ``vw_args``:
    more VW arguments for every fit (a learning rate, ``-l 0.1``, ...). ``folder``: where the
    text and cache go (default: the system's temporary folder); removed after the solve.
    """

    def __init__(self, *args, vw_args="", folder=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.vw_args, self.folder = str(vw_args), folder
        self.cache_s = None
        self._caches = {}

    def fits(self, problem):
        reason = missing_reason(self.library)
        if reason:
            raise ImportError(reason)
        _, _, build, method, schedule = PEERS[self.library]
        if problem.name not in VW_LOSSES or (problem.name == "svm" and not is_hinge(problem)):
            raise PeerUnsupported("Vowpal Wabbit's arm here is logistic regression or the hinge-loss SVM "
                                  f"(VW has no squared hinge, nor {problem.name} with our objective)")
        key = id(problem)
        if key not in self._caches:
            self._caches[key] = _VwCache(problem, self.folder)
            self.cache_s = self._caches[key].seconds
        cache = self._caches[key]
        schedule = [k for k in schedule if k <= self.max_epochs] or [schedule[0]]
        return [(knob, lambda knob=knob: build(problem, cache, knob, method, self.vw_args)) for knob in schedule]

    def warm_up(self, problem):
        try:
            return super().warm_up(problem)
        finally:
            self._remove()

    def solve(self, problem, warm_up=False):
        try:
            result = super().solve(problem, warm_up=warm_up)
        finally:
            self._remove()
        result.notes.append(f"Vowpal Wabbit's cache (its parse of the data's text): {self.cache_s:.3f} s, "
                            "in no fit's time_s")
        return result

    def _remove(self):
        for cache in self._caches.values():
            cache.remove()
        self._caches.clear()


def _peer_class(name):
    base = VowpalWabbitPeer if PEERS[name][2] is _vw_fit else Peer
    return type(f"Peer_{name}", (base,), {"library": name, "__doc__": base.__doc__})


PEER_SOLVERS = {**{name: _peer_class(name) for name in PEERS}, SparkPeer.library: SparkPeer}


def make_peer(name, **kwargs):
    return PEER_SOLVERS[name](**kwargs)
