"""Config spaces: named knobs whose mixed-radix product is the set of schedules
a template can produce.

A config is an integer index into that product, so visited sets, caches and
feature tables key on plain ints and a space of 1e12 points costs no more than
one of ten. Only the knobs are enumerated, never the product. Configs read from
files are validated value by value (`ConfigSpace.from_json`) because those
values end up in generated code.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, ClassVar, SupportsIndex

import numpy as np

from autosched.errors import AutoschedError

JsonScalar = bool | int | float | str

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_SHOWN_VALUES = 8


class ConfigError(AutoschedError):
    """A knob, space or config that is malformed, or a value outside its space."""


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{what} name must be an identifier (letters, digits, '_', '.'), got {name!r}")
    return name


def _typed_key(value: object) -> object:
    """A hashable key under which True != 1 and 1 != 1.0, and a JSON list matches
    a tuple: a value read back from JSON must match exactly the value it was."""
    if isinstance(value, (list, tuple)):
        return ("seq",) + tuple(_typed_key(v) for v in value)
    if isinstance(value, (bool, int, float, str, Enum)):
        return (type(value).__name__, value)
    return None


def _short(value: object, limit: int = 80) -> str:
    """repr for error messages: values come from files and may be arbitrarily large."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _to_json(value: object) -> Any:
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


class Knob(ABC):
    """A named, finite, ordered list of values; a config picks one by position."""

    kind: ClassVar[str]
    name: str

    @property
    @abstractmethod
    def values(self) -> tuple[Any, ...]: ...

    @abstractmethod
    def signature(self) -> dict[str, Any]:
        """The parameters that define the knob's values, for the space fingerprint."""

    def __len__(self) -> int:
        return len(self.values)

    @cached_property
    def _positions(self) -> dict[object, int]:
        return {_typed_key(v): i for i, v in enumerate(self.values)}

    def _normalize(self, value: object) -> object:
        return value

    def index_of(self, value: object) -> int:
        """Position of `value` (a Python value or its JSON form); ConfigError if absent."""
        key = _typed_key(self._normalize(value))
        pos = self._positions.get(key) if key is not None else None
        if pos is None:
            shown = ", ".join(json.dumps(_to_json(v)) for v in self.values[:_SHOWN_VALUES])
            more = ", ..." if len(self) > _SHOWN_VALUES else ""
            raise ConfigError(
                f"knob {self.name!r} ({self.kind}, {len(self)} values: {shown}{more}) "
                f"has no value {_short(value)}"
            )
        return pos

    def to_json(self, value: object) -> Any:
        return _to_json(value)

    def _check_nonempty(self) -> None:
        if not self.values:
            raise ConfigError(f"knob {self.name!r} ({self.kind}) has no values: {self.signature()}")


class SplitPolicy(Enum):
    """Which tile sizes a split knob may choose for its inner parts."""

    FACTORS = "factors"  # exact divisors: the parts multiply to the extent
    POWER2 = "power2"  # powers of two; the outermost part is ceil(extent / inner)
    ANY = "any"  # any size; outermost is ceil. Grows fast with extent and parts: small extents only


