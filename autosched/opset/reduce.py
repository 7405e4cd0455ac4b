"""Reductions over a set of axes (ReduceMean/Sum/Prod/Max/Min), the global pools that import as
them, and the ONNX reductions that import as a sum between elementwise steps (ReduceL1, L2,
SumSquare, LogSum, LogSumExp) or as reductions of a mask (ArgMax, ArgMin, Hardmax, TopK), and CumSum."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, ints, normalize_axes
from autosched.graph.ir import Node, Op, Value
from autosched.ops import reduce as reduce_ops
from autosched.opset.record import ComputeArgs, ComputeFn, OpDef, OpKind, ReferenceFn, Shape, on_output, same_shape
from autosched.te import Expr, Tensor


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


def _min(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if x.dtype.kind == "f":
        highest: Any = np.inf
    elif x.dtype.kind == "b":
        highest = True
    else:
        highest = np.iinfo(x.dtype).max
    return np.min(x, axis=axis, keepdims=keepdims, initial=highest)


def _compute(fn: Callable[..., Tensor]) -> ComputeFn:
    def compute(args: ComputeArgs) -> list[Tensor]:
        return [fn(args.inputs[0], args.attrs["axes"], bool(args.attrs.get("keepdims", 1)), lanes=args.lanes)]
    return compute


def _reduce_attrs(imp: Importer, node: OnnxNode) -> dict[str, Any] | None:
    """Axes (from the input or, before opset 18, the attribute) and keepdims; None where empty
    axes with noop_with_empty_axes leave the input as it is."""
    rank = len(imp.value(node.inputs[0]).shape)
    axes = ints(node.const(1))
    if axes is None:
        axes = node.attr("axes")
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return {"axes": normalize_axes(node, axes, rank), "keepdims": int(node.attr("keepdims", 1))}


def _importer(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        attrs = _reduce_attrs(imp, node)
        imp.emit(node, op if attrs else Op.IDENTITY, node.inputs[:1], node.outputs, attrs or {})

    return Converter(convert, constant_inputs=(1,))


def _around_sum(before: Op | None, after: Op | None) -> Converter:
    """A sum of `before`(x) (Mul: x·x), then `after` of it: ReduceL1 is Abs then the sum,
    ReduceL2 squares then takes Sqrt. With noop_with_empty_axes and no axes, the steps run
    without the sum, as ONNX's reference does."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        attrs, x = _reduce_attrs(imp, node), node.inputs[0]
        steps: list[tuple[Op, list[str], dict[str, Any]]] = []
        if before:
            steps.append((before, [x, x] if before is Op.MUL else [x], {}))
        if attrs:
            steps.append((Op.REDUCE_SUM, [], attrs))
        if after:
            steps.append((after, [], {}))
        for k, (op, operands, op_attrs) in enumerate(steps):
            operands = operands or [x]
            if k == len(steps) - 1:
                imp.emit(node, op, operands, node.outputs, op_attrs)
            else:
                x = imp.emit_step(node, op.value.lower(), op, operands, op_attrs)

    return Converter(convert, constant_inputs=(1,))


def _import_log_sum_exp(imp: Importer, node: OnnxNode) -> None:
    """m + log Σ exp(x - m), m the maximum over the axes: no exp overflows."""
    attrs = _reduce_attrs(imp, node)
    if attrs is None:
        imp.emit(node, Op.IDENTITY, node.inputs[:1], node.outputs, {})
        return
    top = imp.emit_step(node, "max", Op.REDUCE_MAX, node.inputs[:1], {**attrs, "keepdims": 1})
    shifted = imp.emit_step(node, "shifted", Op.SUB, [node.inputs[0], top], {})
    total = imp.emit_step(node, "sum", Op.REDUCE_SUM, [imp.emit_step(node, "exp", Op.EXP, [shifted], {})], attrs)
    log = imp.emit_step(node, "log", Op.LOG, [total], {})
    if not attrs["keepdims"]:
        top = imp.emit_step(node, "max_dropped", Op.RESHAPE, [top], {"shape": imp.value(log).shape})
    imp.emit(node, Op.ADD, [log, top], node.outputs, {})


