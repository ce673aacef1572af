"""Pages generated from the code at every build, so that they cannot drift from it.

- ``reference/configuration.md``: every config group, every option (a YAML file in conf/),
  every key with its value in that option, its type and its allowed values, from Hydra
  itself (each option composed as ``python -m pipelines.experiment`` composes it) and the
  schemas in ``pipelines/config.py`` (types; ranges from ``solvers.glm.checks``). A key's
  description is its comment in the YAML file, else its comment in the schema's source.
- ``reference/make-targets.md``: the Makefile's targets and their ``## `` help comments
  (what ``make help`` prints).

MkDocs runs :func:`on_files` (a hook named in mkdocs.yml); the tests import this file to
check that the pages name every key and every target.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
GROUPS = ("model", "data", "solver", "device", "cluster", "tracking")
GROUP_TEXT = {
    "model": "The model to train: its objective and named parameters (the model registry's "
             "`make_problem` parameters, with scikit-learn's names).",
    "data": "The dataset: a generator, a LIBSVM file, one of scikit-learn's shipped sets, or your "
            "own `.npy` or zarr array. Made once into the dataset cache (`cache_dir`).",
    "solver": "The solver settings every arm shares; an experiment's `arms` override some of them.",
    "device": "Where the block lives and how much of the data it holds.",
    "cluster": "Where arms and replicas run: in-process, a LocalCluster, an existing scheduler, SLURM.",
    "tracking": "Where runs are recorded.",
}

_TOP_COMMENT = re.compile(r"^([A-Za-z_][\w]*):\s*(.*?)\s+#\s?(.*)$")


# --- reading the sources -------------------------------------------------------------------

def _yaml_comments(path: Path) -> dict:
    """{top-level key: its trailing comment} of a YAML file in conf/."""
    out = {}
    for line in path.read_text().splitlines():
        match = _TOP_COMMENT.match(line)
        if match:
            out[match.group(1)] = match.group(3).strip()
    return out


def _header(path: Path) -> str:
    """The comment block a YAML file starts with, without '# @package' lines and example
    commands (which the user guide shows, tested)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if text.startswith("@package") or line.startswith("#  "):
            continue
        lines.append(text)
    return " ".join(lines)


def _defaults(path: Path) -> list:
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("defaults", []) or []


def _schema_and_chain(group: str, option: str):
    """The schema dataclass an option extends and the option files it reads, nearest first
    (``duhl_gap`` extends ``duhl``, which names ``/schema/solver/duhl``)."""
    from pipelines.config import SCHEMAS

    chain, schema = [], None
    name = option
    while name and schema is None:
        path = CONF / group / f"{name}.yaml"
        chain.append(path)
        name = None
        for entry in _defaults(path):
            if isinstance(entry, str) and entry.startswith(f"/schema/{group}/"):
                schema = SCHEMAS[group][entry.split("/")[3].split("@")[0]]
            elif isinstance(entry, str) and entry not in ("_self_",) and (CONF / group / f"{entry}.yaml").exists():
                name = entry
    return schema, chain


def _source_comments(cls) -> dict:
    """{field: its comment} from a dataclass's source: the comment on the field's line, else
    the comment lines just above it; for every class in its MRO (nearest first)."""
    out = {}
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):  # made by make_dataclass (the model schemas): no source
            continue
        above = []
        for line in source.splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                above.append(stripped.lstrip("#").strip())
                continue
            match = re.match(r"^\s+([A-Za-z_]\w*)\s*:\s*[^=]+=.*?(?:#\s?(.*))?$", line)
            if match and match.group(1) not in out:
                out[match.group(1)] = (match.group(2) or " ".join(above)).strip()
            above = []
    return out


def _type_text(annotation) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = text.replace("typing.", "")
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    if optional:
        return f"{_type_text(optional.group(1))} or null"
    listed = re.fullmatch(r"List\[(.*)\]", text)
    if listed:
        return f"list of {_type_text(listed.group(1))}"
    if text.startswith("Dict["):
        return "mapping"
    if text == "Any":
        return "any"
    return text


def _value_text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else text


# --- the configuration page ----------------------------------------------------------------

def _compose(overrides, hydra=False):
    from hydra import compose

    return compose("config", overrides=list(overrides), return_hydra_config=hydra)


