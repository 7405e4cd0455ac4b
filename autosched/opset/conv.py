"""Convolution (NCHW): the anchor most models spend their time in."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.ops import conv as conv_ops
from autosched.opset.algebra import AlgebraOp
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape, UnsupportedTaskError, contiguous, on_output
from autosched.opset.window import channel_param, output_spatial, pad_spatial, sliding_windows, window_attrs
from autosched.te import Tensor


def conv_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    """Output of a convolution of plain (unblocked) operands."""
    x, w = inputs[0], inputs[1]
    group = node.attrs["group"]
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise ValueError(f"input {list(x.shape)} and weight {list(w.shape)} ranks differ")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ValueError(f"input channels {x.shape[1]} do not match weight {list(w.shape)} with group {group}")
    if len(inputs) == 3 and inputs[2].shape != (w.shape[0],):
        raise ValueError(f"bias has shape {list(inputs[2].shape)}, expected [{w.shape[0]}]")
    spatial = output_spatial(node, x.shape[2:], w.shape[2:], ceil_mode=False)
    return [((x.shape[0], w.shape[0], *spatial), x.dtype)]


def conv_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    """Grouped convolution as strided windows and one matmul per group, so whole models evaluate
    in seconds."""
    x, w = args[0], args[1]
    rank = x.ndim - 2
    pads = attrs["pads"]
    group = attrs["group"]
    padded = pad_spatial(x, pads[:rank], pads[rank:], 0)
    windows = sliding_windows(padded, w.shape[2:], attrs["strides"], attrs["dilations"])
    n, c = x.shape[:2]
    out_spatial = windows.shape[2:2 + rank]
    m = w.shape[0]
    cg, mg = c // group, m // group
    patch = cg * math.prod(w.shape[2:])
    cols = windows.reshape(n, group, cg, *out_spatial, *w.shape[2:])
    cols = np.moveaxis(cols, 2, 2 + rank).reshape(n, group, -1, patch).transpose(1, 0, 2, 3).reshape(group, -1, patch)
    weights = w.reshape(group, mg, patch).transpose(0, 2, 1)
    y = np.matmul(cols, weights)  # [group, n * out pixels, mg]
    y = y.reshape(group, n, *out_spatial, mg)
    y = np.moveaxis(y, -1, 1).reshape(group * mg, n, *out_spatial).swapaxes(0, 1)
    if len(args) == 3:
        y = y + channel_param(args[2], x.ndim)
    return [contiguous(y).astype(x.dtype, copy=False)]


def _compute(args: ComputeArgs) -> list[Tensor]:
    at = args.attrs
    if len(args.inputs[0].shape) != 4:
        raise UnsupportedTaskError(f"Conv over {len(args.inputs[0].shape) - 2} spatial dims: "
                                   "only 2-D convolution is compiled")
    p = at.get("pads", (0, 0, 0, 0))
    ins = args.inputs
    return [conv_ops.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=at.get("strides", (1, 1)),
                            padding=(p[0], p[1], p[2], p[3]), dilation=at.get("dilations", (1, 1)),
                            groups=at.get("group", 1), epilogue=args.epilogues)]


def _import(imp: Importer, node: OnnxNode) -> None:
    x, w = imp.value(node.inputs[0]), imp.value(node.inputs[1])
    kernel = node.attr("kernel_shape", w.shape[2:])
    attrs = window_attrs(node, x.shape[2:], kernel)
    if tuple(kernel) != w.shape[2:]:
        raise node.error(f"kernel_shape {list(kernel)} disagrees with weight shape {list(w.shape)}")
    del attrs["kernel_shape"]
    attrs["group"] = int(node.attr("group", 1))
    inputs = [name for name in node.inputs if name]
    imp.emit(node, Op.CONV, inputs, node.outputs, attrs)


def _same_conv_attrs(shapes: Sequence[Shape], size: int | None) -> dict[str, Any]:
    """A 2-D convolution, stride 1, padded so the output keeps the input's size (odd kernels)."""
    kh, kw = shapes[1][2:]
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"kernel {kh}x{kw} has no centre: 'same' padding needs odd sizes")
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    return {"strides": (1, 1), "dilations": (1, 1), "pads": (ph, pw, ph, pw), "group": 1}


#: `conv(x, w)`: stride 1, "same" padding, one group; [N, C, H, W] * [F, C, kh, kw] -> [N, F, H, W]
SAME_CONV = AlgebraOp("conv", Op.CONV, (4, 4), lambda a, n: (a[0][0], a[1][0], a[0][2], a[0][3]),
                      lambda a: [(a[0][1], a[1][1])], _same_conv_attrs)

#: `convb(x, w, b)`: the same with a bias [F] added to each output channel
SAME_CONV_BIAS = AlgebraOp("convb", Op.CONV, (4, 4, 1), lambda a, n: (a[0][0], a[1][0], a[0][2], a[0][3]),
                           lambda a: [(a[0][1], a[1][1]), (a[2][0], a[1][0])], _same_conv_attrs)

RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.CONV, OpKind.ANCHOR, conv_shape, conv_reference, _compute, on_output(conv_ops.schedule_conv2d),
          {"Conv": Converter(_import)}, algebra=(SAME_CONV, SAME_CONV_BIAS)),
)
