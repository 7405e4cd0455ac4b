"""A convolution's kernel taps that read only padding, dropped: over the whole output, or per
region of the output where few taps read the image.

Tap k of a kernel of dilation d reads input row r·s − p + k·d for output row r. When that row
is padding for every output row, the tap only ever multiplies zeros. DeepLab's ASPP applies
3x3 kernels of dilation 12, 24 and 36 with "same" padding to maps of 21x21 (a 321x321 image at
output stride 16) or 33x33: at dilation 24 and 36 on 21x21 every tap but the centre one reads
padding, so the convolution is a 1x1 one, yet computed whole it does 9 times the work over an
input padded to 93x93 (at 960 channels, 33 MB). Dropping the dead taps at the kernel's edges
(and the padding they alone read) leaves the same sums.

At dilation 12 on 21x21 every tap reads the image for some output rows, but not for most: the
rows that read the same taps form bands (rows 0-8 read taps 1-2, rows 9-11 tap 1, rows 12-20
taps 0-1), as PET's regions of outputs with the same summation interval do. Where the taps the
outputs read are at most `MAX_LIVE_SHARE` of the work of the whole kernel, the convolution is cut
into one convolution per region (a band of rows by a band of columns; at most `MAX_REGIONS`), each over the slice of
the input its taps read, without padding, and the regions are concatenated back: the
multiply-adds done are the live ones only. An activation that alone reads the convolution (a
Relu, or an op whose other operands are constants per channel) is applied to each region before
the concat, where fusion puts it in the region's kernel, rather than once over the concatenated
map in a kernel of its own.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: cut into regions where the live taps' work is at most this share of the (cropped) kernel's:
#: a 3x3 kernel of "same" padding loses 1-2% at the borders of a 56x56 map and 18% on 7x7
#: (not worth 9 kernels); DeepLab's dilation 12 keeps 38% on 21x21 and 57% on 33x33
MAX_LIVE_SHARE = 0.6
#: regions a convolution is cut into at most: DeepLab's dilated 3x3 kernels make 3 bands a side;
#: ConvNeXt's 7x7 depthwise kernels (padding 3) on its last 7x7 maps read 57% live taps, but in 7
#: bands a side, and 49 region kernels with their slices and concats cost more calls than the
#: work they save
MAX_REGIONS = 9


class Band(NamedTuple):
    """Output rows [start, stop) along one axis, which read the image through taps first..last
    (none where last < first: those rows read only padding)."""
    start: int
    stop: int
    first: int
    last: int

    @property
    def taps(self) -> int:
        return max(0, self.last - self.first + 1)


def crop_taps(graph: Graph) -> Graph:
    """`graph` with every 2-D Conv of constant weights cut to its live taps (`_bands`)."""
    nodes: list[Node] = []
    constants = dict(graph.constants)
    value = NewValues(graph)
    moved: set[str] = set()  # activations applied per region instead
    for node in graph.nodes:
        if node.name in moved:
            continue
        bands = _bands(graph, node)
        if bands is None:
            nodes.append(node)
        elif (_live_share(bands) <= MAX_LIVE_SHARE and 1 < len(bands[0]) * len(bands[1]) <= MAX_REGIONS
              and all(b.taps for axis in bands for b in axis)):
            activation = _activation(graph, node)
            nodes += _regions(graph, node, bands, constants, value, activation)
            moved.update([activation.name] if activation else [])
        elif (window := _window(node, bands, constants[node.inputs[1]].shape[2:])) is not None:
            nodes.append(_cropped(node, window, constants, value))
        else:
            nodes.append(node)
    return rebuild(graph, nodes, constants, value.values) if value.values else graph


def _bands(graph: Graph, node: Node) -> tuple[list[Band], list[Band]] | None:
    """The bands of output rows and of columns of a 2-D Conv of constant weights, or None for
    other nodes and where no output reads the image (the bias alone: left as it is)."""
    if node.op is not Op.CONV or node.inputs[1] not in graph.constants:
        return None
    x, y, w = graph.values[node.inputs[0]], graph.values[node.outputs[0]], graph.constants[node.inputs[1]]
    if len(x.shape) != 4 or w.ndim != 4:
        return None
    at = node.attrs
    strides, dilations, pads = at.get("strides", (1, 1)), at.get("dilations", (1, 1)), at.get("pads", (0, 0, 0, 0))
    out = []
    for axis in range(2):
        size, k, s, d, p = x.shape[2 + axis], w.shape[2 + axis], strides[axis], dilations[axis], pads[axis]
        bands: list[Band] = []
        for r in range(y.shape[2 + axis]):
            taps = [t for t in range(k) if 0 <= r * s - p + t * d < size] or [0, -1]
            if bands and (bands[-1].first, bands[-1].last) == (taps[0], taps[-1]):
                bands[-1] = bands[-1]._replace(stop=r + 1)
            else:
                bands.append(Band(r, r + 1, taps[0], taps[-1]))
        if not any(b.taps for b in bands):
            return None
        out.append(bands)
    return out[0], out[1]


def _window(node: Node, bands: tuple[list[Band], list[Band]], kernel: tuple[int, ...]
            ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The taps any output reads along each axis, where that drops some, and the cropped kernel
    needs no negative padding (input rows no tap reads, which a strided convolution can leave
    at the image's edge)."""
    (h0, h1), (w0, w1) = _union(bands[0]), _union(bands[1])
    (kh, kw), (dh, dw) = kernel, node.attrs.get("dilations", (1, 1))
    pads = node.attrs.get("pads", (0, 0, 0, 0))
    if (h0, h1, w0, w1) == (0, kh - 1, 0, kw - 1):
        return None
    if min(pads[0] - h0 * dh, pads[1] - w0 * dw, pads[2] - (kh - 1 - h1) * dh, pads[3] - (kw - 1 - w1) * dw) < 0:
        return None
    return (h0, h1), (w0, w1)


