"""Typed search spaces: the knobs of a backend config, their choices, and static constraints.

A ``SearchSpace`` is built by a backend (``Backend.space``) for one kernel on one
hardware. Each knob is a field of the backend's frozen config dataclass; fields that are not
tuned for this kernel are ``fixed``. ``config(values)`` builds the typed config (its own
validation plus the space's static ``constraint``), so an impossible combination is known before
anything is compiled. Knobs with ordered numeric choices are given to a sampler as integer
indices (neighbouring powers of two are neighbours for TPE and CMA-ES), others as categoricals
(``encode``; the tuner maps them to Optuna's distributions).
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

Config = Any  # a backend's frozen config dataclass with to_json()/from_json()


@dataclass(frozen=True)
class Knob:
    """One tunable field: its name in the config and its choices, in order."""

    name: str
    choices: tuple
    ordered: bool = True  # numeric choices where neighbours behave alike

    def __post_init__(self):
        if not self.choices:
            raise ValueError(f"knob {self.name!r} has no choices")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"knob {self.name!r} repeats a choice: {self.choices}")

    def encode(self, value: Any) -> Any | None:
        """The Optuna parameter for ``value`` (None when it is not one of the choices)."""
        if value not in self.choices:
            return None
        return self.choices.index(value) if self.ordered else value


class InvalidConfig(ValueError):
    """A point of the space that cannot run: the message says why."""


@dataclass(frozen=True)
class SearchSpace:
    """The knobs of one kernel's config; ``fixed`` holds the untuned fields' values."""

    kind: str                                   # the backend's name
    from_json: Callable[[dict], Config]         # validates and builds a config
    knobs: tuple[Knob, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    constraint: Callable[[Config], str | None] = lambda config: None  # static: reason or None

    @property
    def size(self) -> int:
        """Number of points (including invalid ones)."""
        return math.prod(len(k.choices) for k in self.knobs)

    def config(self, values: Mapping[str, Any]) -> Config:
        """The typed config for knob ``values``; ``InvalidConfig`` if it cannot run."""
        try:
            config = self.from_json({**self.fixed, **values})
        except (TypeError, ValueError) as exc:
            raise InvalidConfig(str(exc)) from None
        reason = self.constraint(config)
        if reason:
            raise InvalidConfig(reason)
        return config

    def values(self, config: Config) -> dict[str, Any]:
        """The knob values of ``config`` (JSON form)."""
        data = config.to_json()
        return {k.name: data[k.name] for k in self.knobs}

    def encode(self, config: Config) -> dict[str, Any] | None:
        """Optuna parameters of ``config``, or None if it is not a point of this space."""
        if not self.contains(config):
            return None
        return {k.name: k.encode(v) for k, v in zip(self.knobs, self.values(config).values())}

    def contains(self, config: Config) -> bool:
        """True if ``config`` is a valid point: its knobs are choices and its fixed fields match."""
        data = config.to_json()
        if any(data.get(name) != value for name, value in self.fixed.items()) or any(
                data[k.name] not in k.choices for k in self.knobs):
            return False
        try:
            return self.config(self.values(config)) == config
        except InvalidConfig:
            return False

    def validate(self, data: Mapping[str, Any]) -> Config:
        """A config from stored JSON that must be a valid point of this space, else ValueError."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a stored config must be an object, got {type(data).__name__}")
        missing = sorted({k.name for k in self.knobs} - set(data))
        if missing:  # a stored config is complete: defaults filled in would pass it off as measured
            raise ValueError(f"{self.kind} config {dict(data)} lacks {', '.join(missing)}")
        try:
            config = self.from_json(dict(data))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid {self.kind} config {dict(data)}: {exc}") from None
        if not self.contains(config):
            raise ValueError(f"{self.kind} config {dict(data)} is not in this kernel's search space")
        return config

    def points(self) -> Iterator[tuple[dict[str, Any], Config | InvalidConfig]]:
        """Every point: (knob values, config or the InvalidConfig explaining why not)."""
        for combo in itertools.product(*(k.choices for k in self.knobs)):
            values = dict(zip((k.name for k in self.knobs), combo))
            try:
                yield values, self.config(values)
            except InvalidConfig as exc:
                yield values, exc

    def describe(self) -> str:
        """One line: knobs and their choices."""
        parts = [f"{k.name}={list(k.choices)}" for k in self.knobs]
        return f"{self.kind} space of {self.size} points: " + ", ".join(parts)


def config_key(config: Config) -> str:
    """A canonical text of a config (dedupes points that build the same config)."""
    return json.dumps(config.to_json(), sort_keys=True, separators=(",", ":"))
