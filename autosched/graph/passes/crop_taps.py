"""A convolution's kernel taps that read only padding, dropped.

Tap k of a kernel of dilation d reads input row r·s − p + k·d for output row r. When that row
is padding for every output row, the tap only ever multiplies zeros. DeepLab's ASPP applies
3x3 kernels of dilation 12, 24 and 36 with "same" padding to maps of 21x21 (a 321x321 image at
output stride 16) or 33x33: at dilation 24 and 36 every tap but the centre one reads padding, so
the convolution is a 1x1 one, yet computed whole it does 9 times the work over an input padded
to 93x93 (at 960 channels, 33 MB). Dropping the dead taps at the kernel's edges (and the
padding they alone read) leaves the same sums: the convolution is exact, smaller, and a 1x1
convolution where only the centre remains. Taps that read the image for some output rows only
stay.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild


def crop_taps(graph: Graph) -> Graph:
    """`graph` with every 2-D Conv of constant weights cut to its live taps (`_live_window`)."""
    nodes: list[Node] = []
    constants = dict(graph.constants)
    value = NewValues(graph)
    for node in graph.nodes:
        window = _live_window(graph, node)
        if window is None:
            nodes.append(node)
            continue
        (h0, h1), (w0, w1) = window
        w = constants[node.inputs[1]]
        kh, kw = w.shape[2:]
        cropped = np.ascontiguousarray(w[:, :, h0:h1 + 1, w0:w1 + 1])
        name = value(f"{node.inputs[1]}_live_taps", cropped.shape, w.dtype.name)
        constants[name] = cropped
        at = node.attrs
        (dh, dw), (top, left, bottom, right) = at.get("dilations", (1, 1)), at.get("pads", (0, 0, 0, 0))
        pads = (top - h0 * dh, left - w0 * dw, bottom - (kh - 1 - h1) * dh, right - (kw - 1 - w1) * dw)
        dilations = (dh if h1 > h0 else 1, dw if w1 > w0 else 1)  # one tap left: its spacing means nothing
        attrs = {**at, "pads": pads, "dilations": dilations}
        if "kernel_shape" in attrs:
            attrs["kernel_shape"] = tuple(cropped.shape[2:])
        nodes.append(Node(node.name, node.op, (node.inputs[0], name, *node.inputs[2:]), node.outputs, attrs))
    return rebuild(graph, nodes, constants, value.values) if value.values else graph


def _live_window(graph: Graph, node: Node) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The first and last live tap along each axis of a 2-D Conv of constant weights, or None
    where every tap is live, where none is (the output is the bias alone, left as it is), or
    where the cropped kernel would need negative padding (input rows no tap reads, which a
    strided convolution can leave at the image's edge)."""
    if node.op is not Op.CONV or node.inputs[1] not in graph.constants:
        return None
    x, y, w = graph.values[node.inputs[0]], graph.values[node.outputs[0]], graph.constants[node.inputs[1]]
    if len(x.shape) != 4 or w.ndim != 4:
        return None
    at = node.attrs
    strides, dilations, pads = at.get("strides", (1, 1)), at.get("dilations", (1, 1)), at.get("pads", (0, 0, 0, 0))
    window = []
    for axis in range(2):
        taps = [k for k in range(w.shape[2 + axis])
                if _reads_image(x.shape[2 + axis], y.shape[2 + axis], strides[axis], pads[axis] - k * dilations[axis])]
        if not taps:
            return None
        window.append((taps[0], taps[-1]))
    (h0, h1), (w0, w1) = window
    (kh, kw), (dh, dw) = w.shape[2:], dilations
    if (h0, h1, w0, w1) == (0, kh - 1, 0, kw - 1):
        return None
    if min(pads[0] - h0 * dh, pads[1] - w0 * dw, pads[2] - (kh - 1 - h1) * dh, pads[3] - (kw - 1 - w1) * dw) < 0:
        return None
    return (h0, h1), (w0, w1)


def _reads_image(size: int, out: int, stride: int, offset: int) -> bool:
    """Whether row r·stride − offset lies in [0, size) for some output row r < out."""
    first = max(0, -(-offset // stride))  # the first r whose row is not above the image
    return first < out and first * stride - offset < size