def _union(axis: list[Band]) -> tuple[int, int]:
    """The first and last tap any output of the axis reads."""
    live = [b for b in axis if b.taps]
    return min(b.first for b in live), max(b.last for b in live)


def _live_share(bands: tuple[list[Band], list[Band]]) -> float:
    """The live taps' multiply-adds over those of the kernel cropped to the taps any output reads."""
    share = 1.0
    for axis in bands:
        first, last = _union(axis)
        share *= sum((b.stop - b.start) * b.taps for b in axis) / (axis[-1].stop * (last - first + 1))
    return share


def _activation(graph: Graph, conv: Node) -> Node | None:
    """The elementwise op that alone reads `conv`'s output, where it applies to a region of the
    map as to the whole: its other operands are constants that do not vary over the image."""
    out = conv.outputs[0]
    readers = [n for n in graph.nodes if out in n.inputs]
    if len(readers) != 1 or any(v.name == out for v in graph.outputs):
        return None
    act = readers[0]
    if kind_of(act.op) is not OpKind.ELEMWISE or len(act.outputs) != 1 or act.inputs[0] != out:
        return None
    rank = len(graph.values[out].shape)
    for name in act.inputs[1:]:
        shape = graph.values[name].shape
        if name not in graph.constants or len(shape) > rank or any(d != 1 for d in shape[-2:] if len(shape) > 1):
            return None
        if len(shape) == 1 and shape[0] != 1:  # a vector broadcasts along the width
            return None
    return act


def _taps(node: Node, rows: tuple[int, int], cols: tuple[int, int], constants: dict[str, np.ndarray],
          value: NewValues) -> str:
    """The constant holding the weights' taps rows × cols (inclusive ranges), made once."""
    w = constants[node.inputs[1]]
    cropped = np.ascontiguousarray(w[:, :, rows[0]:rows[1] + 1, cols[0]:cols[1] + 1])
    name = f"{node.inputs[1]}_taps_{rows[0]}_{rows[1]}_{cols[0]}_{cols[1]}"
    if name not in constants:
        name = value(name, cropped.shape, w.dtype.name)
        constants[name] = cropped
    return name


