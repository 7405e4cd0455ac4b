"""A numpy evaluator with ONNX semantics for every IR operator.

It is the ground truth inside autosched: constant folding runs nodes through
it, the frontend's conformance tests hold it against ONNX's own expected
outputs, and compiled kernels are checked against it.  So it favours
exactness over speed, except for Conv and pooling, which run as strided
windows plus one matmul or reduction so whole models evaluate in seconds.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from autosched.errors import GraphError
from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.layout import convert, to_blocked, to_plain
from autosched.graph.shapes import pooled_size
from autosched.graph.views import operand_views, view_array

Kernel = Callable[[Mapping[str, Any], list[np.ndarray]], list[np.ndarray]]


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray], *, all_values: bool = False) -> dict[str, np.ndarray]:
    """Evaluate `graph`; returns its outputs, or every value with `all_values`."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for value in graph.inputs:
        if value.name not in inputs:
            raise GraphError(f"no data for graph input '{value.name}'")
        array = np.asarray(inputs[value.name])
        if tuple(array.shape) != value.shape or array.dtype.name != value.dtype:
            raise GraphError(
                f"graph input '{value.name}' expects {value.dtype}{list(value.shape)}, "
                f"got {array.dtype.name}{list(array.shape)}"
            )
        env[value.name] = array
    for node in graph.nodes:
        results = eval_node(node, [env[name] for name in node.inputs])
        for name, result in zip(node.outputs, results):
            expected = graph.values[name]
            if tuple(result.shape) != expected.shape or result.dtype.name != expected.dtype:
                raise GraphError(
                    f"node '{node.name}' ({node.op}) computed {result.dtype.name}{list(result.shape)} "
                    f"for '{name}', declared {expected.dtype}{list(expected.shape)}"
                )
            env[name] = result
    if all_values:
        return env
    return {value.name: env[value.name] for value in graph.outputs}


