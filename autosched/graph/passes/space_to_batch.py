"""A dilated 3x3 convolution as an undilated one over the input's phases (atrous by space-to-batch).

With dilation d, stride 1 and "same" padding (d on every side), output pixel (d·h + i, d·w + j)
reads only input pixels of the same phase (i, j): the convolution is d² independent 3x3
convolutions of stride 1 and padding 1, one per phase of an image d times smaller. Moving the
phases onto the batch axis (Reshape, Transpose, Reshape), convolving once, and moving them back
is the same arithmetic, and the undilated 3x3 convolution is one Winograd computes: a DeepLab-style
3x3 convolution of dilation 2 on 64 channels at 56x56 ran 1.084 ms as a direct dilated kernel
(at the FMA peak, 217 GFLOP/s) and 0.324 ms as four 28x28 phases in F(4x4, 3x3) on the EPYC
Zen 4 (2 threads). Only where Winograd takes the phases (`_dilation`): elsewhere the direct
kernel already runs at the peak and the rearrangement would only add copies.

It runs on blocked convolutions (after layout planning), so that the phases move whole channel
vectors (NCHW[b]c's innermost axis rides along the transposes) and no layout conversion is added;
the elementwise ops that followed the convolution (its epilogue: bias, activation) move onto the
phases with it, since they commute with the rearrangement.
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: the phases' channels and size Winograd's fallback takes (`search_spaces/llvm/conv2d_winograd.py`)
MIN_CHANNELS = 32
MIN_PHASE = 8


def space_to_batch(graph: Graph) -> Graph:
    """`graph` with every eligible blocked dilated convolution computed over the phases of its input."""
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    moved: set[int] = set()  # epilogue nodes emitted on the phases
    nodes: list[Node] = []
    value = NewValues(graph)
    for node in graph.nodes:
        if id(node) in moved:
            continue
        d = _dilation(graph, node)
        if d is None:
            nodes.append(node)
            continue
        epilogue = _epilogue(graph, node, consumers, outputs)
        moved.update(id(e) for e in epilogue)
        chain = {node.outputs[0], *(e.outputs[0] for e in epilogue[:-1])}
        x, y = graph.values[node.inputs[0]], graph.values[(epilogue[-1] if epilogue else node).outputs[0]]
        (n, c, h, w, b), (_, oc, _, _, ob), dt = x.shape, y.shape, x.dtype
        ph, pw, batch = h // d, w // d, d * d * n
        cut = value(f"{x.name}_phase_rows", (n, c, ph, d, pw, d, b), dt)
        order = value(f"{x.name}_phase_order", (d, d, n, c, ph, pw, b), dt)
        phases = value(f"{x.name}_phases", (batch, c, ph, pw, b), dt)
        nodes += [
            Node(f"{node.name}/phase_rows", Op.RESHAPE, (x.name,), (cut,), {"shape": (n, c, ph, d, pw, d, b)}),
            Node(f"{node.name}/phase_order", Op.TRANSPOSE, (cut,), (order,), {"perm": (3, 5, 0, 1, 2, 4, 6)}),
            Node(f"{node.name}/phases", Op.RESHAPE, (order,), (phases,), {"shape": (batch, c, ph, pw, b)}),
        ]
        out = value(f"{node.outputs[0]}_phases", (batch, oc, ph, pw, ob), dt)
        nodes.append(Node(node.name, node.op, (phases, *node.inputs[1:]), (out,),
                          {**node.attrs, "dilations": (1, 1), "pads": (1, 1, 1, 1)}))
        for e in epilogue:  # elementwise, its other operands constants per channel: the same on every phase
            result = value(f"{e.outputs[0]}_phases", (batch, oc, ph, pw, ob), dt)
            nodes.append(Node(e.name, e.op, tuple(out if i in chain else i for i in e.inputs), (result,), e.attrs))
            out = result
        split = value(f"{y.name}_phase_split", (d, d, n, oc, ph, pw, ob), dt)
        placed = value(f"{y.name}_phase_placed", (n, oc, ph, d, pw, d, ob), dt)
        nodes += [
            Node(f"{node.name}/phase_split", Op.RESHAPE, (out,), (split,), {"shape": (d, d, n, oc, ph, pw, ob)}),
            Node(f"{node.name}/phase_placed", Op.TRANSPOSE, (split,), (placed,), {"perm": (2, 3, 4, 0, 5, 1, 6)}),
            Node(f"{node.name}/phase_image", Op.RESHAPE, (placed,), (y.name,), {"shape": y.shape}),
        ]
    return rebuild(graph, nodes, dict(graph.constants), value.values) if value.values else graph


def _dilation(graph: Graph, node: Node) -> int | None:
    """d for a blocked float Conv of constant 3x3 weights, one group, stride 1, dilation d > 1 on
    both axes, padding d on every side, whose image d divides, with phases Winograd takes."""
    if node.op is not Op.CONV_NCHWC or node.inputs[1] not in graph.constants or not node.attrs.get("in_block"):
        return None
    x, w = graph.values[node.inputs[0]], graph.constants[node.inputs[1]]
    if len(x.shape) != 5 or w.ndim != 4 or tuple(w.shape[2:]) != (3, 3) or not x.dtype.startswith("float"):
        return None
    at = node.attrs
    dil = tuple(at.get("dilations", (1, 1)))
    d = dil[0]
    if (at.get("group", 1) != 1 or tuple(at.get("strides", (1, 1))) != (1, 1) or d < 2 or dil != (d, d)
            or tuple(at.get("pads", (0,) * 4)) != (d,) * 4):
        return None
    (_, _, h, width, _), (oc, c) = x.shape, w.shape[:2]
    if h % d or width % d or min(c, oc) < MIN_CHANNELS or min(h, width) // d < MIN_PHASE:
        return None
    return d


def _epilogue(graph: Graph, node: Node, consumers: dict[str, list[Node]], outputs: set[str]) -> list[Node]:
    """The elementwise nodes that follow `node` one after the other, each its value's only reader
    and every other operand a constant of one value per channel (a bias, a scale): what its
    kernel would fuse, and what commutes with moving pixels."""
    chain: list[Node] = []
    current = node.outputs[0]
    shape = graph.values[current].shape
    while current not in outputs and len(readers := consumers.get(current, [])) == 1:
        e = readers[0]
        others = [i for i in e.inputs if i != current]
        if (kind_of(e.op) is not OpKind.ELEMWISE or len(e.outputs) != 1 or graph.values[e.outputs[0]].shape != shape
                or not all(i in graph.constants and _per_channel(graph.values[i].shape, shape) for i in others)):
            break
        chain.append(e)
        current = e.outputs[0]
    return chain


def _per_channel(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether an operand of `shape` broadcasts to the blocked `out` along batch and pixels only."""
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    return len(full) == len(out) and full[0] == full[2] == full[3] == 1