def _group_nodes(loader) -> dict:
    """{(group, option): the group's node as Hydra composes it}. One composition takes the
    i-th option of every group at once (~0.3 s each: one per option would take 13 s)."""
    options = {g: loader.get_group_options(g) for g in GROUPS}
    nodes = {}
    for i in range(max(len(o) for o in options.values())):
        picks = {g: o[i] for g, o in options.items() if i < len(o)}
        cfg = _compose([f"{g}={o}" for g, o in picks.items()])
        nodes.update({(g, o): cfg[g] for g, o in picks.items()})
    return nodes


def _key_rows(schema, node, comments):
    """Rows (key, value, type, allowed, description) for every key of a composed group node."""
    from omegaconf import OmegaConf

    from solvers.glm.checks import field_rule

    values = OmegaConf.to_container(node, resolve=False)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    source = _source_comments(schema)
    hints = typing.get_type_hints(schema) if schema.__module__ in sys.modules else {}
    rows = []
    for key, value in values.items():
        f = fields.get(key)
        rule = field_rule(f) if f is not None else None
        annotation = f.type if f is not None else type(value).__name__
        if f is not None and not isinstance(annotation, str) and key in hints:
            annotation = hints[key]
        rows.append((key, _value_text(value), _type_text(annotation), rule.text if rule else "",
                     comments.get(key) or source.get(key, "")))
    return rows


def _table(rows, head=("key", "value", "type", "allowed", "what")):
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for key, value, type_, allowed, what in rows:
        out.append(f"| `{key}` | {_code(_cell(value))} | {_cell(type_)} | {_cell(allowed)} | {_cell(what)} |")
    return out


def _schema_rows(cls):
    """(key, default, type, allowed, description) of every field of a schema dataclass."""
    from solvers.glm.checks import field_rule

    source = _source_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        if dataclasses.is_dataclass(default):
            default = "(a section: below)"
        rule = field_rule(f)
        rows.append((f.name, default if isinstance(default, str) and default.startswith("(")
                     else _value_text(default), _type_text(f.type), rule.text if rule else "", source.get(f.name, "")))
    return rows


def _docline(cls) -> str:
    return " ".join((inspect.getdoc(cls) or "").split())


