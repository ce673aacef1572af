"""Parameter checks from one declarative table, worded as scikit-learn words them.

    check_params("Lasso", alpha=-1.0)
    ValueError: The 'alpha' parameter of Lasso must be a float > 0. Got -1.0 instead.

A parameter name has one rule wherever it appears (``tol`` is a float >= 0 for
every solver), and the error names the class the user called, so ``Lasso``
reports its own ``max_iter`` rather than the solver underneath. Python and
NumPy scalars are accepted alike: ``GridSearchCV`` over ``np.arange`` grids
passes ``np.int64`` and ``np.float64``. ``bool`` is not a number here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Mapping, Tuple


class Rule:
    """What a parameter may be; ``text`` completes "must be ..."."""

    text = ""

    def ok(self, value: Any) -> bool:
        raise NotImplementedError


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Real(Rule):
    """A finite float (ints accepted) in an interval; ``closed`` says which ends belong."""

    low: float | None = None
    high: float | None = None
    closed: str = "both"  # "both", "left", "right", "neither"

    @property
    def text(self):
        left = self.closed in ("both", "left")
        right = self.closed in ("both", "right")
        if self.high is None:
            return "a float" if self.low is None else f"a float {'>=' if left else '>'} {self.low:g}"
        if self.low is None:
            return f"a float {'<=' if right else '<'} {self.high:g}"
        return f"a float in {'[' if left else '('}{self.low:g}, {self.high:g}{']' if right else ')'}"

    def ok(self, value):
        if not _is_real(value) or not math.isfinite(value):
            return False
        left = self.closed in ("both", "left")
        right = self.closed in ("both", "right")
        if self.low is not None and not (value >= self.low if left else value > self.low):
            return False
        return self.high is None or (value <= self.high if right else value < self.high)


@dataclass(frozen=True)
class Integer(Rule):
    low: int | None = None
    high: int | None = None

    @property
    def text(self):
        if self.high is None:
            return "an int" if self.low is None else f"an int >= {self.low}"
        return f"an int in [{self.low}, {self.high}]"

    def ok(self, value):
        return (_is_int(value) and (self.low is None or value >= self.low)
                and (self.high is None or value <= self.high))


@dataclass(frozen=True)
class Widths(Rule):
    """An int >= ``low``, or a non-empty list of them (an MLP's hidden layer widths)."""

    low: int = 1

    @property
    def text(self):
        return f"an int >= {self.low} or a non-empty list of ints >= {self.low}"

    def ok(self, value):
        one = Integer(self.low)
        if one.ok(value):
            return True
        return isinstance(value, (list, tuple)) and len(value) > 0 and all(one.ok(v) for v in value)


@dataclass(frozen=True)
class Options(Rule):
    values: Tuple[Any, ...]

    @property
    def text(self):
        return f"one of {self.values}"

    def ok(self, value):
        try:
            return value in self.values
        except TypeError:  # an unhashable or odd object
            return False


@dataclass(frozen=True)
class Boolean(Rule):
    text = "a bool"

    def ok(self, value):
        import numpy as np

        return isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Size(Rule):
    """A number of bytes written as a string: '512MB', '2GiB', '1000B'."""

    text = "a size like '2GB'"

    def ok(self, value):
        return isinstance(value, str) and parse_size(value) is not None


@dataclass(frozen=True)
class Either(Rule):
    """Any of several rules; ``None`` may be one of them (``Either(None, Real(0))``)."""

    rules: Tuple[Any, ...]

    def __init__(self, *rules):
        object.__setattr__(self, "rules", rules)

    @property
    def text(self):
        parts = ["None" if r is None else (repr(r) if isinstance(r, str) else r.text) for r in self.rules]
        return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]

    def ok(self, value):
        for rule in self.rules:
            if rule is None or isinstance(rule, str):
                if value is rule or (isinstance(rule, str) and value == rule):
                    return True
            elif rule.ok(value):
                return True
        return False


@dataclass(frozen=True)
class Seed(Rule):
    """None, an int >= 0 or a NumPy Generator/RandomState (what np.random.default_rng takes)."""

    text = "None, an int >= 0 or a numpy.random.Generator"

    def ok(self, value):
        import numpy as np

        return (value is None or (_is_int(value) and value >= 0)
                or isinstance(value, (np.random.Generator, np.random.RandomState, np.random.SeedSequence)))


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int | None:
    """Bytes in a size string ('512MB', '1.5GiB'), or None if it is not one."""
    match = _SIZE.match(text)
    if not match or match.group(2).upper() not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


