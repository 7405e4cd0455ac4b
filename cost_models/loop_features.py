"""Features from the lowered loop nest: what the code does, not which knob values made it.

Knob features name a template's knobs, so they mean nothing to another task whose space has
other values. The loop nest says the same things for every task of an op: how long each loop
runs and how it is emitted, how many bytes each access touches at each loop level, how far it
strides and how often it reuses an element, how much arithmetic runs. Columns have fixed
names (levels counted from the innermost loop, accesses by position in the hot statement),
so rows of two tasks line up column by column and a model trained on one ranks the other.

The hot statement is the store executed most often (trip count × operations): the
accumulation of a matmul or convolution. Everything else (packing, copy-out, epilogue)
enters as totals. Extraction lowers each config, milliseconds apiece: the FeatureModel
caches rows by config index.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from autosched.codegen.c import DTYPE_BYTES
from autosched.lower import lower
from autosched.lower.ir import Allocate, For, ForKind, IfThenElse, Let, PrimFunc, Seq, Stmt, Store
from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target
from autosched.te.expr import BinOp, Call, Const, Expr, Load, Select, Var, walk
from autosched.templates import get_template
from cost_models.features import FeatureExtractor

MAX_LEVELS = 10  # loop levels described around the hot statement, innermost first
MAX_LOADS = 4  # loads of the hot statement described, in order of appearance
LOOP_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.UNROLL, ForKind.VECTORIZE)
ARITH = ("add", "mul", "div", "minmax", "call", "select", "load")
_ACCESSES = ("store",) + tuple(f"load{k}" for k in range(MAX_LOADS))
_PER_ACCESS = ("log2_stride", "log2_bytes", "log2_reuse")

_GLOBAL_NAMES = (
    "valid", "log2_flops", "hot.log2_trips", "hot.depth", "hot.guards", "hot.vector_lanes", "hot.log2_unrolled",
    "hot.log2_parallel", "log2_local_bytes", "log2_temp_bytes", "other.log2_trips", "other.log2_bytes_written",
    *(f"hot.{a}" for a in ARITH), *(f"all.log2_{a}" for a in ARITH),
)
LEVEL_NAMES = tuple(
    name
    for d in range(MAX_LEVELS)
    for name in (
        f"L{d}.log2_extent", *(f"L{d}.kind={k.value}" for k in LOOP_KINDS),
        *(f"L{d}.{a}.{f}" for a in _ACCESSES for f in _PER_ACCESS),
    )
)
NAMES = _GLOBAL_NAMES + LEVEL_NAMES


@dataclass(frozen=True)
class _Site:
    """A store with what encloses it: loops outermost first, let bindings, guard count."""

    store: Store
    loops: tuple[For, ...]
    lets: tuple[Let, ...]
    guards: int

    @property
    def trips(self) -> int:
        return math.prod(f.extent for f in self.loops)


@dataclass
class _Totals:
    local_bytes: int = 0
    temp_bytes: int = 0
    sites: list[_Site] = field(default_factory=list)


def _collect(s: Stmt, loops: tuple, lets: tuple, guards: int, out: _Totals) -> None:
    if isinstance(s, Store):
        out.sites.append(_Site(s, loops, lets, guards))
    elif isinstance(s, For):
        _collect(s.body, loops + (s,), lets, guards, out)
    elif isinstance(s, Let):
        _collect(s.body, loops, lets + (s,), guards, out)
    elif isinstance(s, IfThenElse):
        _collect(s.then, loops, lets, guards + 1, out)
        if s.orelse is not None:
            _collect(s.orelse, loops, lets, guards + 1, out)
    elif isinstance(s, Allocate):
        nbytes = s.buffer.size * DTYPE_BYTES[s.buffer.dtype]
        if s.buffer.scope == "local":
            out.local_bytes += nbytes
        else:
            out.temp_bytes += nbytes
        _collect(s.body, loops, lets, guards, out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _collect(x, loops, lets, guards, out)


def _arith(e: Expr) -> dict[str, int]:
    counts = dict.fromkeys(ARITH, 0)
    for x in walk(e):
        if isinstance(x, BinOp) and x.dtype.startswith("float"):
            key = {"add": "add", "sub": "add", "mul": "mul", "div": "div", "min": "minmax", "max": "minmax"}.get(x.op)
            if key:
                counts[key] += 1
        elif isinstance(x, Call):
            counts["call"] += 1
        elif isinstance(x, Select):
            counts["select"] += 1
        elif isinstance(x, Load):
            counts["load"] += 1
    return counts


def _eval(e: Expr, env: dict[Var, int]) -> int:
    """An integer index expression at concrete loop values (unknown variables read 0)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env.get(e, 0)
    if isinstance(e, BinOp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
                "floormod": a % b if b else 0, "min": min(a, b), "max": max(a, b)}.get(e.op, 0)
    if isinstance(e, Select):
        return _eval(e.t, env)
    return 0


def _index_at(site: _Site, index: Expr, values: dict[Var, int]) -> int:
    env = dict(values)
    for let in site.lets:
        env[let.var] = _eval(let.value, env)
    return _eval(index, env)


