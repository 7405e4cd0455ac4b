"""Elementwise ops: arithmetic and math functions (activations are in `activation`, comparisons
and logic in `logic`).

Each is one scalar expression; the same expression is the op's own kernel and, fused, a step of
an anchor's epilogue. The numpy reference computes in the operands' dtype except where ONNX
asks for more care (integer division truncates, Erf and Sigmoid go through float64).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, numpy_dtype, type_name
from autosched.graph.ir import Node, Op, Value
from autosched.ops import elementwise as ew
from autosched.opset import quantize
from autosched.opset.algebra import AlgebraOp, elementwise_binary, no_attrs
from autosched.opset.record import (
    ComputeArgs,
    OpDef,
    OperandLoad,
    OpKind,
    ReferenceFn,
    ScalarFn,
    Shape,
    ShapeFn,
    direct,
    on_output,
    same_shape,
)
from autosched.te import Cmp, Expr, Tensor
from autosched.te.expr import LIBM_UNARY, call, is_float


def broadcast_operand(t: Tensor, idx: tuple, position: int) -> Expr:
    """t's element for output index idx under numpy broadcasting."""
    off = len(idx) - t.ndim
    return t[tuple(0 if n == 1 else idx[off + d] for d, n in enumerate(t.shape))]


def elementwise(op: Op, scalar: ScalarFn, reference: ReferenceFn, importers: Mapping[str, Converter],
                shape: ShapeFn = same_shape, operand_load: OperandLoad = broadcast_operand) -> OpDef:
    """The record of an elementwise op: its kernel is `scalar` over every output element, with
    the fused epilogue applied before the store."""

    def compute(args: ComputeArgs) -> list[Tensor]:
        def body(*i: Expr) -> Expr:
            v = scalar([operand_load(t, i, k) for k, t in enumerate(args.inputs)], args.attrs)
            return args.epilogue(v, i) if args.epilogue else v
        return [te.compute(args.out_shapes[0], body, name=op.value.lower(), tag="elementwise")]

    return OpDef(op, OpKind.ELEMWISE, shape, reference, compute, on_output(ew.schedule_elementwise),
                 importers, scalar, operand_load)


def const_like(v: float, like: Expr) -> Expr:
    return te.const(v, like.dtype)


def unary_reference(fn: Callable[[np.ndarray], np.ndarray]) -> ReferenceFn:
    """A reference applying `fn` to the one operand, the result in the operand's dtype."""
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        x = args[0]
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]

    return kernel


def _binary_reference(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> ReferenceFn:
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        a, b = args
        return [np.asarray(fn(a, b)).astype(a.dtype, copy=False)]

    return kernel


def _broadcast(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    if node.op is not Op.POW and len({v.dtype for v in inputs}) > 1:
        raise ValueError(f"operand dtypes differ: {[v.dtype for v in inputs]}")
    shape = np.broadcast_shapes(*(v.shape for v in inputs))
    return [(shape, inputs[0].dtype)]


def binary_op(op: Op, scalar: ScalarFn, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
              importer: Converter | None = None) -> OpDef:
    """A broadcasting binary op whose reference is the numpy ufunc `fn`."""
    return elementwise(op, scalar, _binary_reference(fn), {op.value: importer or direct(op)}, shape=_broadcast)


def unary_op(op: Op, scalar: ScalarFn, fn: Callable[[np.ndarray], np.ndarray]) -> OpDef:
    """A unary op without attributes whose reference applies `fn`."""
    return elementwise(op, scalar, unary_reference(fn), {op.value: direct(op)})


def _libm(name: str) -> ScalarFn:
    """The math library's function `name` of the one operand."""
    return lambda a, at: call(name, a[0])


def _trunc_div(a: Expr, b: Expr) -> Expr:
    """Integer division rounding toward zero, as ONNX (and C) define it."""
    q = a // b
    inexact = Cmp("ne", a % b, te.const(0, a.dtype))
    signs_differ = Cmp("ne", a < te.const(0, a.dtype), b < te.const(0, b.dtype))
    return te.select(inexact & signs_differ, q + 1, q)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a / b
    quotient = np.floor_divide(a, b)
    if a.dtype.kind == "i":  # ONNX integer division truncates toward zero
        quotient = quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))
    return quotient