@dataclass(frozen=True)
class SplitKnob(Knob):
    """Splits a loop of `extent` into `parts` nested loops, values outermost first.

    With FACTORS the parts multiply to the extent. The other policies tile
    non-divisible extents: the inner parts multiply to at most the extent and
    the outermost part is the ceiling, so the product covers the extent.
    `max_innermost` bounds the innermost part (e.g. a register tile)."""

    name: str
    extent: int
    parts: int
    policy: SplitPolicy = SplitPolicy.FACTORS
    max_innermost: int | None = None
    kind: ClassVar[str] = "split"

    def __post_init__(self) -> None:
        _check_name("knob", self.name)
        for what, v in (("extent", self.extent), ("parts", self.parts)):
            if type(v) is not int or v < 1:
                raise ConfigError(f"split knob {self.name!r}: {what} must be a positive int, got {v!r}")
        if self.max_innermost is not None and (type(self.max_innermost) is not int or self.max_innermost < 1):
            raise ConfigError(
                f"split knob {self.name!r}: max_innermost must be a positive int, got {self.max_innermost!r}"
            )
        try:
            object.__setattr__(self, "policy", SplitPolicy(self.policy))
        except ValueError:
            known = ", ".join(p.value for p in SplitPolicy)
            raise ConfigError(f"split knob {self.name!r}: unknown policy {self.policy!r}; known: {known}") from None
        self._check_nonempty()

    def _inner_sizes(self) -> list[int]:
        if self.policy is SplitPolicy.FACTORS:
            return [d for d in range(1, self.extent + 1) if self.extent % d == 0]
        if self.policy is SplitPolicy.POWER2:
            return [1 << b for b in range(self.extent.bit_length()) if 1 << b <= self.extent]
        return list(range(1, self.extent + 1))

    @cached_property
    def values(self) -> tuple[tuple[int, ...], ...]:
        sizes = self._inner_sizes()
        exact = self.policy is SplitPolicy.FACTORS
        out: list[tuple[int, ...]] = []

        def extend(inner: tuple[int, ...], product: int) -> None:
            if len(inner) == self.parts - 1:
                outer = self.extent // product if exact else -(-self.extent // product)
                value = (outer,) + inner
                if self.max_innermost is None or value[-1] <= self.max_innermost:
                    out.append(value)
                return
            for size in sizes:
                if product * size > self.extent:
                    break
                if not exact or self.extent % (product * size) == 0:
                    extend(inner + (size,), product * size)

        extend((), 1)
        return tuple(out)

    def signature(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "extent": self.extent, "parts": self.parts,
                "policy": self.policy.value, "max_innermost": self.max_innermost}


@dataclass(frozen=True)
class ReorderKnob(Knob):
    """Chooses one loop order among candidate permutations of the same axes."""

    name: str
    candidates: tuple[tuple[str | int, ...], ...]
    kind: ClassVar[str] = "reorder"

    def __post_init__(self) -> None:
        _check_name("knob", self.name)
        cands = tuple(tuple(c) for c in self.candidates)
        object.__setattr__(self, "candidates", cands)
        self._check_nonempty()
        for cand in cands:
            if any(isinstance(a, bool) or not isinstance(a, (str, int)) for a in cand):
                raise ConfigError(f"reorder knob {self.name!r}: axes must be str or int, got {cand!r}")
            if len(set(cand)) != len(cand) or sorted(map(str, cand)) != sorted(map(str, cands[0])):
                raise ConfigError(f"reorder knob {self.name!r}: {cand!r} is not a permutation of {cands[0]!r}")
        if len(set(cands)) != len(cands):
            raise ConfigError(f"reorder knob {self.name!r}: duplicate candidate orders")

    @property
    def values(self) -> tuple[tuple[str | int, ...], ...]:
        return self.candidates

    def signature(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "candidates": _to_json(self.candidates)}


class Annotation(Enum):
    """The loop annotations a schedule can request; code generators switch on these."""

    NONE = "none"
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    PARALLEL = "parallel"


@dataclass(frozen=True)
class AnnotateKnob(Knob):
    """Chooses how one loop is emitted: plain, unrolled, vectorized or parallel."""

    name: str
    options: tuple[Annotation, ...] = (Annotation.NONE, Annotation.UNROLL, Annotation.VECTORIZE)
    kind: ClassVar[str] = "annotate"

    def __post_init__(self) -> None:
        _check_name("knob", self.name)
        try:
            opts = tuple(Annotation(o) for o in self.options)
        except ValueError as exc:
            known = ", ".join(a.value for a in Annotation)
            raise ConfigError(f"annotate knob {self.name!r}: {exc}; known annotations: {known}") from None
        if len(set(opts)) != len(opts):
            raise ConfigError(f"annotate knob {self.name!r}: duplicate options {self.options!r}")
        object.__setattr__(self, "options", opts)
        self._check_nonempty()

    @property
    def values(self) -> tuple[Annotation, ...]:
        return self.options

    def _normalize(self, value: object) -> object:
        if isinstance(value, str):
            try:
                return Annotation(value)
            except ValueError:
                return value
        return value

    def signature(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "options": [o.value for o in self.options]}


