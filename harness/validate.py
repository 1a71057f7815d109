"""Start-up validation of a run's settings, before any data or model is loaded.

``TOP_LEVEL`` checks named numeric keys of the run config, ``FLAGS`` its booleans. ``KNOBS`` holds rules keyed
by key name (``fnmatch`` patterns) that apply to every key of that name anywhere under ``method`` and
``generator``, nested component configs included, so a new method's ``top_k`` or ``*_threshold`` is checked
without code here. Keys under an ``options`` or ``extra_body`` mapping (keywords passed through to a library or a
server) and ``_target_``-style keys are not checked. A bad value raises ``ConfigError`` naming the key, the value
and the allowed range.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

SECTIONS = ("method", "generator")  # config subtrees the KNOBS rules apply to
PASS_THROUGH = ("options", "extra_body")  # mappings handed to a library or a server as they are: not checked


class ConfigError(ValueError):
    """A setting out of its allowed range; the message names the key, the value and the range."""


@dataclass(frozen=True)
class Rule:
    """An integer or a finite number within ``[lo, hi]`` (``lo_open``: ``lo`` excluded); ``null``: None is
    accepted (it means "unset" or "the component's default")."""

    integer: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    null: bool = False

    def allowed(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.lo is not None and self.hi is not None:
            kind += f" in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
        elif self.lo is not None:
            kind += f" {'>' if self.lo_open else '>='} {self.lo:g}"
        elif self.hi is not None:
            kind += f" <= {self.hi:g}"
        return kind + (" or null" if self.null else "")

    def ok(self, v: Any) -> bool:
        if v is None:
            return self.null
        if isinstance(v, bool) or not isinstance(v, int | float):
            return False
        if self.integer and not isinstance(v, int):
            return False
        if not math.isfinite(v):
            return False
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or v <= self.hi


def _int(lo: int | None = None, null: bool = False) -> Rule:
    return Rule(integer=True, lo=lo, null=null)


FRACTION = Rule(lo=0, hi=1, null=True)  # a share that may be 0 (reduce_ratio: drop nothing)
RATE = Rule(lo=0, hi=1, lo_open=True, null=True)  # a share to keep: 0 keeps nothing

FLAGS = ("progress", "reuse", "dataset.skip_unanswerable")  # booleans
CHOICES = {"on_error": ("fail", "skip")}

TOP_LEVEL: dict[str, Rule] = {
    "limit": _int(1, null=True),
    "batch_size": _int(1),
    "dataset.top_k": _int(1),
    "dataset.seed": _int(0),
    "latency.samples": _int(0),
    "latency.warmup": _int(0),
}

KNOBS: dict[str, Rule] = {
    "top_k": _int(1, null=True),
    "rate": RATE,
    "*ratio": FRACTION,
    "*threshold": Rule(null=True),
    "budget": _int(1, null=True),
    "*budget_tokens": _int(1, null=True),
    "*max_new_tokens": _int(1, null=True),
    "max_input_tokens": _int(1, null=True),
    "max_length": _int(1, null=True),
    "batch_tokens": _int(1),
    "*batch_size": _int(1),
    "threads": _int(1, null=True),
    "seed": _int(0, null=True),
    "max_answers": _int(1, null=True),
    "min_words": _int(0),
    "tau": _int(1),
    "cap": _int(1),
    "concurrency": _int(1),
    "timeout_s": Rule(lo=0, lo_open=True),
    "retries": _int(0),
    "backoff_s": Rule(lo=0),
    "k1": Rule(lo=0),
    "b": Rule(lo=0, hi=1),
}


def rule_for(name: str) -> Rule | None:
    """The ``KNOBS`` rule for a key name: an exact entry first, then the first matching pattern."""
    if name in KNOBS:
        return KNOBS[name]
    return next((r for pat, r in KNOBS.items() if fnmatchcase(name, pat)), None)


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """(dotted key, leaf name, value) of every leaf under ``node``, skipping pass-through mappings."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            k = str(k)
            if k.startswith("_") or k in PASS_THROUGH:
                continue
            key = f"{prefix}.{k}"
            if isinstance(v, Mapping | list):
                yield from _leaves(v, key)
            else:
                yield key, k, v
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, Mapping | list):
                yield from _leaves(v, f"{prefix}[{i}]")


def check(key: str, value: Any, rule: Rule) -> None:
    if not rule.ok(value):
        raise ConfigError(f"{key}={value!r}: must be {rule.allowed()}")


_ABSENT = object()


def _resolve(cfg: DictConfig, key: str) -> Any:
    """The resolved value at a dotted key (containers as plain dicts and lists), or ``_ABSENT``."""
    try:
        node = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node
    except OmegaConfBaseException as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{key}: cannot resolve the setting ({why})") from None


def validate_config(cfg: DictConfig) -> None:
    """Check every numeric setting of a run config against ``TOP_LEVEL`` and ``KNOBS``; raise ``ConfigError``
    on the first bad one. Absent keys are not required here."""
    for key, rule in TOP_LEVEL.items():
        value = _resolve(cfg, key)
        if value is not _ABSENT:
            check(key, value, rule)
    for key in FLAGS:
        value = _resolve(cfg, key)
        if value is not _ABSENT and not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r}: must be true or false")
    for key, valid in CHOICES.items():
        value = _resolve(cfg, key)
        if value is not _ABSENT and value not in valid:
            raise ConfigError(f"{key}={value!r}: must be one of {', '.join(valid)}")
    for section in SECTIONS:
        tree = _resolve(cfg, section)
        for key, name, value in _leaves({} if tree is _ABSENT else tree, section):
            rule = rule_for(name)
            if rule is not None:
                check(key, value, rule)
