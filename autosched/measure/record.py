"""What flows through measurement: inputs, build results, measure results.

Errors have their own fields (`error_kind`, `error_msg`) and never ride in
`costs`, so a consumer reads a result without unpacking sentinel values.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from autosched.errors import AutoschedError
from autosched.measure.caches import CACHE_MODES
from autosched.space import Config
from autosched.target import Target


class RecordError(AutoschedError):
    """A measurement record that is malformed or inconsistent."""


class ErrorKind(Enum):
    """Why a candidate has no valid timing; stored by name in logs."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the template could not build a schedule from the config
    COMPILE_ERROR = 2
    COMPILE_TIMEOUT = 3
    RUNTIME_ERROR = 4
    RUN_TIMEOUT = 5
    WRONG_ANSWER = 6  # ran, but its output differs from the reference
    RESOURCE_LIMIT = 7  # over the device's limits (threads, shared memory, registers): could never launch
    LOST = 8  # every device it was sent to vanished mid-measurement: says nothing about the config


class TaskLike(Protocol):
    """All measurement needs from a task: a key stable across models and runs, the op whose
    template builds its candidates, and its input shapes (weight folding, the database).
    `autosched.task.Task` is one; tests measure smaller stand-ins."""

    @property
    def key(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def shapes(self) -> Sequence[Sequence[int]]: ...


@dataclass(frozen=True)
class MeasureInput:
    task: TaskLike
    target: Target
    config: Config


@dataclass(frozen=True)
class BuildResult:
    """A compiled candidate: `artifact` is the built file (None if the build failed
    or nothing needed building)."""

    artifact: str | None
    error_kind: ErrorKind
    error_msg: str
    build_s: float

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NO_ERROR


@dataclass(frozen=True)
class MeasureResult:
    """Raw timings in seconds (all repeats, kept for later statistics), or an error.
    `node` names the fleet node that measured it (None: this machine), so a timing can be
    traced to the hardware it came from; `caches` and `threads` say how it was timed (the
    cache mode of `autosched.measure.caches` and the thread count; None: not recorded, as in
    records older than them, which were timed warm)."""

    costs: tuple[float, ...]
    error_kind: ErrorKind
    error_msg: str
    build_s: float
    timestamp: float
    node: str | None = None
    caches: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "costs", tuple(float(c) for c in self.costs))
        if not isinstance(self.error_kind, ErrorKind):
            raise RecordError(f"error_kind must be an ErrorKind, got {self.error_kind!r}")
        if self.error_kind is ErrorKind.NO_ERROR:
            if not self.costs or not all(math.isfinite(c) and c > 0 for c in self.costs):
                raise RecordError(f"a successful result needs positive finite costs, got {self.costs!r}")
        elif self.costs:
            raise RecordError(f"a failed result ({self.error_kind.name}) must not carry costs")
        if self.node is not None and not isinstance(self.node, str):
            raise RecordError(f"node must be a string or None, got {self.node!r}")
        if self.caches is not None and self.caches not in CACHE_MODES:
            raise RecordError(f"caches must be one of {', '.join(CACHE_MODES)} or None, got {self.caches!r}")
        if self.threads is not None and (type(self.threads) is not int or self.threads < 1):
            raise RecordError(f"threads must be a positive integer or None, got {self.threads!r}")

    @classmethod
    def failure(cls, kind: ErrorKind, msg: str, build_s: float, timestamp: float) -> MeasureResult:
        return cls(costs=(), error_kind=kind, error_msg=msg, build_s=build_s, timestamp=timestamp)

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NO_ERROR

    @property
    def cost(self) -> float:
        """The median repeat: robust to a repeat disturbed by another process
        in either direction. Only for successful results."""
        if not self.ok:
            raise RecordError(f"a failed result ({self.error_kind.name}) has no cost")
        return statistics.median(self.costs)

    def to_json(self) -> dict[str, Any]:
        """`node`, `caches` and `threads` only when set, so records without them read as before."""
        out = {"costs": list(self.costs), "error_kind": self.error_kind.name, "error_msg": self.error_msg,
               "build_s": self.build_s, "timestamp": self.timestamp}
        out.update({k: v for k in ("node", "caches", "threads") if (v := getattr(self, k)) is not None})
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MeasureResult:
        """Validate a result read from a log line or database row."""
        try:
            kind = ErrorKind[obj["error_kind"]]
            costs = obj["costs"]
            if not isinstance(costs, list) or any(type(c) not in (int, float) for c in costs):
                raise RecordError(f"costs must be a list of numbers, got {costs!r}")
            if not isinstance(obj["error_msg"], str):
                raise RecordError(f"error_msg must be a string, got {obj['error_msg']!r}")
            return cls(costs=tuple(costs), error_kind=kind, error_msg=obj["error_msg"],
                       build_s=float(obj["build_s"]), timestamp=float(obj["timestamp"]), node=obj.get("node"),
                       caches=obj.get("caches"), threads=obj.get("threads"))
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"malformed measure result {obj!r}: {exc!r}") from None


Record = tuple[MeasureInput, MeasureResult]


def record_to_json(inp: MeasureInput, res: MeasureResult) -> dict[str, Any]:
    """One log line's worth: enough to replay the result or rebuild the config, and the ISA class
    it was measured for, so it is never applied to code for another."""
    return {"task": inp.task.key, "target": str(inp.target), "isa": inp.target.isa, "config": inp.config.to_json(),
            **res.to_json()}
