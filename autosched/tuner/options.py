"""Declared, validated tuner options.

Each strategy declares its options as a frozen dataclass (names, types,
defaults, ranges in `__post_init__`); `parse_options` turns user-given keyword
options into that object or says exactly what is wrong. The object is then
passed down whole instead of being read piecemeal from dicts or the environment.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from autosched.errors import AutoschedError

T = TypeVar("T")


class OptionError(AutoschedError):
    """An unknown tuner option or one with a bad value."""


def parse_options(cls: type[T], given: Mapping[str, Any], owner: str) -> T:
    """Build `cls` from `given`, rejecting unknown names and values of the wrong type."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for name, value in given.items():
        if name not in known:
            raise OptionError(f"tuner {owner!r} has no option {name!r}; options: {', '.join(sorted(known))}")
        want = hints[name]
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise OptionError(f"tuner {owner!r}: option {name!r} must be {want.__name__}, got {value!r}")
    try:
        return cls(**given)
    except ValueError as exc:
        raise OptionError(f"tuner {owner!r}: {exc}") from None


def require(cond: bool, message: str) -> None:
    """Range check for options' `__post_init__`; parse_options reports the message."""
    if not cond:
        raise ValueError(message)


@dataclass(frozen=True)
class BaseOptions:
    """Options every strategy has."""

    batch_size: int = 16  # candidates handed to measure_batch per call

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