def _arg_extreme(extreme: Op) -> Converter:
    """ArgMax/ArgMin: where x equals its extreme along the axis, the positions (an index
    constant), elsewhere one past the last; their minimum is the first such position
    (select_last_index: -1 elsewhere and their maximum)."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        x = imp.value(node.inputs[0])
        axis = normalize_axes(node, [node.attr("axis", 0)], len(x.shape))[0]
        last = bool(node.attr("select_last_index", 0))
        positions, missing = _positions(imp, node, x.shape, axis, -1 if last else x.shape[axis])
        along = {"axes": (axis,), "keepdims": 1}
        top = imp.emit_step(node, "extreme", extreme, [x.name], along)
        hits = imp.emit_step(node, "hits", Op.EQUAL, [x.name, top], {})
        found = imp.emit_step(node, "found", Op.WHERE, [hits, positions, missing], {})
        imp.emit(node, Op.REDUCE_MAX if last else Op.REDUCE_MIN, [found], node.outputs,
                 {"axes": (axis,), "keepdims": int(node.attr("keepdims", 1))})

    return Converter(convert)


def _positions(imp: Importer, node: OnnxNode, shape: tuple[int, ...], axis: int, missing: int) -> tuple[str, str]:
    """Constants of a search along `axis`: each position's index (broadcasting over the other
    axes), and the index that stands for none."""
    out = node.outputs[0] or node.name
    imp.add_constant(f"{out}:positions", np.arange(shape[axis], dtype=np.int64).reshape(
        [shape[axis] if d == axis else 1 for d in range(len(shape))]))
    imp.add_constant(f"{out}:missing", np.array(missing, dtype=np.int64))
    return f"{out}:positions", f"{out}:missing"


MAX_TOP_K = 64  # TopK is k extractions of the extreme: k passes over the axis


def _import_top_k(imp: Importer, node: OnnxNode) -> None:
    """TopK as k extractions: the extreme of the elements not yet taken, and the first position
    holding it among those (ties go to the lower index, as ONNX orders them); that position is
    then taken. A taken element is masked by where it is, not by its value, so values equal to
    the fill (-inf, an integer's minimum) are still found. Values and indices come out sorted."""
    x = imp.value(node.inputs[0])
    axis = normalize_axes(node, [node.attr("axis", -1)], len(x.shape))[0]
    k = node.required_const(1).reshape(-1)
    length = x.shape[axis]
    if k.size != 1 or not 0 < int(k[0]) <= min(length, MAX_TOP_K):
        raise node.error(f"k must be one integer from 1 to {min(length, MAX_TOP_K)} (the axis' length, at most "
                         f"{MAX_TOP_K}), not {k.tolist()}")
    largest = bool(node.attr("largest", 1))
    kind = np.dtype(x.dtype)
    fill = (-np.inf if largest else np.inf) if kind.kind == "f" else (np.iinfo(kind).min if largest else np.iinfo(kind).max)
    positions, missing = _positions(imp, node, x.shape, axis, length)
    fill_name = f"{node.outputs[0] or node.name}:fill"
    imp.add_constant(fill_name, np.array(fill, dtype=kind))
    along = {"axes": (axis,), "keepdims": 1}
    values, indices, taken = [], [], None
    for r in range(int(k[0])):
        def step(label: str, op: Op, inputs: list[str], attrs: dict | None = None, r: int = r) -> str:
            return imp.emit_step(node, f"{r}/{label}", op, inputs, attrs or {})

        rest = x.name if taken is None else step("rest", Op.WHERE, [taken, fill_name, x.name])
        top = step("extreme", Op.REDUCE_MAX if largest else Op.REDUCE_MIN, [rest], along)
        hits = step("hits", Op.EQUAL, [rest, top])
        if taken is not None:
            hits = step("free_hits", Op.AND, [hits, step("free", Op.NOT, [taken])])
        first = step("index", Op.REDUCE_MIN, [step("found", Op.WHERE, [hits, positions, missing])], along)
        now = step("now", Op.EQUAL, [positions, first])
        taken = now if taken is None else step("taken", Op.OR, [taken, now])
        values.append(top)
        indices.append(first)
    for index in node.used_outputs():
        imp.emit(node, Op.CONCAT, (values, indices)[index], [node.outputs[index]], {"axis": axis})


def _import_hardmax(imp: Importer, node: OnnxNode) -> None:
    """1 at the first maximum along the axis, 0 elsewhere."""
    x = imp.value(node.inputs[0])
    axis = normalize_axes(node, [node.attr("axis", -1)], len(x.shape))[0]
    positions, missing = _positions(imp, node, x.shape, axis, x.shape[axis])
    along = {"axes": (axis,), "keepdims": 1}
    hits = imp.emit_step(node, "hits", Op.EQUAL, [x.name, imp.emit_step(node, "max", Op.REDUCE_MAX, [x.name], along)], {})
    first = imp.emit_step(node, "first", Op.REDUCE_MIN, [imp.emit_step(node, "found", Op.WHERE, [hits, positions, missing], {})],
                          along)
    imp.emit(node, Op.CAST, [imp.emit_step(node, "one_hot", Op.EQUAL, [positions, first], {})], node.outputs,
             {"to": x.dtype})


def _cum_sum_compute(args: ComputeArgs) -> list[Tensor]:
    """Each output the sum of the elements up to it along the axis (after it, reversed; not
    itself, exclusive): a masked sum over the whole axis, O(n²) in its length, which suits the
    short axes it runs over in models (position ids from an attention mask)."""
    x, axis = args.inputs[0], args.attrs["axis"]
    k = te.reduce_axis(x.shape[axis], "k")
    exclusive, reverse = args.attrs["exclusive"], args.attrs["reverse"]

    def body(*i: Expr) -> Expr:
        before = (k > i[axis] if exclusive else k >= i[axis]) if reverse else (k < i[axis] if exclusive else k <= i[axis])
        term = te.select(before, x[i[:axis] + (k,) + i[axis + 1:]], te.const(0, x.dtype))
        return te.sum(term, k)

    return [te.compute(x.shape, body, name="cum_sum", tag=reduce_ops.REDUCE_TAG, attrs={"axes": (axis,)})]


def _cum_sum_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x, axis = args[0], attrs["axis"]
    y = np.flip(x, axis) if attrs["reverse"] else x
    total = np.cumsum(y, axis=axis, dtype=x.dtype)
    if attrs["exclusive"]:
        total = total - y
    return [np.ascontiguousarray(np.flip(total, axis) if attrs["reverse"] else total)]


def _import_cum_sum(imp: Importer, node: OnnxNode) -> None:
    axis = node.required_const(1).reshape(-1)
    if axis.size != 1:
        raise node.error("the axis must be one integer")
    attrs = {"axis": normalize_axes(node, [int(axis[0])], len(imp.value(node.inputs[0]).shape))[0],
             "exclusive": int(node.attr("exclusive", 0)), "reverse": int(node.attr("reverse", 0))}
    imp.emit(node, Op.CUM_SUM, node.inputs[:1], node.outputs, attrs)


def _global_pool(op: Op) -> Converter:
    """GlobalAverage/MaxPool: the reduction over every spatial axis, kept as size-1 dims."""
    def convert(imp: Importer, node: OnnxNode) -> None:
        rank = len(imp.value(node.inputs[0]).shape)
        imp.emit(node, op, node.inputs, node.outputs, {"axes": tuple(range(2, rank)), "keepdims": 1})

    return Converter(convert)


def _record(op: Op, reference: Callable[..., np.ndarray], compute: Callable[..., Tensor],
            global_pool: str | None = None, composites: Mapping[str, Converter] | None = None) -> OpDef:
    importers = {op.value: _importer(op), **(composites or {})}
    if global_pool:
        importers[global_pool] = _global_pool(op)
    return OpDef(op, OpKind.REDUCE, _shape, _reference(reference), _compute(compute),
                 on_output(reduce_ops.schedule_reduce), importers)


def _range_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    return [((), inputs[0].dtype), ((), inputs[0].dtype)]


def _range_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(args[0].max()), np.asarray(args[0].min())]


