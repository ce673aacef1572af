"""Structured configs: the schema Hydra checks every composed config against.

The top level and each group option have a dataclass, stored in Hydra's
ConfigStore; the YAML files in conf/ extend them (``defaults: [/schema/<group>/<x>@_here_]``),
so an unknown key or a value of the wrong type fails while Hydra composes the
config. Ranges live in the dataclasses too (a field's rule, or the rule of its
name in ``solvers.glm.checks.RULES``): :func:`check_config` checks every group
against them before any data is made, with scikit-learn's one-line message.
The model schemas are made from the model registry (``solvers.glm.models``),
so a new model needs no schema here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from solvers.glm.checks import (AUTO_OR_POSITIVE_INT, DEVICES, Either, Integer, Options, Real, check, check_fields,
                                ruled)
from solvers.glm.models import MODELS
from tasks.cluster import (ClusterConfig, LocalClusterConfig, LocalCudaClusterConfig, RemoteClusterConfig,
                           SlurmClusterConfig)
from tasks.data import (CriteoData, LibsvmData, NpyData, SklearnData, SphereData, SyntheticCriteoData,
                        SyntheticDenseData, SyntheticRowsData, SyntheticSparseData, ZarrData)

POSITIVE = Real(0, None, "neither")


def model_schema(model) -> type:
    """The config dataclass of a registered GLM: its name and make_problem's named parameters, and
    the options that choose among its family's entries (``penalty``, ``dual``: any type, "auto" or a
    bool; tasks.problems.resolve_model turns them into an entry once the data's shape is known)."""
    fields = [("name", str, field(default=model.name))]
    fields += [(name, type(default), field(default=default)) for name, default in model.params.items()]
    fields += [(name, Any, field(default=default)) for name, default in model.options.items()]
    return make_dataclass(f"{model.estimator}{model.name.title().replace('_', '')}Model", fields)


@dataclass
class MlpModel:
    """DistBelief family only: hidden layers of ``hidden`` units (an int: one layer; a list: one
    width per layer), ``activation`` tanh or relu, a logistic or softmax ``output``, L2 ``alpha``.
    (solvers.distbelief.models.MLP checks them when the experiment is planned.)"""

    name: str = "mlp"
    hidden: Any = 32  # an int or a list of ints (OmegaConf has no int-or-list type)
    alpha: float = ruled(1e-4, Real(0))
    activation: str = "tanh"
    output: str = "logistic"
    n_classes: int = 2


@dataclass
class SolverConfig:
    """Settings every arm shares; an arm overrides some of them."""

    name: str = "duhl"
    selection: str = "gap"
    local_epochs: Any = "auto"  # an int >= 1 or "auto" (its rule; DuHL: see conf/solver/duhl.yaml)
    max_epochs: float = 100000
    random_state: Optional[int] = 0


@dataclass
class DuhlSolverConfig(SolverConfig):
    """DuHL: ``refresh`` is the stale-gap refresh per round with part of the data resident:
    "auto" (as many bytes as the block reads, or on disk as the disk reads while it computes),
    "all" (every gap every round), or a float >= 0 (that many data's worth; 0: none).
    ``anderson``: Anderson extrapolation with all data resident on the CPU (Lasso family, classifiers
    in the primal):
    "auto" (on where it applies), true or false."""

    refresh: Any = "auto"
    anderson: Any = "auto"


@dataclass
class CocoaSolverConfig(SolverConfig):
    """CoCoA+ (tasks.distributed_glm.arms.CocoaArm): local_epochs is H; a memory_budget
    (device/) makes each part's local solver DuHL, null in-memory SCD."""

    name: str = "cocoa"
    n_parts: int = 2  # K replicas
    aggregation: str = "adding"  # adding (gamma = 1) | averaging (gamma = 1/K)
    # sigma': "safe" (gamma K), "data" (the exact sigma'_min of the data and partition) or a float
    sigma: Any = ruled("safe", Either("safe", "data", POSITIVE))
    local_epochs: Any = ruled(1, AUTO_OR_POSITIVE_INT)  # H, or "auto": from communication / computation
    local_solver: str = "scd"
    compressor: Any = None  # None: exact messages; an unbiased compressor (as DIANA's): shifted compression
    shift_lr: Optional[float] = None  # the shifts' step; None: 1 / (1 + omega)


