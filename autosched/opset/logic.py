"""Comparisons, boolean logic and Where: the ops of attention masks and of exported control
flow turned into arithmetic (`Where(Less(x, t), a, b)`).

Comparisons and IsNaN/IsInf yield bool tensors; And, Or, Xor and Not take and yield them; Where
selects between two broadcasting operands of one dtype. All are elementwise, so they fuse
into the kernels around them like arithmetic does.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.graph.ir import Node, Op, Value
from autosched.opset.elementwise import elementwise
from autosched.opset.record import OpDef, ScalarFn, Shape, direct
from autosched.te import Cmp, Expr


def _predicate_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    if len({v.dtype for v in inputs}) > 1:
        raise ValueError(f"operand dtypes differ: {[v.dtype for v in inputs]}")
    if node.op in (Op.AND, Op.OR, Op.XOR, Op.NOT) and inputs[0].dtype != "bool":
        raise ValueError(f"operands must be bool, not {inputs[0].dtype}")
    return [(np.broadcast_shapes(*(v.shape for v in inputs)), "bool")]


def _predicate(op: Op, scalar: ScalarFn, fn: Callable[..., np.ndarray], **defaults: object) -> OpDef:
    """An op whose output is bool: `fn(*operands, **attrs)` is its numpy reference."""

    def reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(fn(*args, **{**defaults, **attrs}), dtype=bool)]

    def expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
        return scalar(a, {**defaults, **at})

    return elementwise(op, expr, reference, {op.value: direct(op, **defaults)}, shape=_predicate_shape)


def _compare(op: Op, name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> OpDef:
    return _predicate(op, lambda a, at: Cmp(name, a[0], a[1]), fn)


def _is_inf(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x = a[0]
    inf = te.const(float("inf"), x.dtype)
    found = te.const(False, "bool")
    if at["detect_positive"]:
        found = found | x.equal(inf)
    if at["detect_negative"]:
        found = found | x.equal(-inf)
    return found


def _is_inf_reference(x: np.ndarray, detect_positive: int, detect_negative: int) -> np.ndarray:
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


def _where_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    cond, x, y = inputs
    if cond.dtype != "bool":
        raise ValueError(f"the condition '{cond.name}' must be bool, not {cond.dtype}")
    if x.dtype != y.dtype:
        raise ValueError(f"operand dtypes differ: {[x.dtype, y.dtype]}")
    return [(np.broadcast_shapes(cond.shape, x.shape, y.shape), x.dtype)]


def _where_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    cond, x, y = args
    return [np.where(cond, x, y).astype(x.dtype, copy=False)]


RECORDS: tuple[OpDef, ...] = (
    _compare(Op.EQUAL, "eq", np.equal),
    _compare(Op.LESS, "lt", np.less),
    _compare(Op.LESS_OR_EQUAL, "le", np.less_equal),
    _compare(Op.GREATER, "gt", np.greater),
    _compare(Op.GREATER_OR_EQUAL, "ge", np.greater_equal),
    _predicate(Op.AND, lambda a, at: a[0] & a[1], np.logical_and),
    _predicate(Op.OR, lambda a, at: a[0] | a[1], np.logical_or),
    _predicate(Op.XOR, lambda a, at: Cmp("ne", a[0], a[1]), np.logical_xor),
    _predicate(Op.NOT, lambda a, at: te.logical_not(a[0]), np.logical_not),
    _predicate(Op.IS_NAN, lambda a, at: Cmp("ne", a[0], a[0]), np.isnan),
    _predicate(Op.IS_INF, _is_inf, _is_inf_reference, detect_positive=1, detect_negative=1),
    elementwise(Op.WHERE, lambda a, at: te.select(a[0], a[1], a[2]), _where_reference, {"Where": direct(Op.WHERE)},
                shape=_where_shape),
)