def _strides(site: _Site, index: Expr) -> list[int]:
    """Elements the index moves when each enclosing loop (outermost first) steps by one."""
    zero = {f.var: 0 for f in site.loops}
    base = _index_at(site, index, zero)
    return [_index_at(site, index, {**zero, f.var: 1}) - base for f in site.loops]


def _log2(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _access_levels(site: _Site, index: Expr, size: int, dtype: str) -> list[tuple[float, float, float]]:
    """Per level, innermost first: (stride, bytes touched, reuse) of one access."""
    strides = _strides(site, index)
    out = []
    count, span, trips = 1, 0, 1
    for f, stride in zip(reversed(site.loops), reversed(strides)):
        trips *= f.extent
        if stride:
            count *= f.extent
            span += abs(stride) * (f.extent - 1)
        elements = min(count, span + 1, size)
        out.append((_log2(abs(stride)), _log2(elements * DTYPE_BYTES.get(dtype, 4)), math.log2(trips / elements)))
    return out


def _hot(sites: Sequence[_Site]) -> _Site:
    return max(sites, key=lambda s: s.trips * (1 + sum(_arith(s.store.value).values())))


def loop_nest_features(func: PrimFunc) -> dict[str, float]:
    """The named features of one lowered function (see NAMES)."""
    totals = _Totals()
    _collect(func.body, (), (), 0, totals)
    row = dict.fromkeys(NAMES, 0.0)
    row["valid"] = 1.0
    row["log2_local_bytes"] = _log2(totals.local_bytes)
    row["log2_temp_bytes"] = _log2(totals.temp_bytes)
    if not totals.sites:
        return row
    hot = _hot(totals.sites)
    all_ops = dict.fromkeys(ARITH, 0)
    for site in totals.sites:
        for k, v in _arith(site.store.value).items():
            all_ops[k] += v * site.trips
    others = [s for s in totals.sites if s is not hot]
    hot_ops = _arith(hot.store.value)
    row.update({f"hot.{a}": float(v) for a, v in hot_ops.items()})
    row.update({f"all.log2_{a}": _log2(v) for a, v in all_ops.items()})
    row["log2_flops"] = _log2(sum(all_ops[a] for a in ("add", "mul", "div", "minmax", "call")))
    row["hot.log2_trips"] = _log2(hot.trips)
    row["hot.depth"] = float(len(hot.loops))
    row["hot.guards"] = float(hot.guards)
    inner = hot.loops[-1] if hot.loops else None
    row["hot.vector_lanes"] = float(inner.extent) if inner is not None and inner.kind is ForKind.VECTORIZE else 1.0
    unrolled = (ForKind.UNROLL, ForKind.VECTORIZE)
    row["hot.log2_unrolled"] = _log2(math.prod(f.extent for f in hot.loops if f.kind in unrolled))
    row["hot.log2_parallel"] = _log2(next((f.extent for f in hot.loops if f.kind is ForKind.PARALLEL), 0))
    row["other.log2_trips"] = _log2(sum(s.trips for s in others))
    row["other.log2_bytes_written"] = _log2(sum(s.trips * DTYPE_BYTES.get(s.store.buffer.dtype, 4) for s in others))

    loads = [x for x in walk(hot.store.value) if isinstance(x, Load)][:MAX_LOADS]
    accesses = [("store", hot.store.index, hot.store.buffer)]
    accesses += [(f"load{k}", x.indices[0], x.source) for k, x in enumerate(loads)]
    for d, f in enumerate(reversed(hot.loops[-MAX_LEVELS:])):
        row[f"L{d}.log2_extent"] = _log2(f.extent)
        if f.kind in LOOP_KINDS:
            row[f"L{d}.kind={f.kind.value}"] = 1.0
    for name, index, buf in accesses:
        for d, values in enumerate(_access_levels(hot, index, buf.size, buf.dtype)[:MAX_LEVELS]):
            for feature, value in zip(_PER_ACCESS, values):
                row[f"L{d}.{name}.{feature}"] = value
    return row


class LoopFeatures(FeatureExtractor):
    """Features of each config's lowered loop nest, built through the task's registered
    template for `target`. A config the template refuses gets a row of zeros (valid = 0)."""

    name = "loop"

    def __init__(self, target: Target) -> None:
        self.target = target

    def names(self, task: TaskLike, space: ConfigSpace) -> tuple[str, ...]:
        return NAMES

    def _rows(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> Iterator[list[float]]:
        template = get_template(task.op, self.target.kind)
        for i in indices:
            try:
                sched, args = template.apply(task, space.get(int(i)), self.target)
                row = loop_nest_features(lower(sched, args))
            except ValueError:
                row = dict.fromkeys(NAMES, 0.0)
            yield [row[n] for n in NAMES]

    def extract(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
        return np.array(list(self._rows(task, space, indices)), dtype=np.float32).reshape(len(indices), len(NAMES))


class ConcatFeatures(FeatureExtractor):
    """Several extractors side by side, e.g. knob values next to the loop nest they make."""

    def __init__(self, *parts: FeatureExtractor) -> None:
        self.parts = parts
        self.name = "+".join(p.name for p in parts)

    def names(self, task: TaskLike, space: ConfigSpace) -> tuple[str, ...]:
        return tuple(n for p in self.parts for n in p.names(task, space))

    def extract(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
        return np.concatenate([p.extract(task, space, indices) for p in self.parts], axis=1)
