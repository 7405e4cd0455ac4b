"""Reductions over a set of axes (ReduceMean/Sum/Max), and the global pools that import as them."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode, ints, normalize_axes
from autosched.graph.ir import Node, Op, Value
from autosched.ops import reduce as reduce_ops
from autosched.opset.record import ComputeArgs, ComputeFn, OpDef, OpKind, ReferenceFn, Shape, on_output
from autosched.te import Tensor


def _shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axes = set(node.attrs["axes"])
    if node.attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [(shape, x.dtype)]


def _reference(fn: Callable[..., np.ndarray]) -> ReferenceFn:
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        x = args[0]
        return [np.asarray(fn(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))).astype(x.dtype)]

    return kernel


def _max(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.dtype.kind == "f":
        lowest: Any = -np.inf
    elif x.dtype.kind == "b":
        lowest = False
    else:
        lowest = np.iinfo(x.dtype).min
    return np.max(x, axis=axis, keepdims=keepdims, initial=lowest)


def _compute(fn: Callable[..., Tensor]) -> ComputeFn:
    def compute(args: ComputeArgs) -> list[Tensor]:
        return [fn(args.inputs[0], args.attrs["axes"], bool(args.attrs.get("keepdims", 1)), lanes=args.lanes)]
    return compute


def _importer(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        rank = len(imp.value(node.inputs[0]).shape)
        axes = ints(node.const(1))
        if axes is None:
            axes = node.attr("axes")
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                imp.emit(node, Op.IDENTITY, node.inputs[:1], node.outputs, {})
                return
            axes = list(range(rank))
        attrs = {"axes": normalize_axes(node, axes, rank), "keepdims": int(node.attr("keepdims", 1))}
        imp.emit(node, op, node.inputs[:1], node.outputs, attrs)

    return Converter(convert, constant_inputs=(1,))


def _global_pool(op: Op) -> Converter:
    """GlobalAverage/MaxPool: the reduction over every spatial axis, kept as size-1 dims."""
    def convert(imp: Importer, node: OnnxNode) -> None:
        rank = len(imp.value(node.inputs[0]).shape)
        imp.emit(node, op, node.inputs, node.outputs, {"axes": tuple(range(2, rank)), "keepdims": 1})

    return Converter(convert)


def _record(op: Op, reference: Callable[..., np.ndarray], compute: Callable[..., Tensor],
            global_pool: str | None = None) -> OpDef:
    importers = {op.value: _importer(op)}
    if global_pool:
        importers[global_pool] = _global_pool(op)
    return OpDef(op, OpKind.REDUCE, _shape, _reference(reference), _compute(compute),
                 on_output(reduce_ops.schedule_reduce), importers)


RECORDS: tuple[OpDef, ...] = (
    _record(Op.REDUCE_MEAN, np.mean, reduce_ops.reduce_mean, global_pool="GlobalAveragePool"),
    _record(Op.REDUCE_SUM, np.sum, reduce_ops.reduce_sum),
    _record(Op.REDUCE_MAX, _max, reduce_ops.reduce_max, global_pool="GlobalMaxPool"),
)