@dataclass
class DianaSolverConfig(SolverConfig):
    """DIANA and its baselines (tasks.distributed_glm.arms.DianaArm); max_epochs caps the rounds."""

    name: str = "diana"
    n_workers: int = 4
    method: str = "diana"  # diana | gd | no_shift | ef21
    compressor: Any = "identity"  # a name or a mapping (solvers.distributed_glm.compression.make_compressor)
    gamma: Optional[float] = None  # None: from L and omega
    shift_lr: Optional[float] = None  # None: 1 / (1 + omega)


@dataclass
class DeviceConfig:
    name: str = ruled("cpu", Options(DEVICES))
    # A fraction of the data's bytes in (0, 1], a size like "512MB", or null
    # (all data on the device). Any: OmegaConf has no float-or-str type.
    memory_budget: Any = 0.25
    # RAM for data when the data stays on disk (device=cpu: the block is the RAM tier, read
    # from the cache's X.npy past the page cache; a GPU: the RAM tier between the disk and the
    # GPU block, which memory_budget sizes): a fraction, a size, or null (data in RAM).
    host_budget: Any = None
    # The share of memory_budget kept as staging memory for coordinates copied ahead
    # of their swap (DuHL's prefetch): "auto" (0.2 on the GPU devices, 0 on the CPU)
    # or a float in [0, 1).
    prefetch: Any = "auto"
    # How a GPU device computes its resident set's gaps: "tpa" (a thread block per
    # coordinate) or "blas" (one cuBLAS matrix-vector product; dense data).
    gap_kernel: str = "tpa"
    # The most coordinates a GPU epoch updates at once: "auto" (sqrt of the epoch's
    # coordinates) or an int >= 1.
    concurrency: Any = "auto"


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<project>/mlflow.db
    experiment_name: str = "${experiment.name}"
    flush_every_s: float = ruled(5.0, Real(0))  # metrics are buffered and sent in batches
    # Rows sent to MLflow: one per 1/points_per_decade decade of rel_gap, one
    # per min_interval_s, the target crossing and the last (0 = every round).
    # Every round is in the trace CSV artifact.
    points_per_decade: int = ruled(5, Integer(0))
    min_interval_s: float = ruled(2.0, Real(0))


@dataclass
class DistBeliefSpec:
    """experiment.kind=distbelief: what every arm shares (pipelines.distbelief)."""

    target_loss: Optional[float] = ruled(None, Either(None, Real()))  # time / samples to this training loss ...
    target_accuracy: Optional[float] = ruled(None, Either(None, Real(0, 1)))  # ... and this test accuracy
    stop_at_target: bool = True  # False: every arm runs to max_time
    lr: float = 0.1  # Downpour: the fixed rate, or Adagrad's gamma (when lr_grid is empty)
    # Downpour arms without their own lr are tuned on this grid, tune_samples minibatch samples per
    # rate over all replicas (the same budget for every arm): the lowest training loss at the end
    # wins. Empty: every arm uses lr.
    lr_grid: List[float] = field(default_factory=list)
    tune_samples: int = ruled(16000, Integer(1))
    batch_size: int = 32
    warmup_steps: int = ruled(0, Integer(0))  # Downpour: replica 0 alone for this many pushes
    eval_every_s: float = ruled(0.5, POSITIVE)
    n_eval: int = ruled(20000, Integer(1))  # train / test rows the driver evaluates on
    n_shards: int = ruled(2, Integer(1))  # parameter-server shards
    test_fraction: float = ruled(0.2, Real(0, 1, "neither"))
    shuffle_seed: Optional[int] = ruled(0, Either(None, Integer(0)))  # the train/test split; None: file order


@dataclass
class ReproduceSpec:
    """experiment.kind=reproduce (pipelines.reproduce): the runs whose numbers the claims read."""

    runs: Dict[str, List[str]] = field(default_factory=dict)  # run name -> overrides (a preset and changes)
    common: List[str] = field(default_factory=list)  # added to every run's overrides
    only: List[str] = field(default_factory=list)  # run just these runs (empty: all); other claims: not measured