RECORDS: tuple[OpDef, ...] = (
    _record(Op.REDUCE_MEAN, np.mean, reduce_ops.reduce_mean, global_pool="GlobalAveragePool"),
    _record(Op.REDUCE_PROD, np.prod, reduce_ops.reduce_prod),
    _record(Op.REDUCE_SUM, np.sum, reduce_ops.reduce_sum, composites={
        "ReduceL1": _around_sum(Op.ABS, None), "ReduceL2": _around_sum(Op.MUL, Op.SQRT),
        "ReduceSumSquare": _around_sum(Op.MUL, None), "ReduceLogSum": _around_sum(None, Op.LOG),
        "ReduceLogSumExp": Converter(_import_log_sum_exp, constant_inputs=(1,))}),
    _record(Op.REDUCE_MAX, _max, reduce_ops.reduce_max, global_pool="GlobalMaxPool",
            composites={"ArgMax": _arg_extreme(Op.REDUCE_MAX), "TopK": Converter(_import_top_k, constant_inputs=(1,)),
                        "Hardmax": Converter(_import_hardmax)}),
    _record(Op.REDUCE_MIN, _min, reduce_ops.reduce_min, composites={"ArgMin": _arg_extreme(Op.REDUCE_MIN)}),
    # made by a CPU pass, never imported (`graph/passes/reduce_range.py`)
    OpDef(Op.REDUCE_RANGE, OpKind.REDUCE, _range_shape, _range_reference,
          lambda args: list(reduce_ops.reduce_range(args.inputs[0], args.lanes)), reduce_ops.schedule_reduce),
    OpDef(Op.CUM_SUM, OpKind.REDUCE, same_shape, _cum_sum_reference, _cum_sum_compute,
          on_output(reduce_ops.schedule_reduce), {"CumSum": Converter(_import_cum_sum, constant_inputs=(1,))}),
)
