"""A 5x5 convolution of stride 2 as a 3x3 one of stride 1 over its input's phases (space to depth).

With stride 2 and padding 2, output pixel (h, w) reads input rows 2h + k - 2 for taps k = 0..4.
Split the input into its four phases x_ab[i, j] = x[2i + a, 2j + b]: row 2h + k - 2 is row h + q
of phase a = k mod 2 with q = (k - a - 2) / 2, so phase 0 is read at q = -1, 0, 1 (taps 0, 2, 4)
and phase 1 at q = -1, 0 (taps 1, 3). The convolution is then a 3x3 convolution of stride 1 and
padding 1 over an image half as large with four times the channels, the phases side by side,
whose weights are the old taps with zeros where phase 1 has no third one: the same sums, in a
convolution Winograd computes. That does 2304 multiply-adds per output pixel and channel over
256 input channels against the direct kernel's 1600 over 64, but F(4x4, 3x3) makes one
multiplication of 4 of them. The output keeps its shape and layout, so the epilogue stays where it
was and only the input is rearranged (a Reshape, a Transpose, a Reshape).

It runs on blocked convolutions after layout planning, so that the phases move whole channel
vectors, and only where Winograd takes the result: elsewhere the direct kernel would be 44% more
work for nothing. (A dilated 3x3 convolution needs no such rewrite: Winograd cuts its tiles per
phase in the kernel, `autosched.ops.winograd`.)
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild

#: the channels and phase size Winograd's fallback takes (`search_spaces/llvm/conv2d_winograd.py`)
MIN_CHANNELS = 32
MIN_PHASE = 8
#: the kernel and stride rewritten, and the padding that makes the result a "same" 3x3
KERNEL, STRIDE, PADS = (5, 5), (2, 2), (2, 2, 2, 2)


def space_to_depth(graph: Graph) -> Graph:
    """`graph` with every eligible blocked 5x5 stride-2 convolution computed over its input's phases."""
    constants = dict(graph.constants)
    nodes: list[Node] = []
    value = NewValues(graph)
    for node in graph.nodes:
        if not _eligible(graph, node):
            nodes.append(node)
            continue
        x = graph.values[node.inputs[0]]
        (n, cb, h, w, b), dt = x.shape, x.dtype
        ph, pw = h // 2, w // 2
        cut = value(f"{x.name}_phase_cols", (n, cb, ph, 2, pw, 2, b), dt)
        order = value(f"{x.name}_phase_depth", (n, 2, 2, cb, ph, pw, b), dt)
        phases = value(f"{x.name}_phase_channels", (n, 4 * cb, ph, pw, b), dt)
        taps = phase_weights(graph.constants[node.inputs[1]])
        weight = value(f"{node.inputs[1]}_phases", taps.shape, str(taps.dtype))
        constants[weight] = taps
        nodes += [
            Node(f"{node.name}/phase_cols", Op.RESHAPE, (x.name,), (cut,), {"shape": (n, cb, ph, 2, pw, 2, b)}),
            Node(f"{node.name}/phase_depth", Op.TRANSPOSE, (cut,), (order,), {"perm": (0, 3, 5, 1, 2, 4, 6)}),
            Node(f"{node.name}/phase_channels", Op.RESHAPE, (order,), (phases,), {"shape": (n, 4 * cb, ph, pw, b)}),
            Node(node.name, node.op, (phases, weight, *node.inputs[2:]), node.outputs,
                 {**node.attrs, "strides": (1, 1), "pads": (1, 1, 1, 1)}),
        ]
    return rebuild(graph, nodes, constants, value.values) if value.values else graph


def phase_weights(w: np.ndarray) -> np.ndarray:
    """(OC, C, 5, 5) taps as (OC, 4C, 3, 3): input channel (2a + b)·C + c, tap (q, r) is the old
    tap (2q + a, 2r + b), zero where that is past the kernel (q or r = 2 on phase 1)."""
    oc, c = w.shape[:2]
    out = np.zeros((oc, 2, 2, c, 3, 3), dtype=w.dtype)
    for a in range(2):
        for b_ in range(2):
            taps = w[:, :, a::2, b_::2]  # rows a, a+2, (a+4): three on phase 0, two on phase 1
            out[:, a, b_, :, :taps.shape[2], :taps.shape[3]] = taps
    return out.reshape(oc, 4 * c, 3, 3)


def _eligible(graph: Graph, node: Node) -> bool:
    """A blocked float Conv of constant 5x5 weights, one group, stride 2, no dilation, padding 2,
    on an even image whose phases and channels Winograd takes."""
    if node.op is not Op.CONV_NCHWC or node.inputs[1] not in graph.constants or not node.attrs.get("in_block"):
        return False
    x, w = graph.values[node.inputs[0]], graph.constants[node.inputs[1]]
    if len(x.shape) != 5 or w.ndim != 4 or tuple(w.shape[2:]) != KERNEL or not x.dtype.startswith("float"):
        return False
    at = node.attrs
    if (at.get("group", 1) != 1 or tuple(at.get("strides", (1, 1))) != STRIDE
            or tuple(at.get("dilations", (1, 1))) != (1, 1) or tuple(at.get("pads", (0,) * 4)) != PADS):
        return False
    (_, _, h, width, _), (oc, c) = x.shape, w.shape[:2]
    return not (h % 2 or width % 2) and min(4 * c, oc) >= MIN_CHANNELS and min(h, width) // 2 >= MIN_PHASE