@dataclass(frozen=True)
class ChoiceKnob(Knob):
    """An explicit list of JSON scalars: cache_write or not, unroll depth, loops to fuse."""

    name: str
    options: tuple[JsonScalar, ...]
    kind: ClassVar[str] = "choice"

    def __post_init__(self) -> None:
        _check_name("knob", self.name)
        opts = tuple(self.options)
        for o in opts:
            if not isinstance(o, (bool, int, float, str)) or (isinstance(o, float) and not math.isfinite(o)):
                raise ConfigError(f"choice knob {self.name!r}: options must be finite JSON scalars, got {o!r}")
        if len({_typed_key(o) for o in opts}) != len(opts):
            raise ConfigError(f"choice knob {self.name!r}: duplicate options {opts!r}")
        object.__setattr__(self, "options", opts)
        self._check_nonempty()

    @property
    def values(self) -> tuple[JsonScalar, ...]:
        return self.options

    def signature(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "options": list(self.options)}


@dataclass(frozen=True, eq=False)
class ConfigSpace:
    """The product of a template's knobs; config `index` is a mixed-radix number
    whose digits are knob positions, the last knob varying fastest."""

    template: str
    knobs: tuple[Knob, ...]

    def __post_init__(self) -> None:
        _check_name("template", self.template)
        knobs = tuple(self.knobs)
        for k in knobs:
            if not isinstance(k, Knob):
                raise ConfigError(f"space {self.template!r}: {k!r} is not a knob")
        names = [k.name for k in knobs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"space {self.template!r}: duplicate knob names {dup}")
        object.__setattr__(self, "knobs", knobs)

    @cached_property
    def radices(self) -> tuple[int, ...]:
        return tuple(len(k) for k in self.knobs)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        out, step = [], 1
        for r in reversed(self.radices):
            out.append(step)
            step *= r
        return tuple(reversed(out))

    @cached_property
    def size(self) -> int:
        """Number of configs; unlike len(), not limited to sys.maxsize."""
        return math.prod(self.radices)

    @cached_property
    def fingerprint(self) -> str:
        """Identifies the space's exact value lists, so a config from another task's
        space (same template, other shapes) is never read as one of ours."""
        blob = json.dumps([self.template, [k.signature() for k in self.knobs]], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @cached_property
    def _by_name(self) -> dict[str, int]:
        return {k.name: i for i, k in enumerate(self.knobs)}

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigSpace) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"ConfigSpace({self.template!r}, {len(self.knobs)} knobs, size={self.size}, {self.fingerprint})"

    def knob(self, name: str) -> Knob:
        try:
            return self.knobs[self._by_name[name]]
        except KeyError:
            raise ConfigError(f"space {self.template!r} has no knob {name!r}; knobs: {list(self._by_name)}") from None

    def position(self, name: str) -> int:
        """Digit position of knob `name` in `decode`'s tuples."""
        self.knob(name)
        return self._by_name[name]

    def _check_index(self, index: object) -> int:
        if isinstance(index, bool) or not isinstance(index, SupportsIndex):
            raise ConfigError(f"config index must be an int, got {index!r}")
        try:
            i = operator.index(index)
        except TypeError:
            raise ConfigError(f"config index must be an int, got {index!r}") from None
        if not 0 <= i < self.size:
            raise ConfigError(f"config index {i} is outside space {self.template!r} of size {self.size}")
        return i

    def decode(self, index: int) -> tuple[int, ...]:
        i = self._check_index(index)
        return tuple((i // s) % r for s, r in zip(self.strides, self.radices))

    def encode(self, digits: Sequence[int]) -> int:
        if len(digits) != len(self.knobs) or any(not 0 <= d < r for d, r in zip(digits, self.radices)):
            raise ConfigError(f"digits {tuple(digits)!r} do not fit radices {self.radices}")
        return sum(int(d) * s for d, s in zip(digits, self.strides))

    @cached_property
    def _fits_int64(self) -> bool:
        return self.size < 2**63

    def encode_many(self, digits: np.ndarray) -> np.ndarray:
        """Rows of knob positions → indices: int64, or Python ints (object) for
        spaces beyond 2**63. Rows are trusted to fit the radices (tuner-made)."""
        digits = np.atleast_2d(np.asarray(digits, dtype=np.int64))
        if self._fits_int64:
            return digits @ np.asarray(self.strides, dtype=np.int64)
        return digits.astype(object) @ np.asarray(self.strides, dtype=object)

    def decode_many(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        dtype = np.int64 if self._fits_int64 else object
        idx = np.asarray(indices, dtype=dtype).reshape(-1, 1)
        strides = np.asarray(self.strides, dtype=dtype)
        radices = np.asarray(self.radices, dtype=dtype)
        return ((idx // strides) % radices).astype(np.int64)

    def get(self, index: int) -> Config:
        return Config(self, index)

    def from_values(self, values: Mapping[str, object]) -> Config:
        """The config with these knob values; every knob named exactly once."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"space {self.template!r}: knob values must be an object, got {type(values).__name__}")
        unknown = sorted(str(n) for n in values if n not in self._by_name)
        if unknown:
            raise ConfigError(f"space {self.template!r} has no knob {_short(unknown[0])}; knobs: {list(self._by_name)}")
        missing = [n for n in self._by_name if n not in values]
        if missing:
            raise ConfigError(f"space {self.template!r}: config lacks knob {missing[0]!r}")
        digits = []
        for k in self.knobs:
            try:
                digits.append(k.index_of(values[k.name]))
            except ConfigError as exc:
                raise ConfigError(f"space {self.template!r}: {exc}") from None
        return Config(self, self.encode(digits))

    def from_json(self, obj: object) -> Config:
        """Validate a config read from a file: template, space fingerprint, knob
        names, every value, and the index must all agree with this space."""
        if not isinstance(obj, Mapping):
            raise ConfigError(f"a config must be a JSON object, got {type(obj).__name__}")
        fields = {"template", "space", "index", "knobs"}
        if set(obj) != fields:
            raise ConfigError(f"config fields must be {sorted(fields)}, got {_short(sorted(map(str, obj)))}")
        if obj["template"] != self.template:
            raise ConfigError(f"config is for template {_short(obj['template'])}, not {self.template!r}")
        if obj["space"] != self.fingerprint:
            raise ConfigError(
                f"config is from space {_short(obj['space'])} of template {self.template!r}; "
                f"this space is {self.fingerprint!r} (other shapes or knobs)"
            )
        config = self.from_values(obj["knobs"])
        if type(obj["index"]) is not int or obj["index"] != config.index:
            raise ConfigError(
                f"config index {_short(obj['index'])} does not match its knob values (index {config.index}) "
                f"in space {self.template!r}"
            )
        return config

    def sample(self, n: int, rng: np.random.Generator, exclude: Set[int] = frozenset()) -> list[int]:
        """Up to `n` distinct uniformly drawn indices not in `exclude` (a subset of
        the space). Enumerates only when the request covers a quarter of the space."""
        n = min(n, self.size - len(exclude))
        if n <= 0:
            return []
        if self.size <= 4 * (n + len(exclude)):
            pool = np.array([i for i in range(self.size) if i not in exclude], dtype=np.int64)
            return [int(i) for i in rng.choice(pool, size=n, replace=False)]
        chosen: dict[int, None] = {}
        while len(chosen) < n:
            digits = rng.integers(0, self.radices, size=(2 * (n - len(chosen)), len(self.knobs)))
            for i in map(int, self.encode_many(digits)):
                if i not in exclude and i not in chosen:
                    chosen[i] = None
                    if len(chosen) == n:
                        break
        return list(chosen)

    def random_neighbor(self, index: int, rng: np.random.Generator) -> int:
        """An index differing from `index` in exactly one knob."""
        movable = [p for p, r in enumerate(self.radices) if r > 1]
        if not movable:
            raise ConfigError(f"space {self.template!r} has a single config: no neighbours")
        digits = list(self.decode(index))
        p = movable[int(rng.integers(len(movable)))]
        digits[p] = (digits[p] + int(rng.integers(1, self.radices[p]))) % self.radices[p]
        return self.encode(digits)


@dataclass(frozen=True)
class Config:
    """One point of a space; equal configs have the same space and index."""

    space: ConfigSpace = field(repr=False)
    index: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", self.space._check_index(self.index))

    @cached_property
    def digits(self) -> tuple[int, ...]:
        return self.space.decode(self.index)

    def __getitem__(self, name: str) -> Any:
        pos = self.space.position(name)
        return self.space.knobs[pos].values[self.digits[pos]]

    def get(self, name: str, default: Any = None) -> Any:
        """Knob `name`'s value, or `default` where this space has no such knob (a knob offered
        only for some tasks of a template)."""
        return self[name] if name in self.space._by_name else default

    def to_json(self) -> dict[str, Any]:
        return {
            "template": self.space.template,
            "space": self.space.fingerprint,
            "index": self.index,
            "knobs": {k.name: k.to_json(k.values[d]) for k, d in zip(self.space.knobs, self.digits)},
        }
