"""Structured configs: the schema Hydra checks every composed config against.

The top level and each group option have a dataclass, stored in Hydra's
ConfigStore; the YAML files in conf/ extend them (``defaults: [/schema/<group>/<x>@_here_]``),
so an unknown key or a value of the wrong type fails while Hydra composes the
config, with its one-line message, before any data is made. Range checks that
a type cannot express (n_samples >= 1, memory_budget in (0, 1]) are the
components' own validation, run by ``pipelines.experiment`` at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from tasks.cluster import (ClusterConfig, LocalClusterConfig, LocalCudaClusterConfig, RemoteClusterConfig,
                           SlurmClusterConfig)
from tasks.data import LibsvmData, SklearnData, SphereData, SyntheticDenseData, SyntheticSparseData


# Models: the keys are make_problem's keyword arguments (plus the model's name).
@dataclass
class LassoModel:
    name: str = "lasso"
    alpha: float = 1.0
    fit_intercept: bool = True


@dataclass
class ElasticNetModel:
    name: str = "elastic_net"
    alpha: float = 1.0
    l1_ratio: float = 0.5
    fit_intercept: bool = True


@dataclass
class RidgeModel:
    name: str = "ridge"
    alpha: float = 1.0
    fit_intercept: bool = True


@dataclass
class SvmModel:
    name: str = "svm"
    C: float = 1.0
    loss: str = "hinge"
    fit_intercept: bool = True
    intercept_scaling: float = 1.0


@dataclass
class LogisticModel:
    name: str = "logistic"
    C: float = 1.0
    fit_intercept: bool = True
    intercept_scaling: float = 1.0


@dataclass
class MlpModel:
    """DistBelief family only: one hidden layer (tanh) of ``hidden`` units, L2 ``alpha``."""

    name: str = "mlp"
    hidden: int = 32
    alpha: float = 1e-4


@dataclass
class SolverConfig:
    """Settings every arm shares; an arm overrides some of them."""

    name: str = "duhl"
    selection: str = "gap"
    local_epochs: int = 1
    max_epochs: float = 100000
    random_state: Optional[int] = 0


@dataclass
class CocoaSolverConfig(SolverConfig):
    """CoCoA+ (tasks.distributed_arms.CocoaArm): local_epochs is H; a memory_budget
    (device/) makes each part's local solver DuHL, null in-memory SCD."""

    name: str = "cocoa"
    n_parts: int = 2  # K replicas
    aggregation: str = "adding"  # adding (gamma = 1, sigma' = K) | averaging (gamma = 1/K)
    local_solver: str = "scd"


@dataclass
class DianaSolverConfig(SolverConfig):
    """DIANA and its baselines (tasks.distributed_arms.DianaArm); max_epochs caps the rounds."""

    name: str = "diana"
    n_workers: int = 4
    method: str = "diana"  # diana | gd | no_shift | ef21
    compressor: Any = "identity"  # a name or a mapping (solvers.compression.make_compressor)
    gamma: Optional[float] = None  # None: from L and omega
    shift_lr: Optional[float] = None  # None: 1 / (1 + omega)


@dataclass
class DeviceConfig:
    name: str = "cpu"
    # A fraction of the data's bytes in (0, 1], a size like "512MB", or null
    # (all data on the device). Any: OmegaConf has no float-or-str type.
    memory_budget: Any = 0.25
    # The share of memory_budget kept as staging memory for coordinates copied ahead
    # of their swap (DuHL's prefetch): "auto" (0.2 on the GPU devices, 0 on the CPU)
    # or a float in [0, 1).
    prefetch: Any = "auto"
    # How a GPU device computes its block's gaps: "tpa" (a thread block per coordinate)
    # or "blas" (one cuBLAS matrix-vector product; dense data).
    gap_kernel: str = "tpa"
    # The most coordinates a GPU epoch updates at once: "auto" (sqrt of the epoch's
    # coordinates) or an int >= 1.
    concurrency: Any = "auto"


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<project>/mlflow.db
    experiment_name: str = "${experiment.name}"
    flush_every_s: float = 5.0  # metrics are buffered and sent in batches
    # Rows sent to MLflow: one per 1/points_per_decade decade of rel_gap, one
    # per min_interval_s, the target crossing and the last (0 = every round).
    # Every round is in the trace CSV artifact.
    points_per_decade: int = 5
    min_interval_s: float = 2.0


