"""CoCoA+ parts that train from shards on disk: each part's problem read from its own shard
(tasks/data/shards.py), on the worker's disk (``cluster.data_access=disk``) or, in-process
(``cluster=none``), on the driver's.

A part's shard is the dataset's coordinates [lo, hi) (samples for the classifiers, features
for the Lasso family), so its problem is the driver's skeleton (f, P(0), the model) with the
shard as A: read past the page cache through solvers.storage.on_disk.OnDisk, the classifiers'
rows with the labels' signs (the driver's labels of all of y, sliced) applied as they land.
The shard's stats.npy gives the row statistics, so building a part reads nothing. An arm with
a ``host_budget`` trains each part with DuHL from disk under it; an arm without one reads its
shard into RAM once (a shard on the worker's disk instead of a shipped copy).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from solvers.distributed_glm.cocoa import CocoaPart, InProcessParts
from solvers.storage.on_disk import OnDisk
from tasks.data.errors import DataError
from tasks.data.rows import sample_major
from tasks.data.shards import FromFile, FromMaker, ShardSpec, describe_shard, ensure_shard, open_shard
from tasks.problems import labels_for


@dataclass(frozen=True)
class ShardRef:
    """What a worker-side task needs to open a part's shard: its spec, where the host keeps shards
    and, when the worker makes it itself if missing, its source (FromFile, FromMaker; None: the driver
    streamed it there first)."""

    spec: ShardSpec
    source: Any = None
    shard_dir: Optional[str] = None


def shard_folder(ref: ShardRef) -> Optional[Path]:
    """On a worker: the shard's folder, made here from its source if missing; None when it is missing
    and only the driver can send it (the task ran on another worker than the one it was streamed to)."""
    if ref.source is None:
        return open_shard(ref.spec, ref.shard_dir)
    return Path(ensure_shard(ref.spec, ref.source, ref.shard_dir)["path"])


def axis_of(skeleton) -> str:
    """A part's shard axis: samples for the models solved in the dual, features for the Lasso family."""
    return "rows" if skeleton.dual_form else "columns"


def shard_spec(source: str, skeleton, lo: int, hi: int, dtype) -> ShardSpec:
    return ShardSpec(source, axis_of(skeleton), int(lo), int(hi), int(skeleton.n_samples),
                     int(skeleton.n_features), str(np.dtype(dtype)))


def shard_signs(model_cfg: Mapping[str, Any], y, skeleton, lo: int, hi: int) -> Optional[np.ndarray]:
    """The labels (+1 / -1, made from all of y, as the driver makes them) a part's shard is read signed
    by: a classifier in the dual, its samples' [lo, hi); in the primal (the part holds features), every
    sample's; the Lasso family none."""
    if skeleton.dual_form:
        return labels_for(model_cfg["name"], y)[lo:hi]
    return labels_for(model_cfg["name"], y) if skeleton.loss else None


def part_problem(folder, skeleton, signs=None, direct=None):
    """The Problem of the part whose shard is in ``folder``: the skeleton's f and model, the shard on
    disk as A (a classifier's rows signed by ``signs``, its intercept liblinear's constant feature in
    the rows' padding), the row statistics from the shard's stats.npy."""
    folder = Path(folder)
    info = describe_shard(folder)
    sums, sq = np.load(folder / "stats.npy")
    k = info["hi"] - info["lo"]
    if skeleton.dual_form:
        if signs is None or len(signs) != k:
            raise ValueError(f"A classifier's part needs the labels of its {k} samples. Got "
                             f"{None if signs is None else len(signs)} instead.")
        scale = float(skeleton.info["intercept_scaling"]) if skeleton.info.get("fit_intercept") else None
        data = OnDisk(folder / "X.npy", n_features=info["n_features"], direct=direct)
        if scale is not None and data.n_features >= data.shape[1]:
            raise DataError(f"fit_intercept on disk needs padding after the {info['n_features']} features of each "
                            "row to hold liblinear's intercept feature; this width has none: set "
                            "model.fit_intercept=false")
        A = data.scaled(np.asarray(signs, dtype=np.float64), intercept=scale)
        return replace(skeleton, A=A, mu=np.zeros(k), sqnorm=np.asarray(sq) + (scale or 0.0) ** 2,
                       info=dict(skeleton.info, skeleton=False))
    n = skeleton.n_samples
    A = OnDisk(folder / "X.npy", direct=direct)
    if skeleton.loss:  # a classifier in the primal: its features read signed by every sample's label
        if skeleton.info.get("fit_intercept"):
            raise DataError("a classifier's part on disk in the primal holds no intercept column: set "
                            "model.fit_intercept=false")
        if signs is None or len(signs) != n:
            raise ValueError(f"A classifier's part in the primal needs the labels of all {n} samples. Got "
                             f"{None if signs is None else len(signs)} instead.")
        return replace(skeleton, A=A.signed(np.asarray(signs, dtype=np.float64)), mu=np.zeros(k),
                       sqnorm=np.asarray(sq), info=dict(skeleton.info, skeleton=False))
    if skeleton.info.get("fit_intercept"):
        mu = sums / n
        sqnorm = np.maximum(sq - n * mu * mu, 0.0)
    else:
        mu, sqnorm = np.zeros(k), np.asarray(sq)
    return replace(skeleton, A=A, mu=mu, sqnorm=sqnorm, info=dict(skeleton.info, skeleton=False))


def source_file(folder, skeleton) -> Path:
    """The driver's cache file a shard of this model is cut from: the sample-major copy (written now if
    the entry has none yet) for a classifier, X.npy (features contiguous) for the Lasso family."""
    return sample_major(folder) if skeleton.dual_form else Path(folder) / "X.npy"


def file_source(folder, skeleton) -> FromFile:
    return FromFile(str(source_file(folder, skeleton)), str(Path(folder) / "y.npy"))


def maker_source(data_cfg) -> FromMaker:
    return FromMaker(dataclasses.asdict(data_cfg) if dataclasses.is_dataclass(data_cfg) else dict(data_cfg))


def local_disk_factory(folder, model_cfg, y, shard_dir, dtype):
    """CoCoA+'s executor in this process (cluster=none) with each part on its own shard, made in
    ``shard_dir`` from the driver's cache entry ``folder`` once (then reused)."""
    folder = Path(folder)

    def factory(skeleton, specs, a):
        source = file_source(folder, skeleton)
        parts, shards = [], []
        for s in specs:
            spec = shard_spec(folder.name, skeleton, s["lo"], s["hi"], dtype)
            row = ensure_shard(spec, source, str(shard_dir))
            shards.append(row)
            signs = shard_signs(model_cfg, y, skeleton, s["lo"], s["hi"])
            problem = part_problem(row["path"], skeleton, signs)
            parts.append(CocoaPart(problem, a0=a[s["lo"]:s["hi"]], **dict(s, lo=0, hi=s["hi"] - s["lo"])))
        executor = InProcessParts(parts)
        executor.shards = [{"part": k, **row} for k, row in enumerate(shards)]
        return executor

    return factory
