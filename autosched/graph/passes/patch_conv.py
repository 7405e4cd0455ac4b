"""A convolution whose kernel tiles its input (a ViT's patch embedding) as a MatMul over patches.

With stride equal to the kernel, no padding and no dilation, the windows of a Conv do not
overlap: each output pixel is one k×k patch of every input channel dotted with each filter.
Cutting the image into those patches is then a pure rearrangement (Reshape, Transpose,
Reshape), and the convolution a plain product [pixels, C·k·k] × [C·k·k, filters]. A ViT-S/16's
patch embedding (3 channels, 16×16 kernel) ran at 94 GFLOP/s as a tuned direct convolution,
whose templates block channels that here number three, against 150 for a tuned MatMul of the
same size; as a MatMul it also leaves no channel-blocked layout to convert back.
"""
from __future__ import annotations

import math

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild


def patch_conv(graph: Graph) -> Graph:
    """`graph` with every patch-embedding Conv (`_patches` says which) rewritten as a MatMul."""
    nodes: list[Node] = []
    constants = dict(graph.constants)
    value = NewValues(graph)

    for node in graph.nodes:
        kernel = _patches(graph, node)
        if kernel is None:
            nodes.append(node)
            continue
        (kh, kw), x, w = kernel, graph.values[node.inputs[0]], constants[node.inputs[1]]
        (n, c, h, width), filters, dt = x.shape, w.shape[0], x.dtype
        rows, cols, depth = h // kh, width // kw, c * kh * kw
        cut = value(f"{x.name}_patch_rows", (n, c, rows, kh, cols, kw), dt)
        moved = value(f"{x.name}_patch_order", (n, rows, cols, c, kh, kw), dt)
        flat = value(f"{x.name}_patches", (n * rows * cols, depth), dt)
        weight = value(f"{node.inputs[1]}_patch_matrix", (depth, filters), w.dtype.name)
        constants[weight] = np.ascontiguousarray(w.reshape(filters, depth).T)
        product = value(f"{node.outputs[0]}_patch_product", (n * rows * cols, filters), dt)
        pixels = value(f"{node.outputs[0]}_patch_pixels", (n, rows, cols, filters), dt)
        nodes += [
            Node(f"{node.name}/patch_rows", Op.RESHAPE, (x.name,), (cut,), {"shape": (n, c, rows, kh, cols, kw)}),
            Node(f"{node.name}/patch_order", Op.TRANSPOSE, (cut,), (moved,), {"perm": (0, 2, 4, 1, 3, 5)}),
            Node(f"{node.name}/patches", Op.RESHAPE, (moved,), (flat,), {"shape": (n * rows * cols, depth)}),
            Node(node.name, Op.MATMUL, (flat, weight), (product,)),
        ]
        if len(node.inputs) == 3:  # the bias, an Add the MatMul's epilogue takes
            biased = value(f"{node.outputs[0]}_patch_biased", (n * rows * cols, filters), dt)
            nodes.append(Node(f"{node.name}/bias", Op.ADD, (product, node.inputs[2]), (biased,)))
            product = biased
        nodes += [
            Node(f"{node.name}/patch_pixels", Op.RESHAPE, (product,), (pixels,), {"shape": (n, rows, cols, filters)}),
            Node(f"{node.name}/patch_channels", Op.TRANSPOSE, (pixels,), node.outputs, {"perm": (0, 3, 1, 2)}),
        ]
    return rebuild(graph, nodes, constants, value.values) if value.values else graph


def _patches(graph: Graph, node: Node) -> tuple[int, int] | None:
    """(kh, kw) for a 2-D float Conv of constant weights, one group, stride = kernel > 1×1, no
    padding or dilation, whose kernel divides the image: one whose windows tile the input."""
    if node.op is not Op.CONV or node.inputs[1] not in graph.constants:
        return None
    if len(node.inputs) == 3 and node.inputs[2] not in graph.constants:
        return None
    x, w = graph.values[node.inputs[0]], graph.constants[node.inputs[1]]
    if len(x.shape) != 4 or w.ndim != 4 or not x.dtype.startswith("float"):
        return None
    kh, kw = w.shape[2:]
    at = node.attrs
    if (at.get("group", 1) != 1 or tuple(at.get("strides", (1, 1))) != (kh, kw) or any(at.get("pads", (0,) * 4))
            or any(d != 1 for d in at.get("dilations", (1, 1))) or math.prod((kh, kw)) == 1):
        return None
    return (kh, kw) if x.shape[2] % kh == 0 and x.shape[3] % kw == 0 else None