@dataclass
class DistBeliefSpec:
    """experiment.kind=distbelief: what every arm shares (pipelines.distbelief)."""

    target_loss: Optional[float] = None  # time / samples to this training loss ...
    target_accuracy: Optional[float] = None  # ... and to this test accuracy
    stop_at_target: bool = True  # False: every arm runs to max_time
    lr: float = 0.1  # Downpour: the fixed rate, or Adagrad's gamma
    batch_size: int = 32
    warmup_steps: int = 0  # Downpour: replica 0 alone for this many pushes
    eval_every_s: float = 0.5
    n_eval: int = 20000  # train / test rows the driver evaluates on
    n_shards: int = 2  # parameter-server shards
    test_fraction: float = 0.2
    shuffle_seed: Optional[int] = 0  # the train/test split; None: file order


@dataclass
class ExperimentSpec:
    kind: str = "duhl"  # duhl | distbelief (pipelines.distbelief runs it)
    name: str = "duhl"
    target_rel_gap: float = 1e-6  # every arm runs to this rel_gap ...
    target_suboptimality: float = 1e-6  # ... or, arms without a gap (DIANA), to this F - F*
    max_time: Optional[float] = 60.0  # ... or this many seconds (per arm)
    main_arm: str = "gap"  # the arm whose speedups are reported
    baselines: List[str] = field(default_factory=lambda: ["sequential", "random"])
    # name -> overrides of the solver settings (keys of SolverConfig, or
    # memory_budget / max_time); empty = one arm with the solver as configured.
    arms: Dict[str, Any] = field(default_factory=dict)
    distbelief: DistBeliefSpec = field(default_factory=DistBeliefSpec)


@dataclass
class Config:
    model: Any = MISSING
    data: Any = MISSING
    solver: SolverConfig = field(default_factory=SolverConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    experiment: ExperimentSpec = field(default_factory=ExperimentSpec)
    seed: int = 0
    progress: bool = True  # progress bars (only ever on a terminal)
    cache_dir: str = ".cache/data"  # relative paths start at the project root


# group -> {name: dataclass}, stored as schema/<group>/<name>; a YAML option
# extends one with `- /schema/<group>/<name>@_here_` (kept out of the group
# itself so that `model=...` lists only real options).
SCHEMAS = {
    "model": {"lasso": LassoModel, "elastic_net": ElasticNetModel, "ridge": RidgeModel,
              "svm": SvmModel, "logistic": LogisticModel, "mlp": MlpModel},
    "data": {"synthetic_dense": SyntheticDenseData, "synthetic_sparse": SyntheticSparseData,
             "libsvm": LibsvmData, "sklearn": SklearnData, "sphere": SphereData},
    "solver": {"duhl": SolverConfig, "cocoa": CocoaSolverConfig, "diana": DianaSolverConfig},
    "device": {"base": DeviceConfig},
    "cluster": {"base": ClusterConfig, "local": LocalClusterConfig, "local_cuda": LocalCudaClusterConfig,
                "remote": RemoteClusterConfig,
                "slurm": SlurmClusterConfig},
    "tracking": {"base": TrackingConfig},
}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


def check_config(cfg: DictConfig) -> None:
    """Check each group against its schema again: ``+group.key=value`` can add a
    key that composition lets through. Raises OmegaConf's error naming the key."""
    for group, schemas in SCHEMAS.items():
        node = OmegaConf.to_container(cfg[group], resolve=True)
        schema = schemas.get(node.get("name"), next(iter(schemas.values())))
        OmegaConf.merge(OmegaConf.structured(schema), node)
