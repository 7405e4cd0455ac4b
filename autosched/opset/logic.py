"""Comparisons, boolean logic and Where: the ops of attention masks and of exported control
flow turned into arithmetic (`Where(Less(x, t), a, b)`), and the ONNX ops that import as a
Where of a constant or computed mask (Trilu, OneHot); and the bitwise ops of integers
(BitwiseAnd/Or/Xor/Not, BitShift: hashed embeddings, packed bit masks).

Comparisons and IsNaN/IsInf yield bool tensors; And, Or, Xor and Not take and yield them; Where
selects between two broadcasting operands of one dtype. All are elementwise, so they fuse
into the kernels around them like arithmetic does.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, normalize_axes
from autosched.graph.ir import Node, Op, Value
from autosched.opset.elementwise import elementwise
from autosched.opset.record import OpDef, ScalarFn, Shape, direct
from autosched.te import Cmp, Expr
from autosched.te.expr import call


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


def _bits_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    if len({v.dtype for v in inputs}) > 1:
        raise ValueError(f"operand dtypes differ: {[v.dtype for v in inputs]}")
    if np.dtype(inputs[0].dtype).kind not in "iu":
        raise ValueError(f"operands must be integers, not {inputs[0].dtype}")
    return [(np.broadcast_shapes(*(v.shape for v in inputs)), inputs[0].dtype)]


def _bits(op: Op, scalar: ScalarFn, fn: Callable[..., np.ndarray], importer: Converter | None = None) -> OpDef:
    """A bitwise op of integers, `fn` its numpy reference."""

    def reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(fn(*args, **attrs)).astype(args[0].dtype, copy=False)]

    return elementwise(op, scalar, reference, {op.value: importer or direct(op)}, shape=_bits_shape)


def _shift_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    """ONNX's shift: by a count outside [0, bits) every bit leaves (-1 for a negative number
    shifted right); a left shift is done on the unsigned bits (C leaves a signed one undefined)."""
    x, count = a
    zero = te.const(0, count.dtype)
    outside = (count < zero) | (count >= te.const(np.iinfo(np.dtype(x.dtype)).bits, count.dtype))
    count = te.select(outside, zero, count)
    if at["direction"] == "LEFT":
        bits = "uint" + x.dtype.lstrip("u").removeprefix("int")
        shifted = te.cast(x.dtype, call("shl", te.cast(bits, x), te.cast(bits, count)))
        return te.select(outside, te.const(0, x.dtype), shifted)
    gone: Expr = te.const(0, x.dtype)
    if np.dtype(x.dtype).kind == "i":
        gone = te.select(x < te.const(0, x.dtype), te.const(-1, x.dtype), gone)
    return te.select(outside, gone, call("shr", x, count))


def _shift(x: np.ndarray, y: np.ndarray, direction: str) -> np.ndarray:
    x, y = np.broadcast_arrays(x, y)
    outside = (y < 0) | (y >= np.iinfo(x.dtype).bits)
    count = np.where(outside, 0, y).astype(x.dtype)
    if direction == "LEFT":
        bits = np.dtype(f"u{x.dtype.itemsize}")
        return np.where(outside, 0, np.left_shift(x.view(bits), count.astype(bits)).view(x.dtype))
    return np.where(outside, np.where(x < 0, -1, 0), np.right_shift(x, count))


def _import_bit_shift(imp: Importer, node: OnnxNode) -> None:
    direction = node.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise node.error(f"direction must be LEFT or RIGHT, not {direction!r}")
    imp.emit(node, Op.BIT_SHIFT, node.inputs, node.outputs, {"direction": direction})


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


def _import_trilu(imp: Importer, node: OnnxNode) -> None:
    """The upper (or lower) triangle of the last two axes from diagonal k: x where a constant
    mask holds, else 0 (a causal attention mask's shape)."""
    x = imp.value(node.inputs[0])
    if len(x.shape) < 2:
        raise node.error(f"the input must have at least two axes, not {list(x.shape)}")
    diagonal = node.const(1)
    k = 0 if diagonal is None else int(diagonal.reshape(()))
    rows, cols = x.shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    mask, zero = f"{node.outputs[0]}:mask", f"{node.outputs[0]}:zero"
    imp.add_constant(mask, offset >= k if node.attr("upper", 1) else offset <= k)
    imp.add_constant(zero, np.zeros((), dtype=x.dtype))
    imp.emit(node, Op.WHERE, [mask, x.name, zero], node.outputs, {})


def _import_one_hot(imp: Importer, node: OnnxNode) -> None:
    """values[1] where an index (negative ones count from `depth`) equals its position along a
    new axis, values[0] elsewhere (everywhere, for an index out of range): Equal against a
    position constant, then Where."""
    indices = imp.value(node.inputs[0])
    depth = node.required_const(1).reshape(-1)
    values = node.required_const(2).reshape(-1)
    if depth.size != 1 or values.size != 2:
        raise node.error("depth must be one number and values two")
    depth_n = int(depth[0])
    rank = len(indices.shape) + 1
    axis = normalize_axes(node, [node.attr("axis", -1)], rank)[0]
    shape = (*indices.shape[:axis], 1, *indices.shape[axis:])
    positions, wrap = f"{node.outputs[0]}:positions", f"{node.outputs[0]}:depth"
    imp.add_constant(positions, np.arange(depth_n, dtype=np.int64).reshape([depth_n if d == axis else 1 for d in range(rank)]))
    imp.add_constant(wrap, np.array(depth_n, dtype=np.int64))
    index = indices.name
    if indices.dtype != "int64":
        index = imp.emit_step(node, "int64", Op.CAST, [index], {"to": "int64"})
    index = imp.emit_step(node, "index", Op.RESHAPE, [index], {"shape": shape})
    zero = f"{node.outputs[0]}:zero"
    imp.add_constant(zero, np.array(0, dtype=np.int64))
    negative = imp.emit_step(node, "negative", Op.LESS, [index, zero], {})
    index = imp.emit_step(node, "wrapped", Op.WHERE, [negative, imp.emit_step(node, "from_end", Op.ADD, [index, wrap], {}),
                                                      index], {})
    hits = imp.emit_step(node, "hits", Op.EQUAL, [index, positions], {})
    off, on = f"{node.outputs[0]}:off", f"{node.outputs[0]}:on"
    imp.add_constant(off, values[:1].reshape(()))
    imp.add_constant(on, values[1:].reshape(()))
    imp.emit(node, Op.WHERE, [hits, on, off], node.outputs, {})


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
    elementwise(Op.WHERE, lambda a, at: te.select(a[0], a[1], a[2]), _where_reference,
                {"Where": direct(Op.WHERE), "Trilu": Converter(_import_trilu, constant_inputs=(1,)),
                 "OneHot": Converter(_import_one_hot, constant_inputs=(1, 2))}, shape=_where_shape),
    _bits(Op.BITWISE_AND, lambda a, at: call("bitand", *a), np.bitwise_and),
    _bits(Op.BITWISE_OR, lambda a, at: call("bitor", *a), np.bitwise_or),
    _bits(Op.BITWISE_XOR, lambda a, at: call("bitxor", *a), np.bitwise_xor),
    _bits(Op.BITWISE_NOT, lambda a, at: call("bitnot", *a), np.invert),
    _bits(Op.BIT_SHIFT, _shift_expr, _shift, Converter(_import_bit_shift)),
)