def _pow(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    if base.dtype.kind in "iu" and exponent.dtype.kind in "iu":
        return np.power(base, exponent.astype(base.dtype))
    return np.power(base.astype(np.float64), exponent.astype(np.float64))


def erf_reference(x: np.ndarray) -> np.ndarray:
    """Erf in float64 through math.erf (numpy has none)."""
    flat = [math.erf(v) for v in x.astype(np.float64).ravel().tolist()]
    return np.array(flat, dtype=np.float64).reshape(x.shape)


def _clip_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x = a[0]
    if at.get("min") is not None:
        x = te.max(x, const_like(at["min"], x))
    if at.get("max") is not None:
        x = te.min(x, const_like(at["max"], x))
    return x


def _clip(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    if attrs["min"] is not None:
        x = np.maximum(x, np.asarray(attrs["min"]).astype(x.dtype))
    if attrs["max"] is not None:
        x = np.minimum(x, np.asarray(attrs["max"]).astype(x.dtype))
    return [x.astype(args[0].dtype, copy=False)]


def _import_clip(imp: Importer, node: OnnxNode) -> None:
    dtype = np.dtype(imp.value(node.inputs[0]).dtype)

    def bound(index: int) -> float | int | None:
        array = node.const(index)
        if array is None:
            return None
        if array.size != 1:
            raise node.error(f"bound '{node.inputs[index]}' must be a scalar")
        return array.reshape(()).astype(dtype).item()

    imp.emit(node, Op.CLIP, node.inputs[:1], node.outputs, {"min": bound(1), "max": bound(2)})


def _cast_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    return [(inputs[0].shape, node.attrs["to"])]


def _cast(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [args[0].astype(attrs["to"])]


def _import_cast(imp: Importer, node: OnnxNode) -> None:
    to = numpy_dtype(node.attr("to"))
    if to is None:
        raise node.error(f"target type {type_name(node.attr('to'))} is not supported")
    imp.emit(node, Op.CAST, node.inputs, node.outputs, {"to": to})


def _import_cast_like(imp: Importer, node: OnnxNode) -> None:
    imp.emit(node, Op.CAST, node.inputs[:1], node.outputs, {"to": imp.value(node.inputs[1]).dtype})


def _identity(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [args[0]]


def _import_dropout(imp: Importer, node: OnnxNode) -> None:
    training = node.const(2)
    if training is not None and bool(training.reshape(())):
        raise node.error("training mode is not supported")
    imp.emit(node, Op.DROPOUT, node.inputs[:1], node.outputs[:1], {})
    if len(node.outputs) > 1 and node.outputs[1]:
        imp.add_constant(node.outputs[1], np.ones(imp.value(node.inputs[0]).shape, dtype=bool))


def _abs_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x = a[0]
    if is_float(x.dtype):
        return te.abs(x)
    return x if x.dtype.startswith("uint") else te.select(x < te.const(0, x.dtype), -x, x)


def _sign_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x = a[0]
    zero, one = te.const(0, x.dtype), te.const(1, x.dtype)
    if x.dtype.startswith("uint"):
        return te.select(x > zero, one, zero)
    return te.select(x > zero, one, te.select(x < zero, te.const(-1, x.dtype), zero))


def _mod_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    """fmod=0: the sign of the divisor (floor modulo); fmod=1: of the dividend (C's %, fmod)."""
    x, y = a
    if not at.get("fmod", 0):
        return x % y
    return te.fmod(x, y) if is_float(x.dtype) else x - _trunc_div(x, y) * y


def _mod(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    a, b = args
    with np.errstate(divide="ignore", invalid="ignore"):
        return [(np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)).astype(a.dtype, copy=False)]


def variadic(op: Op, mean: bool = False) -> Converter:
    """Sum, Mean, Max and Min of any number of broadcasting operands, as a chain of the binary
    `op` (Mean then scales by 1/n)."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        names = [name for name in node.inputs if name]
        if not names:
            raise node.error("needs at least one input")
        steps: list[tuple[Op, str]] = [(op, name) for name in names[1:]]
        if mean:
            scale = f"{node.outputs[0]}:1/n"
            imp.add_constant(scale, np.array(1.0 / len(names), dtype=imp.value(names[0]).dtype))
            steps.append((Op.MUL, scale))
        if not steps:
            imp.emit(node, Op.IDENTITY, names, node.outputs, {})
            return
        acc = names[0]
        for k, (step_op, operand) in enumerate(steps[:-1]):
            acc = imp.emit_step(node, str(k), step_op, [acc, operand], {})
        imp.emit(node, steps[-1][0], [acc, steps[-1][1]], node.outputs, {})

    return Converter(convert)


#: `scale(x, s)`: every element of x times the scalar s (a Mul whose second operand is 0-d)
SCALE = AlgebraOp("scale", Op.MUL, (None, 0), lambda a, n: tuple(a[0]), lambda a: [], no_attrs)
#: `addb(x, b)`: a bias vector added along the last axis of a rank-3 x (a dense layer's bias)
ADD_BIAS = AlgebraOp("addb", Op.ADD, (3, 1), lambda a, n: tuple(a[0]), lambda a: [(a[0][2], a[1][0])], no_attrs)

RECORDS: tuple[OpDef, ...] = (
    replace(binary_op(Op.ADD, lambda a, at: a[0] + a[1], np.add), algebra=(elementwise_binary("add", Op.ADD), ADD_BIAS),
            importers={"Add": direct(Op.ADD), "Sum": variadic(Op.ADD), "Mean": variadic(Op.ADD, mean=True)}),
    binary_op(Op.SUB, lambda a, at: a[0] - a[1], np.subtract),
    replace(binary_op(Op.MUL, lambda a, at: a[0] * a[1], np.multiply), algebra=(elementwise_binary("mul", Op.MUL), SCALE)),
    binary_op(Op.DIV, lambda a, at: a[0] / a[1] if a[0].dtype.startswith("float") else _trunc_div(a[0], a[1]), _div),
    binary_op(Op.POW, lambda a, at: te.power(a[0], te.cast(a[0].dtype, a[1])), _pow),
    elementwise(Op.MOD, _mod_expr, _mod, {"Mod": direct(Op.MOD, fmod=0)}, shape=_broadcast),
    binary_op(Op.MAX, lambda a, at: te.max(a[0], a[1]), np.maximum, variadic(Op.MAX)),
    binary_op(Op.MIN, lambda a, at: te.min(a[0], a[1]), np.minimum, variadic(Op.MIN)),
    elementwise(Op.ABS, _abs_expr, unary_reference(np.abs), {"Abs": direct(Op.ABS)}),
    unary_op(Op.NEG, lambda a, at: -a[0], np.negative),
    elementwise(Op.SIGN, _sign_expr, unary_reference(np.sign), {"Sign": direct(Op.SIGN)}),
    unary_op(Op.FLOOR, lambda a, at: te.floor(a[0]), np.floor),
    unary_op(Op.CEIL, lambda a, at: te.ceil(a[0]), np.ceil),
    unary_op(Op.ROUND, lambda a, at: te.round_even(a[0]), np.round),
    unary_op(Op.RECIPROCAL, lambda a, at: const_like(1, a[0]) / a[0], np.reciprocal),
    unary_op(Op.SIN, lambda a, at: te.sin(a[0]), np.sin),
    unary_op(Op.COS, lambda a, at: te.cos(a[0]), np.cos),
    *(unary_op(Op(name.capitalize()), _libm(name), reference)
      for name, reference in zip(LIBM_UNARY, (np.tan, np.arcsin, np.arccos, np.arctan, np.sinh, np.cosh, np.arcsinh,
                                              np.arccosh, np.arctanh))),
    unary_op(Op.SQRT, lambda a, at: te.sqrt(a[0]), np.sqrt),
    unary_op(Op.ERF, lambda a, at: te.erf(a[0]), erf_reference),
    unary_op(Op.EXP, lambda a, at: te.exp(a[0]), np.exp),
    unary_op(Op.LOG, lambda a, at: te.log(a[0]), np.log),
    unary_op(Op.TANH, lambda a, at: te.tanh(a[0]), np.tanh),
    elementwise(Op.CLIP, _clip_expr, _clip, {"Clip": Converter(_import_clip, constant_inputs=(1, 2))}),
    elementwise(Op.CAST, lambda a, at: te.cast(at["to"], a[0]), _cast, {"Cast": Converter(_import_cast), "CastLike": Converter(_import_cast_like),
                                                             **quantize.IMPORTERS},
                shape=_cast_shape),
    elementwise(Op.IDENTITY, lambda a, at: a[0], _identity, {"Identity": direct(Op.IDENTITY)}),
    elementwise(Op.DROPOUT, lambda a, at: a[0], _identity,
                {"Dropout": Converter(_import_dropout, constant_inputs=(1, 2))}),
)
