"""Sliding windows, shared by convolution and pooling: their ONNX attributes, output sizes and
the strided numpy view both references compute over."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from autosched.frontend.context import OnnxNode
from autosched.graph.ir import Node


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


def window_attrs(node: OnnxNode, spatial: Sequence[int], kernel: Sequence[int]) -> dict[str, object]:
    """kernel_shape/strides/dilations/pads with auto_pad turned into explicit pads."""
    rank = len(spatial)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = list(node.attr("pads", [0] * 2 * rank))
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise node.error(f"kernel/strides/dilations/pads do not match {rank} spatial dimensions")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(rank):
            out = math.ceil(spatial[i] / strides[i])
            total = max(0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - spatial[i])
            small, large = total // 2, total - total // 2
            pads[i], pads[rank + i] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        pads = [0] * 2 * rank
    elif auto_pad != "NOTSET":
        raise node.error(f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    return {
        "kernel_shape": tuple(int(k) for k in kernel),
        "strides": tuple(strides),
        "dilations": tuple(dilations),
        "pads": tuple(pads),
    }


def output_spatial(node: Node, spatial: Sequence[int], kernel: Sequence[int], ceil_mode: bool) -> list[int]:
    """Output spatial sizes of a windowed node; raises ValueError when the window does not fit."""
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


def sliding_windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
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


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], fill: Any) -> np.ndarray:
    widths = [(0, 0), (0, 0), *zip(begin, end)]
    return np.pad(x, widths, constant_values=fill)


def channel_param(param: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast against an [N, C, ...] tensor of `rank`."""
    return param.reshape((-1,) + (1,) * (rank - 2))
