"""Static shape and dtype inference for every IR operator.

The frontend needs a shape for every value it creates, and so do passes that
build new nodes; both call `infer`.  Inputs that disagree with an operator
(a Conv whose channels do not match its weights, operands that do not
broadcast) raise GraphError naming the node.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from autosched.errors import GraphError
from autosched.graph.layout import blocked_shape, plain_shape
from autosched.graph.ir import OP_KIND, Node, Op, OpKind, Value
from autosched.graph.views import operand_views, view_shape

Shape = tuple[int, ...]
ShapeFn = Callable[[Node, Sequence[Value]], list[tuple[Shape, str]]]


def infer(node: Node, inputs: Sequence[Value]) -> list[Value]:
    """Output values of `node` given its input values."""
    try:
        results = _SHAPE_FNS[node.op](node, inputs)
    except (ValueError, IndexError, KeyError) as exc:
        raise GraphError(f"node '{node.name}' ({node.op}): {exc}") from exc
    if len(results) != len(node.outputs):
        raise GraphError(f"node '{node.name}' ({node.op}) has {len(node.outputs)} outputs, expected {len(results)}")
    return [Value(name, tuple(int(d) for d in shape), dtype) for name, (shape, dtype) in zip(node.outputs, results)]


def pooled_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int, ceil_mode: bool) -> int:
    """Output length of a sliding window along one axis (ONNX Conv/Pool rule).

    In ceil mode a last window that would start inside the end padding is
    dropped, as ONNX specifies.
    """
    span = dilation * (kernel - 1) + 1
    exact = (size + pad_begin + pad_end - span) / stride + 1
    if not ceil_mode:
        return math.floor(exact)
    out = math.ceil(exact)
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _same(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    return [(inputs[0].shape, inputs[0].dtype)]


def _broadcast(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    if node.op is not Op.POW and len({v.dtype for v in inputs}) > 1:
        raise ValueError(f"operand dtypes differ: {[v.dtype for v in inputs]}")
    shape = np.broadcast_shapes(*(v.shape for v in inputs))
    return [(shape, inputs[0].dtype)]


def _cast(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    return [(inputs[0].shape, node.attrs["to"])]


def _batch_norm(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    for param in inputs[1:]:
        if param.shape != (x.shape[1],):
            raise ValueError(f"parameter '{param.name}' has shape {list(param.shape)}, expected [{x.shape[1]}]")
    return [(x.shape, x.dtype)]


def _windows(node: Node, spatial: Sequence[int], kernel: Sequence[int], ceil_mode: bool) -> list[int]:
    attrs = node.attrs
    rank = len(spatial)
    if len(kernel) != rank or len(attrs["pads"]) != 2 * rank:
        raise ValueError(f"kernel {list(kernel)} / pads {list(attrs['pads'])} do not fit {rank} spatial dims")
    out = [
        pooled_size(
            spatial[i], kernel[i], attrs["strides"][i], attrs["dilations"][i],
            attrs["pads"][i], attrs["pads"][rank + i], ceil_mode,
        )
        for i in range(rank)
    ]
    if min(out, default=1) < 1:
        raise ValueError(f"window {list(kernel)} does not fit input {list(spatial)}")
    return out


def _conv(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x, w = inputs[0], inputs[1]
    group = node.attrs["group"]
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise ValueError(f"input {list(x.shape)} and weight {list(w.shape)} ranks differ")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ValueError(f"input channels {x.shape[1]} do not match weight {list(w.shape)} with group {group}")
    if len(inputs) == 3 and inputs[2].shape != (w.shape[0],):
        raise ValueError(f"bias has shape {list(inputs[2].shape)}, expected [{w.shape[0]}]")
    spatial = _windows(node, x.shape[2:], w.shape[2:], ceil_mode=False)
    return [((x.shape[0], w.shape[0], *spatial), x.dtype)]


def _pool(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    block = x.shape[-1:] if node.attrs.get("block") else ()  # a pool left in channel blocks
    spatial = _windows(node, x.shape[2:len(x.shape) - len(block)], node.attrs["kernel_shape"],
                       bool(node.attrs["ceil_mode"]))
    return [((*x.shape[:2], *spatial, *block), x.dtype)]


def _conv_nchwc(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = Value(inputs[0].name, plain_shape(inputs[0].shape, node.attrs["in_block"]), inputs[0].dtype)
    ((shape, dtype),) = _conv(node, [x, *inputs[1:]])
    return [(blocked_shape(shape, node.attrs["out_block"]), dtype)]


def _layout_transform(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    return [(blocked_shape(plain_shape(x.shape, node.attrs["src_block"]), node.attrs["dst_block"]), x.dtype)]


def _gemm(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    a, b = inputs[0].shape, inputs[1].shape
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"operands must be matrices, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if node.attrs["transA"] else a
    k2, n = (b[1], b[0]) if node.attrs["transB"] else b
    if k != k2:
        raise ValueError(f"inner dimensions differ: {k} and {k2}")
    if len(inputs) == 3:
        if np.broadcast_shapes(inputs[2].shape, (m, n)) != (m, n):
            raise ValueError(f"bias {list(inputs[2].shape)} does not broadcast to [{m}, {n}]")
    return [((m, n), inputs[0].dtype)]


def _matmul(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    view_a, view_b = operand_views(node.attrs)
    a, b = view_shape(inputs[0].shape, view_a), view_shape(inputs[1].shape, view_b)
    if not a or not b:
        raise ValueError("operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {list(a)} @ {list(b)}")
    shape = (*np.broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return [(shape, inputs[0].dtype)]


def _layer_norm(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axis = node.attrs["axis"]
    for param in inputs[1:]:
        np.broadcast_shapes(param.shape, x.shape[axis:])
    stat_shape = (*x.shape[:axis], *([1] * (len(x.shape) - axis)))
    return [(x.shape, x.dtype)] + [(stat_shape, "float32")] * (len(node.outputs) - 1)


def _reduce(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axes = set(node.attrs["axes"])
    if node.attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [(shape, x.dtype)]


def _reshape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    shape = tuple(node.attrs["shape"])
    if math.prod(shape) != inputs[0].size:
        raise ValueError(f"cannot reshape {list(inputs[0].shape)} to {list(shape)}")
    return [(shape, inputs[0].dtype)]


def _transpose(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    perm = node.attrs["perm"]
    if sorted(perm) != list(range(len(inputs[0].shape))):
        raise ValueError(f"perm {list(perm)} is not a permutation of rank {len(inputs[0].shape)}")
    return [(tuple(inputs[0].shape[p] for p in perm), inputs[0].dtype)]


def _concat(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    axis = node.attrs["axis"]
    first = inputs[0].shape
    for v in inputs[1:]:
        if len(v.shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(v.shape, first)) if i != axis):
            raise ValueError(f"shapes {[list(v.shape) for v in inputs]} differ off axis {axis}")
    return [((*first[:axis], sum(v.shape[axis] for v in inputs), *first[axis + 1:]), inputs[0].dtype)]


def _split(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axis, sizes = node.attrs["axis"], node.attrs["split"]
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"split {list(sizes)} does not add up to dimension {x.shape[axis]}")
    return [((*x.shape[:axis], s, *x.shape[axis + 1:]), x.dtype) for s in sizes]


def slice_length(start: int, end: int, step: int) -> int:
    """Elements selected by a normalized (start, end, step) triple."""
    return max(0, math.ceil((end - start) / step))


def _slice(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    attrs = node.attrs
    shape = tuple(slice_length(s, e, t) for s, e, t in zip(attrs["starts"], attrs["ends"], attrs["steps"]))
    if len(shape) != len(inputs[0].shape):
        raise ValueError("slice bounds do not cover every axis")
    return [(shape, inputs[0].dtype)]


def _gather(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    data, indices = inputs
    axis = node.attrs["axis"]
    return [((*data.shape[:axis], *indices.shape, *data.shape[axis + 1:]), data.dtype)]


def _pad(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    pads = node.attrs["pads"]
    rank = len(x.shape)
    shape = tuple(x.shape[i] + pads[i] + pads[rank + i] for i in range(rank))
    if min(shape, default=0) < 0:
        raise ValueError(f"pads {list(pads)} crop input {list(x.shape)} below zero")
    return [(shape, x.dtype)]


_SHAPE_FNS: dict[Op, ShapeFn] = {
    **{op: _same for op, kind in OP_KIND.items() if kind is OpKind.ELEMWISE},
    **{op: _broadcast for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW)},
    Op.CAST: _cast,
    Op.BATCH_NORM: _batch_norm,
    Op.CONV: _conv,
    Op.GEMM: _gemm,
    Op.MATMUL: _matmul,
    Op.MAX_POOL: _pool,
    Op.AVERAGE_POOL: _pool,
    Op.SOFTMAX: _same,
    Op.LAYER_NORM: _layer_norm,
    Op.REDUCE_MEAN: _reduce,
    Op.REDUCE_SUM: _reduce,
    Op.REDUCE_MAX: _reduce,
    Op.RESHAPE: _reshape,
    Op.TRANSPOSE: _transpose,
    Op.CONCAT: _concat,
    Op.SPLIT: _split,
    Op.SLICE: _slice,
    Op.GATHER: _gather,
    Op.PAD: _pad,
    Op.CONV_NCHWC: _conv_nchwc,
    Op.LAYOUT_TRANSFORM: _layout_transform,
}
