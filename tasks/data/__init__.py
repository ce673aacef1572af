"""Datasets from their config, cached on disk, checked and memory-mapped when read.

- ``configs``: one dataclass per kind of dataset (the Hydra schemas of conf/data/)
- ``makers``: synthetic dense / sparse (and dense rows made a block at a time: any range alone), scikit-learn's shipped sets, the sphere
- ``libsvm``: LIBSVM files, converted to the sparse store by a compiled parser in bounded RAM, with
  errors that name the file and the line
- ``criteo``: Criteo's click-log layout hashed into a binary sparse store; synthetic clicks like it
- ``streams``: what the streaming converters share (compressed sources, the target, a bytes/s bar)
- ``sparse``: a scipy matrix or ``.npz`` to the store; the store of the layout a model reads
- ``npy``: a user's own dense .npy, converted in chunks to the cache's layout (or used in place)
- ``zarr_store``: a user's own zarr array, converted a tile of its chunks at a time
- ``cache``: the cache (keys, checksums, rebuilding a damaged entry)
"""

from tasks.data.cache import BYTE_COUNTED, MAKERS, cache_key, checksum, load_dataset, read_cached
from tasks.data.configs import (DATA_CONFIGS, CriteoData, Dataset, LibsvmData, NpyData, SklearnData, SphereData,
                                SyntheticCriteoData, SyntheticDenseData, SyntheticRowsData, SyntheticSparseData, ZarrData,
                                resolve_path, validate_data_config)
from tasks.data.errors import DataError

__all__ = ["BYTE_COUNTED", "MAKERS", "cache_key", "checksum", "load_dataset", "read_cached", "DATA_CONFIGS", "CriteoData", "Dataset",
           "LibsvmData", "SyntheticCriteoData", "NpyData", "SklearnData", "SphereData", "SyntheticDenseData", "SyntheticRowsData", "SyntheticSparseData",
           "ZarrData", "resolve_path", "validate_data_config", "DataError"]
