"""Max and average pooling, plain or left in channel blocks by layout planning (attribute
`block`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.graph.layout import to_blocked, to_plain
from autosched.ops import nn
from autosched.opset.algebra import unary
from autosched.opset.record import (
    ComputeArgs,
    ComputeFn,
    OpDef,
    OpKind,
    ReferenceFn,
    Shape,
    UnsupportedTaskError,
    on_output,
)
from autosched.opset.window import output_spatial, pad_spatial, pooled_size, sliding_windows, window_attrs
from autosched.te import Tensor


def _shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    block = x.shape[-1:] if node.attrs.get("block") else ()
    spatial = output_spatial(node, x.shape[2:len(x.shape) - len(block)], node.attrs["kernel_shape"],
                             bool(node.attrs["ceil_mode"]))
    return [((*x.shape[:2], *spatial, *block), x.dtype)]


def _blocked(pool: ReferenceFn) -> ReferenceFn:
    """The pool on a blocked input (attribute `block`, 0 or absent: plain)."""
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        block = attrs.get("block", 0)
        return [to_blocked(pool(attrs, [to_plain(args[0], block)])[0], block)]
    return kernel


def _pool_input(attrs: Mapping[str, Any], x: np.ndarray, fill: Any) -> tuple[np.ndarray, list[int], list[int]]:
    """`x` padded by the explicit pads plus the end padding ceil mode needs.

    Also returns the spatial sizes with explicit pads, beyond which a window
    element is ceil-mode overhang, and the output spatial sizes.
    """
    rank = x.ndim - 2
    kernel, strides, dilations, pads = attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"]
    out = [
        pooled_size(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[rank + i], bool(attrs["ceil_mode"]))
        for i in range(rank)
    ]
    explicit = [x.shape[2 + i] + pads[i] + pads[rank + i] for i in range(rank)]
    needed = [(out[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 for i in range(rank)]
    end = [pads[rank + i] + max(0, needed[i] - explicit[i]) for i in range(rank)]
    padded = pad_spatial(x, pads[:rank], end, fill)
    return padded, explicit, out


def _crop(windows: np.ndarray, out: Sequence[int]) -> np.ndarray:
    return windows[(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]


def _max_pool(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded, _, out = _pool_input(attrs, x, lowest)
    windows = _crop(sliding_windows(padded, attrs["kernel_shape"], attrs["strides"], attrs["dilations"]), out)
    rank = x.ndim - 2
    return [windows.max(axis=tuple(range(-rank, 0))).astype(x.dtype)]


def _average_pool(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    rank = x.ndim - 2
    kernel, strides, dilations, pads = attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"]
    padded, explicit, out = _pool_input(attrs, x.astype(np.float64), 0.0)
    axes = tuple(range(-rank, 0))
    sums = _crop(sliding_windows(padded, kernel, strides, dilations), out).sum(axis=axes)
    # Which padded positions count toward the divisor: real pixels, plus the
    # explicit pads when count_include_pad is set; ceil-mode overhang never.
    mask = np.zeros((1, 1, *padded.shape[2:]))
    counted = tuple(
        slice(0, explicit[i]) if attrs["count_include_pad"] else slice(pads[i], pads[i] + x.shape[2 + i])
        for i in range(rank)
    )
    mask[(0, 0) + counted] = 1.0
    counts = _crop(sliding_windows(mask, kernel, strides, dilations), out).sum(axis=axes)
    return [(sums / counts).astype(x.dtype)]


def _compute(op: Op) -> ComputeFn:
    def compute(args: ComputeArgs) -> list[Tensor]:
        at = args.attrs
        rank = len(args.inputs[0].shape)
        if rank != (5 if at.get("block") else 4):
            raise UnsupportedTaskError(f"{op.value} over {rank - 2} spatial dims: only 2-D pooling is compiled")
        p = at["pads"]
        common = dict(kernel=at["kernel_shape"], stride=at["strides"], padding=(p[0], p[1], p[2], p[3]),
                      dilation=at["dilations"], ceil_mode=bool(at.get("ceil_mode", 0)))
        if op is Op.MAX_POOL:
            return [nn.max_pool2d(args.inputs[0], **common)]
        return [nn.avg_pool2d(args.inputs[0], count_include_pad=bool(at.get("count_include_pad", 0)), **common)]
    return compute


def _importer(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        if len(node.used_outputs()) > 1:
            raise node.error("the Indices output is not supported")
        x = imp.value(node.inputs[0])
        attrs = window_attrs(node, x.shape[2:], node.attr("kernel_shape", []))
        attrs["ceil_mode"] = int(node.attr("ceil_mode", 0))
        if op is Op.AVERAGE_POOL:
            attrs["count_include_pad"] = int(node.attr("count_include_pad", 0))
        imp.emit(node, op, node.inputs, node.outputs[:1], attrs)

    return Converter(convert)


def _import_lrn(imp: Importer, node: OnnxNode) -> None:
    """Local response normalization (AlexNet, GoogLeNet): x / (bias + α/size · Σ x²)^β, the sum
    over `size` neighbouring channels. That sum divided by size is an average pool of x² seen as
    [N, 1, C, rest], zero-padded along C and counting the padding."""
    x = imp.value(node.inputs[0])
    size = int(node.attr("size", 0))
    if size < 1:
        raise node.error("the size attribute must be a positive integer")
    if len(x.shape) < 3:
        raise node.error(f"the input must have a channel and at least one spatial axis, not {list(x.shape)}")
    n, c = x.shape[:2]
    scalars = {}
    for name, default in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)):
        scalars[name] = f"{node.outputs[0]}:{name}"
        imp.add_constant(scalars[name], np.array(node.attr(name, default), dtype=x.dtype))
    square = imp.emit_step(node, "square", Op.MUL, [x.name, x.name], {})
    column = imp.emit_step(node, "channels", Op.RESHAPE, [square], {"shape": (n, 1, c, x.size // (n * c))})
    low = (size - 1) // 2
    window = imp.emit_step(node, "window", Op.AVERAGE_POOL, [column], {
        "kernel_shape": (size, 1), "strides": (1, 1), "dilations": (1, 1), "pads": (low, 0, size - 1 - low, 0),
        "ceil_mode": 0, "count_include_pad": 1})
    mean = imp.emit_step(node, "mean", Op.RESHAPE, [window], {"shape": x.shape})
    scaled = imp.emit_step(node, "scaled", Op.MUL, [mean, scalars["alpha"]], {})
    base = imp.emit_step(node, "base", Op.ADD, [scaled, scalars["bias"]], {})
    imp.emit(node, Op.DIV, [x.name, imp.emit_step(node, "denominator", Op.POW, [base, scalars["beta"]], {})],
             node.outputs, {})


def _import_lp_pool(imp: Importer, node: OnnxNode) -> None:
    """LpPool: (Σ |x|^p)^(1/p) over each window, zeros in the padding: an average pool of |x|^p
    that counts the padding, times the window's size. A ceil-mode window past the padding would
    count fewer elements, so ceil_mode is taken only where it changes no output size."""
    x = imp.value(node.inputs[0])
    p = float(node.attr("p", 2))
    if p <= 0:
        raise node.error(f"p must be positive, not {p:g}")
    attrs = window_attrs(node, x.shape[2:], node.attr("kernel_shape", []))
    kernel, strides, pads, dilations = (list(attrs[k]) for k in ("kernel_shape", "strides", "pads", "dilations"))  # type: ignore[call-overload]
    attrs.update(ceil_mode=0, count_include_pad=1)
    summed = imp.emit_step(node, "powers", Op.MUL, [x.name, x.name], {}) if p == 2 else \
        imp.emit_step(node, "magnitude", Op.ABS, [x.name], {})
    constants = {"p": p, "window": float(np.prod(kernel)), "root": 1.0 / p}
    for label, value in constants.items():
        imp.add_constant(f"{node.outputs[0]}:{label}", np.array(value, dtype=x.dtype))
    if p not in (1, 2):
        summed = imp.emit_step(node, "powers", Op.POW, [summed, f"{node.outputs[0]}:p"], {})
    rank = len(x.shape) - 2
    spans = [x.shape[2 + i] + pads[i] + pads[rank + i] - dilations[i] * (k - 1) - 1 for i, k in enumerate(kernel)]
    if node.attr("ceil_mode", 0) and any(span % stride for span, stride in zip(spans, strides)):
        raise node.error("ceil_mode with a window past the padding is not supported")
    mean = imp.emit_step(node, "mean", Op.AVERAGE_POOL, [summed], attrs)
    total = imp.emit_step(node, "sum", Op.MUL, [mean, f"{node.outputs[0]}:window"], {})
    if p == 1:
        imp.emit(node, Op.IDENTITY, [total], node.outputs, {})
    elif p == 2:
        imp.emit(node, Op.SQRT, [total], node.outputs, {})
    else:
        imp.emit(node, Op.POW, [total, f"{node.outputs[0]}:root"], node.outputs, {})


RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.MAX_POOL, OpKind.POOL, _shape, _blocked(_max_pool), _compute(Op.MAX_POOL),
          on_output(nn.schedule_pool2d), {"MaxPool": _importer(Op.MAX_POOL)},
          # `maxpool(x)`: 3x3 windows, stride 1, padded to keep the size
          algebra=(unary("maxpool", Op.MAX_POOL, lambda shapes, n: {
              "kernel_shape": (3, 3), "strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "ceil_mode": 0},
              rank=4),)),
    OpDef(Op.AVERAGE_POOL, OpKind.POOL, _shape, _blocked(_average_pool), _compute(Op.AVERAGE_POOL),
          on_output(nn.schedule_pool2d), {"AveragePool": _importer(Op.AVERAGE_POOL), "LRN": Converter(_import_lrn),
                                            "LpPool": Converter(_import_lp_pool)}),
)
