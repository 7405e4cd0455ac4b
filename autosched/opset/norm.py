"""Normalizations: batch norm (elementwise per channel, usually folded into a convolution),
softmax and layer norm (reductions over trailing axes), and the ONNX ops that import as them:
LogSoftmax (a shifted log of the sum of exponentials), instance and group norm (a layer norm
over each instance's or group's elements, then the per-channel scale and bias), mean-variance,
Lp and RMS normalization (reductions and elementwise steps)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, normalize_axes, normalize_axis
from autosched.graph.ir import Node, Op, Value
from autosched.ops import nn
from autosched.ops import reduce as reduce_ops
from autosched.opset.elementwise import broadcast_operand, const_like, elementwise
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape, on_output, same_shape
from autosched.opset.transform import schedule_outputs
from autosched.opset.window import channel_param
from autosched.schedule import Schedule
from autosched.te import Expr, Tensor


def _batch_norm_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    for param in inputs[1:]:
        if param.shape != (x.shape[1],):
            raise ValueError(f"parameter '{param.name}' has shape {list(param.shape)}, expected [{x.shape[1]}]")
    return [(x.shape, x.dtype)]


def _batch_norm_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias, mean, var = args
    rank = x.ndim
    inv = channel_param(scale, rank) / np.sqrt(channel_param(var, rank) + attrs["epsilon"])
    y = (x - channel_param(mean, rank)) * inv + channel_param(bias, rank)
    return [y.astype(x.dtype)]


def _batch_norm_expr(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x, scale, bias, mean, var = a
    return (x - mean) * te.rsqrt(var + const_like(at.get("epsilon", 1e-5), x)) * scale + bias


def _per_channel(t: Tensor, idx: tuple, position: int) -> Expr:
    """The data tensor broadcasts; the parameters are indexed by the channel (axis 1)."""
    return t[(idx[1],)] if position > 0 else broadcast_operand(t, idx, position)


def _import_batch_norm(imp: Importer, node: OnnxNode) -> None:
    if node.attr("training_mode", 0):
        _import_batch_statistics(imp, node)
        return
    if len(node.used_outputs()) > 1:
        raise node.error("running statistics outputs need training_mode=1")
    imp.emit(node, Op.BATCH_NORM, node.inputs, node.outputs[:1], {"epsilon": float(node.attr("epsilon", 1e-5))})


def _import_batch_statistics(imp: Importer, node: OnnxNode) -> None:
    """Training mode: x normalized by its own mean and (biased) variance per channel, over the
    batch and spatial axes, then scaled and shifted; the running statistics outputs, where
    named, are the inputs' moved towards the batch's by 1 - momentum. BiT standardizes its
    convolutions' weights so (a batch norm of the weights, in training mode, that the build
    folds; its statistics outputs named but read by nothing)."""
    x = imp.value(node.inputs[0])
    rank = len(x.shape)
    over = {"axes": (0, *range(2, rank)), "keepdims": 1}
    epsilon = f"{node.outputs[0]}:epsilon"
    imp.add_constant(epsilon, np.array(float(node.attr("epsilon", 1e-5)), dtype=x.dtype))
    step = lambda label, op, inputs, attrs: imp.emit_step(node, label, op, inputs, attrs)  # noqa: E731
    mean = step("mean", Op.REDUCE_MEAN, [x.name], over)
    centred = step("centred", Op.SUB, [x.name, mean], {})
    variance = step("variance", Op.REDUCE_MEAN, [step("square", Op.MUL, [centred, centred], {})], over)
    normed = step("normed", Op.DIV, [centred, step("deviation", Op.SQRT, [step("guarded", Op.ADD, [
        variance, epsilon], {})], {})], {})
    per_channel = {"shape": (x.shape[1],) + (1,) * (rank - 2)}
    scale = step("scale_per_channel", Op.RESHAPE, [node.inputs[1]], per_channel)
    bias = step("bias_per_channel", Op.RESHAPE, [node.inputs[2]], per_channel)
    imp.emit(node, Op.ADD, [step("scaled", Op.MUL, [normed, scale], {}), bias], node.outputs[:1], {})
    momentum = float(node.attr("momentum", 0.9))
    kept_share, batch_share = f"{node.outputs[0]}:momentum", f"{node.outputs[0]}:batch_share"
    imp.add_constant(kept_share, np.array(momentum, dtype=x.dtype))
    imp.add_constant(batch_share, np.array(1 - momentum, dtype=x.dtype))
    for index, batch in ((1, mean), (2, variance)):
        if index < len(node.outputs) and node.outputs[index]:
            per_channel_batch = step(f"batch{index}", Op.RESHAPE, [batch], {"shape": (x.shape[1],)})
            moved = step(f"moved{index}", Op.MUL, [per_channel_batch, batch_share], {})
            kept = step(f"kept{index}", Op.MUL, [node.inputs[2 + index], kept_share], {})
            imp.emit(node, Op.ADD, [kept, moved], [node.outputs[index]], {})


def _softmax_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    shifted = x.astype(np.float64) - x.max(axis=attrs["axis"], keepdims=True)
    e = np.exp(shifted)
    return [(e / e.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype)]


def _import_softmax(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    imp.emit(node, Op.SOFTMAX, node.inputs, node.outputs, {"axis": normalize_axis(node, node.attr("axis", -1), rank)})


def _layer_norm_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axis = node.attrs["axis"]
    for param in inputs[1:]:
        np.broadcast_shapes(param.shape, x.shape[axis:])
    stat_shape = (*x.shape[:axis], *([1] * (len(x.shape) - axis)))
    return [(x.shape, x.dtype)] + [(stat_shape, "float32")] * (len(node.outputs) - 1)


def _layer_norm_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    axes = tuple(range(attrs["axis"], x.ndim))
    x32 = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    mean = x32.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(((x32 - mean) ** 2).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    y = (x32 - mean) * inv_std * args[1]
    if len(args) == 3:
        y = y + args[2]
    return [y.astype(x.dtype), mean.astype(np.float32), inv_std.astype(np.float32)]


def _layer_norm_compute(args: ComputeArgs) -> list[Tensor]:
    at, ins, n_out = args.attrs, args.inputs, len(args.out_shapes)
    x, axis, eps = ins[0], at["axis"], at.get("epsilon", 1e-5)
    y = nn.layer_norm(x, ins[1], ins[2] if len(ins) > 2 else None, axis, eps,
                      lanes=args.lanes if n_out == 1 else None)
    if n_out == 1:
        return [y]
    # the optional Mean and InvStdDev outputs, over the same axes, kept as size-1 dims
    axes = tuple(range(axis, x.ndim))
    mean = reduce_ops.reduce_mean(x, axes, keepdims=True)
    dev = te.compute(x.shape, lambda *i: te.power(x[i] - mean[i[:axis] + (0,) * len(axes)], 2.0), name="sq_dev")
    var = reduce_ops.reduce_mean(dev, axes, keepdims=True)
    inv = te.compute(var.shape, lambda *i: te.rsqrt(var[i] + te.const(eps, var.dtype)), name="inv_std_dev")
    return [y, mean, inv][:n_out]


def _layer_norm_schedule(outs: list[Tensor], lanes: int) -> Schedule:
    """With its statistics outputs, every stage at root; alone, the fused layer-norm schedule."""
    return schedule_outputs(outs, lanes) if len(outs) > 1 else nn.schedule_layer_norm(outs[0], lanes)


def _import_layer_norm(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    outputs = list(node.outputs)
    while outputs and not outputs[-1]:
        outputs.pop()
    outputs = [name or f"{node.name}:unused{i}" for i, name in enumerate(outputs)]
    attrs = {"axis": normalize_axis(node, node.attr("axis", -1), rank), "epsilon": float(node.attr("epsilon", 1e-5))}
    imp.emit(node, Op.LAYER_NORM, [name for name in node.inputs if name], outputs, attrs)


def _import_log_softmax(imp: Importer, node: OnnxNode) -> None:
    """(x - m) - log Σ exp(x - m), m the maximum along the axis: never the log of an underflowed
    softmax."""
    x = node.inputs[0]
    along = {"axes": (normalize_axis(node, node.attr("axis", -1), len(imp.value(x).shape)),), "keepdims": 1}
    shifted = imp.emit_step(node, "shifted", Op.SUB, [x, imp.emit_step(node, "max", Op.REDUCE_MAX, [x], along)], {})
    total = imp.emit_step(node, "sum", Op.REDUCE_SUM, [imp.emit_step(node, "exp", Op.EXP, [shifted], {})], along)
    imp.emit(node, Op.SUB, [shifted, imp.emit_step(node, "log", Op.LOG, [total], {})], node.outputs, {})


def _grouped_norm(groups: Callable[[OnnxNode, int], int]) -> Converter:
    """Instance norm (a group per channel) and group norm: x as [N, G, rest], a layer norm over
    `rest` with unit scale, back to x's shape, then the per-channel scale and bias."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        x = imp.value(node.inputs[0])
        if len(x.shape) < 3:
            raise node.error(f"the input must have a channel and at least one spatial axis, not {list(x.shape)}")
        n, c = x.shape[:2]
        g = groups(node, c)
        if g < 1 or c % g:
            raise node.error(f"{c} channels do not divide into {g} groups")
        rest = x.size // (n * g)
        unit = f"{node.outputs[0]}:unit_scale"
        imp.add_constant(unit, np.ones(rest, dtype=x.dtype))
        grouped = imp.emit_step(node, "grouped", Op.RESHAPE, [x.name], {"shape": (n, g, rest)})
        normed = imp.emit_step(node, "normed", Op.LAYER_NORM, [grouped, unit],
                               {"axis": 2, "epsilon": float(node.attr("epsilon", 1e-5))})
        per_channel = (c,) + (1,) * (len(x.shape) - 2)
        # torch writes GroupNorm as an instance norm of the groups with scale 1 and bias 0, then
        # its own affine: those two steps would be kernels that change nothing
        steps = [(k, label, op) for k, identity, label, op in ((1, 1, "scaled", Op.MUL), (2, 0, "shifted", Op.ADD))
                 if not (node.inputs[k] in imp.constants and np.all(imp.constants[node.inputs[k]] == identity))]
        if not steps:
            imp.emit(node, Op.RESHAPE, [normed], node.outputs, {"shape": x.shape})
            return
        y = imp.emit_step(node, "ungrouped", Op.RESHAPE, [normed], {"shape": x.shape})
        for n_step, (k, label, op) in enumerate(steps):
            param = node.inputs[k]
            if imp.value(param).shape == (g,) and g != c:  # opset 18-20 GroupNormalization: per group
                if param not in imp.constants:
                    raise node.error(f"per-group parameter '{param}' must be a constant")
                expanded = f"{node.outputs[0]}:{label}_per_channel"
                imp.add_constant(expanded, np.repeat(imp.constants[param], c // g))
                param = expanded
            elif imp.value(param).shape != (c,):
                raise node.error(f"parameter '{param}' has shape {list(imp.value(param).shape)}, expected [{c}]")
            param = imp.emit_step(node, f"{label}_param", Op.RESHAPE, [param], {"shape": per_channel})
            if n_step == len(steps) - 1:
                imp.emit(node, op, [y, param], node.outputs, {})
            else:
                y = imp.emit_step(node, label, op, [y, param], {})

    return Converter(convert)


def _import_mean_variance(imp: Importer, node: OnnxNode) -> None:
    """(x - E x) / (sqrt(E (x - E x)²) + 1e-9) over `axes` (ONNX's ε)."""
    x = imp.value(node.inputs[0])
    over = {"axes": normalize_axes(node, node.attr("axes", [0, 2, 3]), len(x.shape)), "keepdims": 1}
    epsilon = f"{node.outputs[0]}:epsilon"
    imp.add_constant(epsilon, np.array(1e-9, dtype=x.dtype))
    centred = imp.emit_step(node, "centred", Op.SUB, [x.name, imp.emit_step(node, "mean", Op.REDUCE_MEAN, [x.name], over)], {})
    variance = imp.emit_step(node, "variance", Op.REDUCE_MEAN,
                             [imp.emit_step(node, "square", Op.MUL, [centred, centred], {})], over)
    deviation = imp.emit_step(node, "deviation", Op.SQRT, [variance], {})
    imp.emit(node, Op.DIV, [centred, imp.emit_step(node, "guarded", Op.ADD, [deviation, epsilon], {})], node.outputs, {})


def _import_lp_norm(imp: Importer, node: OnnxNode) -> None:
    """x over its L1 or L2 norm along the axis (a face or retrieval embedding's last step)."""
    x = imp.value(node.inputs[0])
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise node.error(f"p must be 1 or 2, not {p}")
    along = {"axes": (normalize_axis(node, node.attr("axis", -1), len(x.shape)),), "keepdims": 1}
    if p == 1:
        norm = imp.emit_step(node, "norm", Op.REDUCE_SUM, [imp.emit_step(node, "abs", Op.ABS, [x.name], {})], along)
    else:
        squares = imp.emit_step(node, "square", Op.MUL, [x.name, x.name], {})
        norm = imp.emit_step(node, "norm", Op.SQRT, [imp.emit_step(node, "sum", Op.REDUCE_SUM, [squares], along)], {})
    zero, one = f"{node.outputs[0]}:zero", f"{node.outputs[0]}:one"
    imp.add_constant(zero, np.zeros((), dtype=x.dtype))
    imp.add_constant(one, np.ones((), dtype=x.dtype))
    empty = imp.emit_step(node, "empty", Op.EQUAL, [norm, zero], {})  # a zero vector stays zero
    imp.emit(node, Op.DIV, [x.name, imp.emit_step(node, "divisor", Op.WHERE, [empty, one, norm], {})],
             node.outputs, {})


def _import_rms_norm(imp: Importer, node: OnnxNode) -> None:
    """x / sqrt(mean(x²) + ε) · scale, the mean over the axes from `axis` on (opset 23's
    RMSNormalization: Llama-style decoders' only normalization)."""
    x = imp.value(node.inputs[0])
    if int(node.attr("stash_type", 1)) != 1:
        raise node.error(f"stash_type {node.attr('stash_type')}: only 1 (statistics in float) is supported")
    axis = normalize_axis(node, node.attr("axis", -1), len(x.shape))
    epsilon = f"{node.outputs[0]}:epsilon"
    imp.add_constant(epsilon, np.array(node.attr("epsilon", 1e-5), dtype=x.dtype))
    square = imp.emit_step(node, "square", Op.MUL, [x.name, x.name], {})
    mean = imp.emit_step(node, "mean_square", Op.REDUCE_MEAN, [square],
                         {"axes": tuple(range(axis, len(x.shape))), "keepdims": 1})
    rms = imp.emit_step(node, "rms", Op.SQRT, [imp.emit_step(node, "guarded", Op.ADD, [mean, epsilon], {})], {})
    imp.emit(node, Op.MUL, [imp.emit_step(node, "normed", Op.DIV, [x.name, rms], {}), node.inputs[1]], node.outputs, {})


def _group_count(node: OnnxNode, channels: int) -> int:
    groups = node.attr("num_groups")
    if groups is None:
        raise node.error("the num_groups attribute is missing")
    return int(groups)


RECORDS: tuple[OpDef, ...] = (
    elementwise(Op.BATCH_NORM, _batch_norm_expr, _batch_norm_reference,
                {"BatchNormalization": Converter(_import_batch_norm)},
                shape=_batch_norm_shape, operand_load=_per_channel),
    OpDef(Op.SOFTMAX, OpKind.REDUCE, same_shape, _softmax_reference,
          lambda args: [nn.softmax(args.inputs[0], args.attrs["axis"], lanes=args.lanes)],
          on_output(nn.schedule_softmax), {"Softmax": Converter(_import_softmax),
                                           "LogSoftmax": Converter(_import_log_softmax)},
          in_place=True),  # a row's reductions read it whole before any of its outputs is written
    OpDef(Op.LAYER_NORM, OpKind.REDUCE, _layer_norm_shape, _layer_norm_reference, _layer_norm_compute,
          _layer_norm_schedule, {"LayerNormalization": Converter(_import_layer_norm),
                                 "InstanceNormalization": _grouped_norm(lambda node, channels: channels),
                                 "GroupNormalization": _grouped_norm(_group_count),
                                 "MeanVarianceNormalization": Converter(_import_mean_variance),
                                 "LpNormalization": Converter(_import_lp_norm),
                                 "RMSNormalization": Converter(_import_rms_norm)}),
)
