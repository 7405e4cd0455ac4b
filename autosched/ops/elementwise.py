"""Elementwise operators: unary math and activations, binary arithmetic with numpy broadcasting.

Activations are written with min/max rather than selects where they can be: a select whose
condition changes from lane to lane keeps the C back end from vectorizing the loop.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from autosched import te
from autosched.ops import epilogue
from autosched.ops.util import broadcast_load, broadcast_shapes, vectorize_innermost
from autosched.schedule import Schedule, create_schedule
from autosched.te import Expr, PlaceholderOp, Tensor

ELEMWISE_TAG = "elemwise"


def map_unary(x: Tensor, fn: Callable[[Expr], Expr], name: str) -> Tensor:
    """out[i] = fn(x[i]): the one compute every unary operator is."""
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name, tag=ELEMWISE_TAG)


def _c(value: float, like: Expr) -> Expr:
    return te.const(value, like.dtype)


def relu(x: Tensor) -> Tensor:
    return map_unary(x, lambda v: epilogue.relu(v, ()), "relu")


def leaky_relu(x: Tensor, alpha: float = 0.01) -> Tensor:
    """max(x, αx) for α ≤ 1 and min(x, αx) above: both equal x for x ≥ 0 and αx below."""
    pick = te.max if alpha <= 1 else te.min
    return map_unary(x, lambda v: pick(v, v * _c(alpha, v)), "leaky_relu")


def clip(x: Tensor, lo: float | None = None, hi: float | None = None) -> Tensor:
    def fn(v: Expr) -> Expr:
        if lo is not None:
            v = te.max(v, _c(lo, v))
        return te.min(v, _c(hi, v)) if hi is not None else v
    return map_unary(x, fn, "clip")


def sigmoid(x: Tensor) -> Tensor:
    return map_unary(x, te.sigmoid, "sigmoid")


def tanh(x: Tensor) -> Tensor:
    return map_unary(x, te.tanh, "tanh")


def exp(x: Tensor) -> Tensor:
    return map_unary(x, te.exp, "exp")


def log(x: Tensor) -> Tensor:
    return map_unary(x, te.log, "log")


def sqrt(x: Tensor) -> Tensor:
    return map_unary(x, te.sqrt, "sqrt")


def erf(x: Tensor) -> Tensor:
    return map_unary(x, te.erf, "erf")


def neg(x: Tensor) -> Tensor:
    return map_unary(x, lambda v: -v, "neg")


def abs(x: Tensor) -> Tensor:  # noqa: A001 - the operator's name
    return map_unary(x, te.abs, "abs")


def gelu_expr(v: Expr, approximate: str = "none") -> Expr:
    """The erf form by default; approximate="tanh" is the GPT-2 formula."""
    if approximate == "none":
        return epilogue.gelu(v, ())
    if approximate != "tanh":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    k = math.sqrt(2.0 / math.pi)
    return _c(0.5, v) * v * (_c(1.0, v) + te.tanh(_c(k, v) * (v + _c(0.044715, v) * v * v * v)))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return map_unary(x, lambda v: gelu_expr(v, approximate), "gelu")


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """max(0, min(1, αx + β)), ONNX's defaults."""
    return map_unary(x, lambda v: hard_sigmoid_expr(v, alpha, beta), "hard_sigmoid")


def hard_swish(x: Tensor) -> Tensor:
    """x · hard_sigmoid(x) with α = 1/6, β = 1/2 (MobileNetV3)."""
    return map_unary(x, lambda v: v * hard_sigmoid_expr(v, 1.0 / 6.0, 0.5), "hard_swish")


def hard_sigmoid_expr(v: Expr, alpha: float, beta: float) -> Expr:
    """max(0, min(1, αv + β)) of one value, shared with fused epilogues."""
    return te.max(_c(0.0, v), te.min(_c(1.0, v), v * _c(alpha, v) + _c(beta, v)))


def cast(x: Tensor, dtype: str) -> Tensor:
    """Conversion as C does it (float to int truncates toward zero, like numpy's astype)."""
    return map_unary(x, lambda v: te.cast(dtype, v), "cast")