def eval_node(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Outputs of one node applied to concrete arrays."""
    with np.errstate(all="ignore"):
        return _KERNELS[node.op](node.attrs, list(args))[: len(node.outputs)]


def random_inputs(values: Sequence[Value], seed: int) -> dict[str, np.ndarray]:
    """Seeded test data: standard normal floats, small non-negative integers."""
    rng = np.random.default_rng(seed)
    data: dict[str, np.ndarray] = {}
    for value in values:
        dtype = np.dtype(value.dtype)
        if dtype.kind == "f":
            data[value.name] = rng.standard_normal(value.shape).astype(dtype)
        elif dtype.kind == "b":
            data[value.name] = rng.integers(0, 2, value.shape).astype(dtype)
        else:
            data[value.name] = rng.integers(0, 10, value.shape).astype(dtype)
    return data


def _contiguous(array: np.ndarray) -> np.ndarray:
    """C-ordered `array`; unlike np.ascontiguousarray, keeps 0-d arrays 0-d."""
    return array if array.flags.c_contiguous else array.copy()


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        x = args[0]
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]

    return kernel


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        a, b = args
        return [np.asarray(fn(a, b)).astype(a.dtype, copy=False)]

    return kernel


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


def _erf(x: np.ndarray) -> np.ndarray:
    flat = [math.erf(v) for v in x.astype(np.float64).ravel().tolist()]
    return np.array(flat, dtype=np.float64).reshape(x.shape)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    e = np.exp(-np.abs(x64))
    return np.where(x64 >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gelu(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0].astype(np.float64)
    if attrs["approximate"] == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    else:
        y = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return [y.astype(args[0].dtype)]


def _leaky_relu(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    return [np.where(x < 0, x * attrs["alpha"], x).astype(x.dtype)]


def _clip(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    if attrs["min"] is not None:
        x = np.maximum(x, np.asarray(attrs["min"]).astype(x.dtype))
    if attrs["max"] is not None:
        x = np.minimum(x, np.asarray(attrs["max"]).astype(x.dtype))
    return [x.astype(args[0].dtype, copy=False)]


def _hard_sigmoid(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    return [np.clip(attrs["alpha"] * x + attrs["beta"], 0, 1).astype(x.dtype)]


def _hard_swish(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    return [(x * np.clip(x / 6.0 + 0.5, 0, 1)).astype(x.dtype)]


def _cast(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [args[0].astype(attrs["to"])]


def _identity(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [args[0]]


def _channel_param(param: np.ndarray, rank: int) -> np.ndarray:
    return param.reshape((-1,) + (1,) * (rank - 2))


def _batch_norm(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias, mean, var = args
    rank = x.ndim
    inv = _channel_param(scale, rank) / np.sqrt(_channel_param(var, rank) + attrs["epsilon"])
    y = (x - _channel_param(mean, rank)) * inv + _channel_param(bias, rank)
    return [y.astype(x.dtype)]


def _windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """Read-only view [N, C, *out, *kernel] of every sliding window of `x`."""
    spatial = x.shape[2:]
    out = [(spatial[i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(len(kernel))]
    step = x.strides[2:]
    return as_strided(
        x,
        shape=(*x.shape[:2], *out, *kernel),
        strides=(
            *x.strides[:2],
            *(step[i] * strides[i] for i in range(len(kernel))),
            *(step[i] * dilations[i] for i in range(len(kernel))),
        ),
        writeable=False,
    )


def _pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], fill: Any) -> np.ndarray:
    widths = [(0, 0), (0, 0), *zip(begin, end)]
    return np.pad(x, widths, constant_values=fill)


def _conv(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x, w = args[0], args[1]
    rank = x.ndim - 2
    pads = attrs["pads"]
    group = attrs["group"]
    padded = _pad_spatial(x, pads[:rank], pads[rank:], 0)
    windows = _windows(padded, w.shape[2:], attrs["strides"], attrs["dilations"])
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
        y = y + _channel_param(args[2], x.ndim)
    return [_contiguous(y).astype(x.dtype, copy=False)]


def _conv_nchwc(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    """Conv on a blocked (or, with in_block 0, plain) input, writing the blocked output."""
    x = to_plain(args[0], attrs["in_block"])
    return [to_blocked(_conv(attrs, [x, *args[1:]])[0], attrs["out_block"])]


def _blocked_pool(pool: Kernel) -> Kernel:
    """A pool that layout planning left in channel blocks (attribute `block`, 0 or absent: plain)."""
    def kernel(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        block = attrs.get("block", 0)
        return [to_blocked(pool(attrs, [to_plain(args[0], block)])[0], block)]
    return kernel


def _layout_transform(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [convert(args[0], attrs["src_block"], attrs["dst_block"])]


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
    padded = _pad_spatial(x, pads[:rank], end, fill)
    return padded, explicit, out


def _crop(windows: np.ndarray, out: Sequence[int]) -> np.ndarray:
    return windows[(slice(None), slice(None), *(slice(0, o) for o in out))]


def _max_pool(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded, _, out = _pool_input(attrs, x, lowest)
    windows = _crop(_windows(padded, attrs["kernel_shape"], attrs["strides"], attrs["dilations"]), out)
    rank = x.ndim - 2
    return [windows.max(axis=tuple(range(-rank, 0))).astype(x.dtype)]


def _average_pool(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    rank = x.ndim - 2
    kernel, strides, dilations, pads = attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"]
    padded, explicit, out = _pool_input(attrs, x.astype(np.float64), 0.0)
    axes = tuple(range(-rank, 0))
    sums = _crop(_windows(padded, kernel, strides, dilations), out).sum(axis=axes)
    # Which padded positions count toward the divisor: real pixels, plus the
    # explicit pads when count_include_pad is set; ceil-mode overhang never.
    mask = np.zeros((1, 1, *padded.shape[2:]))
    counted = tuple(
        slice(0, explicit[i]) if attrs["count_include_pad"] else slice(pads[i], pads[i] + x.shape[2 + i])
        for i in range(rank)
    )
    mask[(0, 0, *counted)] = 1.0
    counts = _crop(_windows(mask, kernel, strides, dilations), out).sum(axis=axes)
    return [(sums / counts).astype(x.dtype)]


def _softmax(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    shifted = x.astype(np.float64) - x.max(axis=attrs["axis"], keepdims=True)
    e = np.exp(shifted)
    return [(e / e.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype)]


def _layer_norm(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    axes = tuple(range(attrs["axis"], x.ndim))
    x32 = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    mean = x32.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(((x32 - mean) ** 2).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    y = (x32 - mean) * inv_std * args[1]
    if len(args) == 3:
        y = y + args[2]
    return [y.astype(x.dtype), mean.astype(np.float32), inv_std.astype(np.float32)]


def _reduce(fn: Callable[..., np.ndarray]) -> Kernel:
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


def _reshape(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [args[0].reshape(attrs["shape"])]


def _transpose(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [_contiguous(np.transpose(args[0], attrs["perm"]))]


def _concat(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate(args, axis=attrs["axis"])]


def _split(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    bounds = np.cumsum(attrs["split"])[:-1]
    return [_contiguous(part) for part in np.split(args[0], bounds, axis=attrs["axis"])]


def _slice(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    index = tuple(
        slice(start, end if end >= 0 else None, step)
        for start, end, step in zip(attrs["starts"], attrs["ends"], attrs["steps"])
    )
    return [_contiguous(args[0][index])]


def _gather(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    data, indices = args
    return [np.take(data, indices.astype(np.int64), axis=attrs["axis"])]


def _pad(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    rank = x.ndim
    pads = attrs["pads"]
    crop = tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[rank + i])) for i in range(rank))
    x = x[crop]
    widths = [(max(0, pads[i]), max(0, pads[rank + i])) for i in range(rank)]
    mode = attrs["mode"]
    if mode == "constant":
        y = np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))
    else:
        y = np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])
    return [y]


def _gemm(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    a = args[0].T if attrs["transA"] else args[0]
    b = args[1].T if attrs["transB"] else args[1]
    y = attrs["alpha"] * np.matmul(a, b)
    if len(args) == 3:
        y = y + attrs["beta"] * args[2]
    return [np.asarray(y).astype(args[0].dtype, copy=False)]


def _matmul(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    view_a, view_b = operand_views(attrs)
    return [np.matmul(view_array(args[0], view_a), view_array(args[1], view_b))]


_KERNELS: dict[Op, Kernel] = {
    Op.CONV: _conv,
    Op.GEMM: _gemm,
    Op.MATMUL: _matmul,
    Op.ADD: _binary(np.add),
    Op.SUB: _binary(np.subtract),
    Op.MUL: _binary(np.multiply),
    Op.DIV: _binary(_div),
    Op.POW: _binary(_pow),
    Op.SQRT: _unary(np.sqrt),
    Op.ERF: _unary(_erf),
    Op.EXP: _unary(np.exp),
    Op.LOG: _unary(np.log),
    Op.TANH: _unary(np.tanh),
    Op.SIGMOID: _unary(_sigmoid),
    Op.RELU: _unary(lambda x: np.maximum(x, 0)),
    Op.LEAKY_RELU: _leaky_relu,
    Op.CLIP: _clip,
    Op.HARD_SIGMOID: _hard_sigmoid,
    Op.HARD_SWISH: _hard_swish,
    Op.GELU: _gelu,
    Op.CAST: _cast,
    Op.IDENTITY: _identity,
    Op.DROPOUT: _identity,
    Op.BATCH_NORM: _batch_norm,
    Op.MAX_POOL: _blocked_pool(_max_pool),
    Op.AVERAGE_POOL: _blocked_pool(_average_pool),
    Op.SOFTMAX: _softmax,
    Op.LAYER_NORM: _layer_norm,
    Op.REDUCE_MEAN: _reduce(np.mean),
    Op.REDUCE_SUM: _reduce(np.sum),
    Op.REDUCE_MAX: _reduce(_max),
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
