"""Fused epilogues: elementwise work applied to an anchor op's output before it is stored.

An epilogue is a sequence of functions `(value, indices) -> Expr`; each becomes one
elementwise stage tagged "epilogue" reading the previous one. Default schedules and templates
inline all but the last, and compute the anchor inside the last one's tiles, so the anchor's
result goes from registers through the epilogue to memory once.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from autosched import te
from autosched.te import Expr, Tensor

EpilogueFn = Callable[[Expr, tuple], Expr]
EPILOGUE_TAG = "epilogue"


def apply_epilogue(anchor: Tensor, fns: Sequence[EpilogueFn] = ()) -> Tensor:
    out = anchor
    for k, fn in enumerate(fns):
        prev = out
        out = te.compute(prev.shape, lambda *i, prev=prev, fn=fn: fn(prev[i], i),
                         name=f"{anchor.name}_epilogue{k}", tag=EPILOGUE_TAG)
    return out


# The epilogues fused by the graph partitioner, as building blocks.

def bias_add(bias: Tensor, axis: int) -> EpilogueFn:
    """Adds bias[i[axis]] (a 1-D tensor along one output axis)."""
    return lambda v, i: v + bias[i[axis]]


def add(other: Tensor) -> EpilogueFn:
    """Adds a tensor broadcast (numpy rules) against the output: residual connections."""
    def fn(v: Expr, i: tuple) -> Expr:
        off = len(i) - len(other.shape)
        idx = tuple(0 if n == 1 else i[off + d] for d, n in enumerate(other.shape))
        return v + other[idx]
    return fn


def relu(v: Expr, i: tuple) -> Expr:
    return te.max(v, te.const(0, v.dtype))


def clip(lo: float, hi: float) -> EpilogueFn:
    return lambda v, i: te.min(te.max(v, te.const(lo, v.dtype)), te.const(hi, v.dtype))


def gelu(v: Expr, i: tuple) -> Expr:
    """The erf form, as BERT exports it: x · ½ · (1 + erf(x / √2))."""
    return v * te.const(0.5, v.dtype) * (te.const(1.0, v.dtype) + te.erf(v * te.const(0.7071067811865476, v.dtype)))


def scale(alpha: float) -> EpilogueFn:
    return lambda v, i: v * te.const(alpha, v.dtype)