SELECTIONS = ("gap", "random", "sequential", "importance")
DEVICES = ("cpu", "cuda", "cuda_sim")
AUTO_OR_POSITIVE_INT = Either("auto", Integer(1))

# One rule per parameter name, for every solver and estimator in solvers/.
RULES: Mapping[str, Rule] = {
    # the models (scikit-learn's names)
    "alpha": Real(0, None, "neither"),
    "l1_ratio": Real(0, 1),
    "C": Real(0, None, "neither"),
    "loss": Options(("hinge", "squared_hinge")),
    "penalty": Options(("l1", "l2", "elasticnet")),
    "dual": Either("auto", Boolean()),
    "fit_intercept": Boolean(),
    "intercept_scaling": Real(0, None, "neither"),
    # stopping
    "tol": Real(0, None, "left"),
    "max_iter": Integer(1),
    "max_epochs": Real(0, None, "neither"),
    "max_rounds": Integer(1),
    "max_time": Either(None, Real(0, None, "neither")),
    "random_state": Seed(),
    # DuHL
    "memory_budget": Either(None, Real(0, 1, "right"), Size()),
    "selection": Options(SELECTIONS),
    "local_epochs": AUTO_OR_POSITIVE_INT,
    "device": Options(DEVICES),
    "gap_every": AUTO_OR_POSITIVE_INT,
    "shrinking": Boolean(),
    "anderson": Either("auto", Boolean()),
    "prefetch": Either("auto", Real(0, 1, "left")),
    "gap_kernel": Options(("tpa", "blas")),
    "concurrency": AUTO_OR_POSITIVE_INT,
    "keep_iterates": Integer(0),
    "refresh": Either("auto", "all", Real(0, None, "left")),
    "host_budget": Either(None, Real(0, 1, "right"), Size()),
    "loop": Options(("auto", "python", "compiled")),
    "gram": Either("auto", Boolean()),
    "gap_proofs": Either("auto", Boolean()),
    "certify_end": Boolean(),
    # CoCoA+ and DIANA
    "n_parts": Integer(1),
    "aggregation": Options(("adding", "averaging")),
    "local_solver": Options(("scd", "duhl")),
    "n_workers": Integer(1),
    "method": Options(("diana", "gd", "no_shift", "ef21")),
    "gamma": Either(None, Real(0, None, "neither")),
    "shift_lr": Either(None, Real(0, 1)),
    # compressors
    "k": Integer(1),
    "s": Integer(1),
    "bucket_size": Either(None, Integer(1)),
    # DistBelief
    "batch_size": Integer(1),
    "n_fetch": Integer(1),
    "n_push": Integer(1),
    "lr": Real(0, None, "neither"),
    "hidden": Widths(1),
    "m": Integer(1),
}


def rule_text(name: str) -> str:
    return RULES[name].text


def check(owner: str, name: str, value: Any, rule: Rule | None = None) -> Any:
    """Raise ValueError unless ``value`` satisfies the rule of ``name``; returns it."""
    rule = rule or RULES[name]
    if not rule.ok(value):
        raise ValueError(f"The '{name}' parameter of {owner} must be {rule.text}. Got {value!r} instead.")
    return value


def check_params(owner: str, rules: Mapping[str, Rule] | None = None, **values: Any) -> None:
    """Check every keyword against its rule (``rules`` overrides the table for this owner)."""
    for name, value in values.items():
        check(owner, name, value, (rules or {}).get(name))


def field_rule(f) -> Rule | None:
    """A dataclass field's rule: its ``metadata["rule"]``, else the table's rule of its name."""
    return f.metadata.get("rule", RULES.get(f.name))


def check_fields(owner: str, obj: Any) -> Any:
    """Check every field of a dataclass instance (a config) that has a rule; returns it."""
    for f in dataclasses.fields(obj):
        rule = field_rule(f)
        if rule is not None:
            check(owner, f.name, getattr(obj, f.name), rule)
    return obj


def ruled(default: Any, rule: Rule) -> Any:
    """A dataclass field with a rule: ``n_samples: int = ruled(5000, Integer(1))``."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"rule": rule})
    return dataclasses.field(default=default, metadata={"rule": rule})
