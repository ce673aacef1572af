"""A synthetic set that needs a nonlinearity: y = +1 inside a sphere of the
informative features, -1 outside (radius at the median, so balanced). No
linear model does much better than the majority class. The data config is
``tasks.data.SphereData`` (``data=sphere``); this is a shortcut for scripts."""

from __future__ import annotations

from pathlib import Path

from tasks.data import SphereData, load_dataset


def sphere_dataset(cache_dir: Path, n_samples: int = 20000, n_features: int = 20, n_informative: int = 4,
                   seed: int = 0):
    return load_dataset(SphereData(n_samples=n_samples, n_features=n_features, n_informative=n_informative,
                                   seed=seed), Path(cache_dir))
