"""Tensors and the operations that produce them: placeholders (inputs) and compute definitions.

A compute definition says *what* each output element is, as a function of its index;
schedules decide *how* the loops run. Shapes are static integers: autosched compiles for
the shapes a model was imported with.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosched.te.expr import DTYPES, Expr, Load, Reduce, Var, as_expr, walk

SPATIAL = "spatial"
REDUCE = "reduce"


@dataclass(frozen=True, eq=False)
class IterVar:
    """A loop axis: a variable with a static extent, spatial or reduction."""
    var: Var
    extent: int
    kind: str = SPATIAL

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}, {self.kind})"

    def __expr__(self) -> Var:
        """An axis used in an index expression stands for its variable."""
        return self.var

    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o


def reduce_axis(extent: int, name: str = "r") -> IterVar:
    return IterVar(Var(name), int(extent), REDUCE)


class Operation:
    name: str
    if TYPE_CHECKING:
        # Read-only for the type checker: ComputeOp derives both from its axes and body,
        # PlaceholderOp stores them. Real properties here would block the dataclass fields.
        @property
        def shape(self) -> tuple: ...
        @property
        def dtype(self) -> str: ...

    def inputs(self) -> list[Tensor]:
        return []


@dataclass(eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple
    dtype: str


@dataclass(eq=False)
class ComputeOp(Operation):
    """`body` gives the element at `axes`; a Reduce body also names its reduction axes."""
    name: str
    axes: tuple  # spatial IterVars, one per output dimension
    body: Expr
    tag: str = ""
    attrs: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple:
        return tuple(a.extent for a in self.axes)

    @property
    def dtype(self) -> str:
        return self.body.dtype

    @property
    def reduce_axes(self) -> tuple:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for x in walk(self.body):
            if isinstance(x, Load) and isinstance(x.source, Tensor):
                seen.setdefault(id(x.source), x.source)
        return list(seen.values())


@dataclass(frozen=True, eq=False)
class Tensor:
    """The single output of an operation."""
    op: Operation

    @property
    def shape(self) -> tuple:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def compute_op(self) -> ComputeOp:
        """`op` where only a compute definition makes sense (its axes, tag, attrs): a clear
        error, not an AttributeError later, when it is a placeholder."""
        if not isinstance(self.op, ComputeOp):
            raise TypeError(f"tensor {self.name} is not computed (its op is {type(self.op).__name__})")
        return self.op

    def __getitem__(self, idx: Any) -> Load:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"tensor {self.name} has {len(self.shape)} dimensions, indexed with {len(idx)}")
        return Load(self, tuple(as_expr(i, "int32") for i in idx), self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"placeholder {name}: dimensions cannot be negative, got {shape}")
    return Tensor(PlaceholderOp(name, shape, dtype))


def compute(shape: Sequence[int], fn: Callable[..., Any], name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Tensor:
    """A tensor whose element at index (i0, i1, …) is fn(i0, i1, …)."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"compute {name}: dimensions cannot be negative, got {shape}")
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    if len(params) != len(shape) or any(p.startswith("*") for p in params):
        params = [f"i{k}" for k in range(len(shape))]
    axes = tuple(IterVar(Var(p), s) for p, s in zip(params, shape))
    body = as_expr(fn(*[a.var for a in axes]))
    if isinstance(body, Reduce) is False and any(isinstance(x, Reduce) for x in walk(body)):
        raise ValueError(f"compute {name}: a reduction must be the whole body, not part of it")
    return Tensor(ComputeOp(name, axes, body, tag, dict(attrs or {})))


def _reducer(combiner: str):
    def reduce(expr: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if any(a.kind != REDUCE for a in axes):
            raise ValueError("reductions run over te.reduce_axis axes")
        e = as_expr(expr)
        return Reduce(combiner, e, axes, e.dtype)
    reduce.__name__ = combiner
    reduce.__doc__ = f"The {combiner} of `expr` over the reduction axes."
    return reduce


sum = _reducer("sum")  # noqa: A001 - te.sum is the field's name
max_reduce = _reducer("max")
min_reduce = _reducer("min")
prod_reduce = _reducer("prod")


def post_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    """All tensors the outputs depend on, producers first."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        for i in t.op.inputs():
            visit(i)
        order.append(t)

    for o in outputs:
        visit(o)
    return order