def _cropped(node: Node, window: tuple[tuple[int, int], tuple[int, int]], constants: dict[str, np.ndarray],
             value: NewValues) -> Node:
    """`node` with only the taps of `window`, and the padding only the dropped taps read dropped too."""
    (h0, h1), (w0, w1) = window
    kh, kw = constants[node.inputs[1]].shape[2:]
    weights = _taps(node, (h0, h1), (w0, w1), constants, value)
    at = node.attrs
    (dh, dw), (top, left, bottom, right) = at.get("dilations", (1, 1)), at.get("pads", (0, 0, 0, 0))
    pads = (top - h0 * dh, left - w0 * dw, bottom - (kh - 1 - h1) * dh, right - (kw - 1 - w1) * dw)
    return Node(node.name, node.op, (node.inputs[0], weights, *node.inputs[2:]), node.outputs,
                _attrs(at, (h1 - h0 + 1, w1 - w0 + 1), pads))


def _attrs(at: Mapping[str, Any], kernel: tuple[int, int], pads: tuple[int, ...]) -> dict[str, Any]:
    """`at` for a kernel of `kernel` taps with `pads`: one tap along an axis has no dilation."""
    dilations = tuple(d if k > 1 else 1 for d, k in zip(at.get("dilations", (1, 1)), kernel))
    out = {**at, "pads": pads, "dilations": dilations}
    if "kernel_shape" in out:
        out["kernel_shape"] = kernel
    return out


def _regions(graph: Graph, node: Node, bands: tuple[list[Band], list[Band]], constants: dict[str, np.ndarray],
             value: NewValues, activation: Node | None) -> list[Node]:
    """One unpadded convolution per region over the input slice it reads, each followed by
    `activation` where there is one, concatenated back: the regions of a band of rows along
    the width, then the bands along the height (into the activation's output)."""
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    result = activation.outputs[0] if activation else node.outputs[0]
    n, c = x.shape[:2]
    oc, dt = y.shape[1], y.dtype
    at = node.attrs
    (sh, sw), (dh, dw), pads = at.get("strides", (1, 1)), at.get("dilations", (1, 1)), at.get("pads", (0, 0, 0, 0))
    nodes: list[Node] = []

    def joined(parts: list[str], axis: int, shape: tuple[int, ...], name: str, out: str | None = None) -> str:
        if len(parts) == 1 and out is None:
            return parts[0]
        out = out or value(f"{node.outputs[0]}_{name}", shape, dt)
        nodes.append(Node(f"{node.name}/{name}", Op.CONCAT, tuple(parts), (out,), {"axis": axis}))
        return out

    one_band = len(bands[0]) == 1  # then its regions' concat is the output
    rows = []
    for i, rb in enumerate(bands[0]):
        parts = []
        for j, cb in enumerate(bands[1]):
            top, left = rb.start * sh - pads[0] + rb.first * dh, cb.start * sw - pads[1] + cb.first * dw
            bottom = (rb.stop - 1) * sh - pads[0] + rb.last * dh + 1
            right = (cb.stop - 1) * sw - pads[1] + cb.last * dw + 1
            src = node.inputs[0]
            if (top, left, bottom, right) != (0, 0, *x.shape[2:]):
                src = value(f"{node.inputs[0]}_{node.name}_region{i}_{j}", (n, c, bottom - top, right - left), x.dtype)
                nodes.append(Node(f"{node.name}/region{i}_{j}/slice", Op.SLICE, (node.inputs[0],), (src,),
                                  {"starts": (0, 0, top, left), "ends": (n, c, bottom, right), "steps": (1, 1, 1, 1)}))
            weights = _taps(node, (rb.first, rb.last), (cb.first, cb.last), constants, value)
            shape = (n, oc, rb.stop - rb.start, cb.stop - cb.start)
            part = value(f"{node.outputs[0]}_region{i}_{j}", shape, dt)
            kernel = (rb.last - rb.first + 1, cb.last - cb.first + 1)
            nodes.append(Node(f"{node.name}/region{i}_{j}", node.op, (src, weights, *node.inputs[2:]), (part,),
                              _attrs(at, kernel, (0, 0, 0, 0))))
            if activation:
                conv_part, part = part, value(f"{result}_region{i}_{j}", shape, dt)
                nodes.append(Node(f"{activation.name}/region{i}_{j}", activation.op,
                                  (conv_part, *activation.inputs[1:]), (part,), activation.attrs))
            parts.append(part)
        rows.append(joined(parts, 3, (n, oc, rb.stop - rb.start, y.shape[3]), f"band{i}",
                           result if one_band else None))
    if len(rows) > 1:
        joined(rows, 2, y.shape, "bands", result)
    return nodes