_BINARY: dict[str, Callable[[Expr, Expr], Expr]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b if a.dtype.startswith("float") else a // b,
    "pow": te.power,
    "maximum": te.max,
    "minimum": te.min,
}


def binary(op: str, a: Tensor | float, b: Tensor | float) -> Tensor:
    """a <op> b broadcast like numpy; a Python number stands for a constant of the other's dtype."""
    if op not in _BINARY:
        raise ValueError(f"unknown binary operator {op!r}; one of {', '.join(_BINARY)}")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: at least one operand must be a tensor")
    tensors = [t for t in (a, b) if isinstance(t, Tensor)]
    if len(tensors) == 2 and tensors[0].dtype != tensors[1].dtype:
        raise TypeError(f"{op}: operand dtypes differ ({tensors[0].dtype}, {tensors[1].dtype}); insert a cast")
    dtype = tensors[0].dtype
    shape = broadcast_shapes(*(t.shape for t in tensors))

    def operand(x: Tensor | float, i: tuple) -> Expr:
        return broadcast_load(x, i) if isinstance(x, Tensor) else te.const(x, dtype)

    fn = _BINARY[op]
    return te.compute(shape, lambda *i: fn(operand(a, i), operand(b, i)), name=op, tag=ELEMWISE_TAG)


def add(a: Tensor | float, b: Tensor | float) -> Tensor:
    return binary("add", a, b)


def sub(a: Tensor | float, b: Tensor | float) -> Tensor:
    return binary("sub", a, b)


def mul(a: Tensor | float, b: Tensor | float) -> Tensor:
    return binary("mul", a, b)


def div(a: Tensor | float, b: Tensor | float) -> Tensor:
    """True division for floats, floor division (numpy's //) for integers."""
    return binary("div", a, b)


def pow(a: Tensor | float, b: Tensor | float) -> Tensor:  # noqa: A001 - the operator's name
    return binary("pow", a, b)


def maximum(a: Tensor | float, b: Tensor | float) -> Tensor:
    return binary("maximum", a, b)


def minimum(a: Tensor | float, b: Tensor | float) -> Tensor:
    return binary("minimum", a, b)


def contiguous_suffix(shape: Sequence[int], inputs: Sequence[Sequence[int]]) -> int:
    """The first axis of the longest run of trailing axes that each input either reads whole or
    broadcasts whole: fused, that run is one vector axis every load is contiguous or constant along."""
    ndim = len(shape)
    start = ndim
    kinds: list[set] = [set() for _ in inputs]
    for d in range(ndim - 1, -1, -1):
        if shape[d] == 1:
            start = d
            continue
        step = []
        for s, seen in zip(inputs, kinds):
            k = d - ndim + len(s)
            step.append(seen | {"full" if k >= 0 and s[k] == shape[d] else "broadcast"})
        if any(len(x) > 1 for x in step):
            break
        kinds, start = step, d
    return start


def schedule_elementwise(out: Tensor, vector_lanes: int) -> Schedule:
    """Fuse the axes all loads agree on, split them by the vector width: outer part parallel
    with the remaining axes, inner part vectorized. Other stages are inlined."""
    s = create_schedule(out)
    for st in s.stages:
        if st.op is not out.op:
            s.compute_inline(st)
    inputs = [t.shape for t in te.post_order([out]) if isinstance(t.op, PlaceholderOp)]
    vectorize_innermost(s[out], vector_lanes, fuse_from=contiguous_suffix(out.shape, inputs))
    return s


UNARY_OPS = {
    "relu": relu, "leaky_relu": leaky_relu, "clip": clip, "sigmoid": sigmoid, "tanh": tanh, "exp": exp,
    "log": log, "sqrt": sqrt, "erf": erf, "gelu": gelu, "hard_sigmoid": hard_sigmoid, "hard_swish": hard_swish,
    "neg": neg, "abs": abs, "cast": cast,
}
BINARY_OPS = {"add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "maximum": maximum, "minimum": minimum}
