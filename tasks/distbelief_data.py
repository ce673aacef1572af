"""A synthetic set that needs a nonlinearity: y = +1 inside a sphere of the
informative features, -1 outside (radius at the median, so balanced). No
linear model does much better than the majority class. Written in the dataset
cache's layout (``tasks.data.read_cached`` reads it), keyed by its arguments."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from tasks.data import read_cached


def sphere_dataset(cache_dir: Path, n_samples: int = 20000, n_features: int = 20, n_informative: int = 4,
                   seed: int = 0):
    folder = Path(cache_dir) / f"sphere-{n_samples}-{n_features}-{n_informative}-{seed}"
    if not (folder / "meta.json").exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp-", dir=folder.parent))
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n_samples, n_features))
        r2 = np.sum(X[:, :n_informative] ** 2, axis=1)
        y = np.where(r2 <= np.median(r2), 1.0, -1.0)
        np.save(tmp / "X.npy", X)
        np.save(tmp / "y.npy", y)
        (tmp / "meta.json").write_text(json.dumps({"config": {"name": "sphere", "n_samples": n_samples,
                                                              "n_features": n_features, "seed": seed}}))
        try:
            os.rename(tmp, folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return read_cached(folder)