def configuration_page() -> str:
    """The configuration reference, composed from conf/ and pipelines/config.py."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pipelines.config import Config, DistBeliefSpec, ExperimentSpec, ReproduceSpec, register_configs

    register_configs()
    out = ["# Configuration", "",
           "Generated from `conf/` and `pipelines/config.py` when the documentation is built: every option "
           "of every group is composed by Hydra as `python -m pipelines.experiment` composes it, and each "
           "key is listed with its value in that option, its type (checked when Hydra composes the config) "
           "and its allowed values (checked before any data is made, with a one-line error). Choose an "
           "option with `group=option` and change a key with `group.key=value`, e.g. "
           "`make experiment ARGS=\"model=svm model.C=0.1\"`.", "",
           "`conf/config.yaml` picks one option per group (the defaults are marked below); an "
           "[experiment preset](#experiment-presets) changes several at once.", ""]
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        chosen = _compose([], hydra=True)
        out += ["## Top-level keys", ""]
        top = [r for r in _schema_rows(Config) if r[0] in ("seed", "progress", "cache_dir")]
        comments = _yaml_comments(CONF / "config.yaml")
        out += _table([(k, _value_text(chosen[k]), t, a, comments.get(k) or w) for k, _, t, a, w in top]) + [""]
        nodes = _group_nodes(loader)
        for group in GROUPS:
            out += [f"## `{group}`", "", GROUP_TEXT[group], ""]
            default = chosen.hydra.runtime.choices[group]
            for option in loader.get_group_options(group):
                schema, chain = _schema_and_chain(group, option)
                comments = {}
                for path in reversed(chain):
                    comments.update(_yaml_comments(path))
                mark = " (default)" if option == default else ""
                out += [f"### `{group}={option}`{mark} {{#{group}-{option}}}", "", _header(chain[0]) or _docline(schema), ""]
                rows = _key_rows(schema, nodes[group, option], comments)
                if len(chain) > 1:  # an option extending another: only what it changes
                    parent = chain[1].stem
                    before = {r[0]: r[1] for r in _key_rows(schema, nodes[group, parent], comments)}
                    rows = [r for r in rows if before.get(r[0]) != r[1]]
                    out += [f"Extends [`{group}={parent}`](#{group}-{parent}) (every key above); it changes:", ""]
                out += _table(rows) + [""]
        out += _experiment_section(loader)
        out += ["## The experiment section's keys", "",
                "The keys every preset sets under `experiment`, with their schema defaults "
                f"(`{ExperimentSpec.__module__}.{ExperimentSpec.__name__}`).", ""]
        out += _table(_schema_rows(ExperimentSpec), head=("key", "default", "type", "allowed", "what")) + [""]
        for name, cls in (("experiment.distbelief", DistBeliefSpec), ("experiment.reproduce", ReproduceSpec)):
            out += [f"### `{name}`", "", _docline(cls), ""]
            out += _table(_schema_rows(cls), head=("key", "default", "type", "allowed", "what")) + [""]
    return "\n".join(out) + "\n"


def _experiment_section(loader):
    from omegaconf import OmegaConf

    out = ["## Experiment presets", "",
           "`experiment=<name>` (`conf/experiment/`): deltas of the whole config (`@package _global_`). "
           "Each picks options of the groups above, may change some of their keys, and sets the "
           "experiment's arms: overrides of the shared solver settings (plus `memory_budget`, "
           "`max_time` and the device settings).", ""]
    for option in loader.get_group_options("experiment"):
        path = CONF / "experiment" / f"{option}.yaml"
        raw = yaml.safe_load(path.read_text()) or {}
        cfg = _compose([f"experiment={option}"], hydra=True)
        exp = OmegaConf.to_container(cfg.experiment, resolve=False)
        choices = cfg.hydra.runtime.choices
        picks = ", ".join(f"[`{g}={choices[g]}`](#{g}-{choices[g]})" for g in ("model", "data", "solver", "device",
                                                                              "cluster"))
        out += [f"### `experiment={option}`" + (" (default)" if option == "default" else "") + f" {{#experiment-{option}}}", "",
                _header(path), "", f"Options: {picks}.", ""]
        changed = [(f"{g}.{k}", v) for g, node in raw.items() if g not in ("defaults", "experiment")
                   and isinstance(node, dict) for k, v in node.items()]
        if changed:
            out += ["Keys it changes: " + ", ".join(f"`{k}={_value_text(v)}`" for k, v in changed) + ".", ""]
        keys = [k for k in ("kind", "name", "target_rel_gap", "target_suboptimality", "max_time", "main_arm",
                            "baselines")]
        out += ["| " + " | ".join(f"`{k}`" for k in keys) + " |", "|" + " --- |" * len(keys),
                "| " + " | ".join(_cell(_value_text(exp[k])) for k in keys) + " |", ""]
        arms = (raw.get("experiment") or {}).get("arms") or {}
        if arms:
            out += ["| arm | settings |", "| --- | --- |"]
            out += [f"| `{name}` | `{_cell(_value_text(settings))}` |" for name, settings in arms.items()]
            out.append("")
    return out


# --- the make targets page -----------------------------------------------------------------

_TARGET = re.compile(r"^([a-z][a-z0-9-]*):[^=]*?##\s*(.*)$")


def make_targets() -> list:
    """[(target, help)] in the Makefile's order: every target with a ``## `` comment."""
    out = []
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = _TARGET.match(line)
        if match:
            out.append((match.group(1), match.group(2).strip()))
    return out


def make_targets_page() -> str:
    out = ["# Make targets", "",
           "Generated from the Makefile's `## ` comments when the documentation is built (`make help` "
           "prints the same list). Every target installs the project into `.venv` first when "
           "`pyproject.toml` has changed. `ARGS=\"...\"` passes Hydra overrides to the experiment "
           "targets and options to the benchmark and test targets.", "",
           "| target | what it does |", "| --- | --- |"]
    out += [f"| `make {name}` | {_cell(text)} |" for name, text in make_targets()]
    return "\n".join(out) + "\n"


# --- the MkDocs hook -----------------------------------------------------------------------

PAGES = {"reference/configuration.md": configuration_page, "reference/make-targets.md": make_targets_page}


_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):<code>(~?)([^<]+)</code>")


def _role(match):
    name = match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if match.group(1) else name}</code>"


def on_page_content(html, page, config, files):
    """The docstrings' Sphinx roles (:class:`~a.b.C`) as plain code (C): mkdocstrings renders
    Markdown, where a role would show as its text."""
    return _ROLE.sub(_role, html)


def on_files(files, config):
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