@dataclass
class ExperimentSpec:
    # glm: DuHL, peers, CoCoA+, DIANA arms; distbelief; reproduce: the seed presets and their claims
    kind: str = ruled("glm", Options(("glm", "distbelief", "reproduce")))
    name: str = "duhl"
    target_rel_gap: float = ruled(1e-6, POSITIVE)  # every arm runs to this rel_gap ...
    target_suboptimality: float = ruled(1e-6, POSITIVE)  # ... or, arms without a gap (DIANA), to this F - F*
    max_time: Optional[float] = 60.0  # ... or this many seconds (per arm)
    main_arm: Optional[str] = "duhl-gap"  # the arm whose speedups are reported (null: the first arm)
    baselines: List[str] = field(default_factory=lambda: ["sequential", "random"])
    # name -> overrides of the solver settings (keys of the solver's schema, or
    # memory_budget / max_time / a device setting); empty = one arm with the solver as configured.
    arms: Dict[str, Any] = field(default_factory=dict)
    distbelief: DistBeliefSpec = field(default_factory=DistBeliefSpec)
    reproduce: ReproduceSpec = field(default_factory=ReproduceSpec)


@dataclass
class Config:
    model: Any = MISSING
    data: Any = MISSING
    solver: SolverConfig = field(default_factory=SolverConfig)
    device: DeviceConfig = field(default_factory=DeviceConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    experiment: ExperimentSpec = field(default_factory=ExperimentSpec)
    seed: int = ruled(0, Integer(0))
    progress: bool = True  # progress bars (only ever on a terminal)
    cache_dir: str = ".cache/data"  # relative paths start at the project root


# group -> {name: dataclass}, stored as schema/<group>/<name>; a YAML option
# extends one with `- /schema/<group>/<name>@_here_` (kept out of the group
# itself so that `model=...` lists only real options).
SCHEMAS = {
    "model": {**{name: model_schema(m) for name, m in MODELS.items()}, "mlp": MlpModel},
    "data": {"synthetic_dense": SyntheticDenseData, "synthetic_rows": SyntheticRowsData, "synthetic_sparse": SyntheticSparseData,
             "libsvm": LibsvmData, "sklearn": SklearnData, "sphere": SphereData, "npy": NpyData,
             "zarr": ZarrData, "criteo": CriteoData, "synthetic_criteo": SyntheticCriteoData},
    "solver": {"duhl": DuhlSolverConfig, "cocoa": CocoaSolverConfig, "diana": DianaSolverConfig},
    "device": {"base": DeviceConfig},
    "cluster": {"base": ClusterConfig, "local": LocalClusterConfig, "local_cuda": LocalCudaClusterConfig,
                "remote": RemoteClusterConfig, "slurm": SlurmClusterConfig},
    "tracking": {"base": TrackingConfig},
    "experiment": {"base": ExperimentSpec},
}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schemas in SCHEMAS.items():
        if group == "experiment":
            continue  # presets are @package _global_ deltas of Config
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


def solver_schema(name: str) -> type:
    """The schema of a solver's settings (DuHL's for a peer)."""
    return SCHEMAS["solver"].get(name, SolverConfig)


def checked(schema: type, node: Dict[str, Any], owner: str) -> Any:
    """``node`` as an instance of ``schema``: OmegaConf's error on an unknown key or a
    wrong type, scikit-learn's one-line message on a value out of range."""
    instance = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    check_fields(owner, instance)
    for f in fields(instance):  # nested sections (experiment.distbelief)
        if is_dataclass(getattr(instance, f.name)):
            check_fields(f"{owner}.{f.name}", getattr(instance, f.name))
    return instance


def check_config(cfg: DictConfig) -> None:
    """Every group against its schema and ranges. Composition already refused unknown
    keys, but ``+group.key=value`` can add one; this is the only range check of the
    config layer (the solvers check their own arguments again when built)."""
    for group, schemas in SCHEMAS.items():
        node = OmegaConf.to_container(cfg[group], resolve=True)
        name = node.get("name", "base")
        schema = schemas.get(name, schemas.get("base", next(iter(schemas.values()))))
        owner = f"{group} '{name}'" if group in ("model", "data", "cluster") else group
        checked(schema, node, owner)
    for f in fields(Config):  # the top level's own keys (seed)
        if "rule" in f.metadata:
            check("config", f.name, cfg[f.name], f.metadata["rule"])
