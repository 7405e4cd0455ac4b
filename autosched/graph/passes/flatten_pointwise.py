"""A blocked 1x1 convolution of stride 1 computed over its image as one row of pixels.

Without stride or padding, a pointwise convolution's output pixel reads its own input pixel
only, so the image's rows may as well be one row: [N, C/b, H, W, b] and [N, C/b, 1, H·W, b] are
the same bytes (a Reshape between them is a view, `aliases.py`). On 16 vector registers the
NCHWc fallback's tile is two blocks by 5 or 6 columns where the row tiles so and 2 x 7
otherwise (`search_spaces/llvm/conv2d_nchwc.py`), and rows of 56, 28, 14 and 7 pixels, whose
widths 5 and 6 do not divide, took 2 x 7 with one weight vector read from memory in each of
its FMAs. One row of 3136, 784, 196 or 49 pixels takes 2 x 6 with a shifted last tile.

The elementwise ops after such a convolution (its activation, a residual Add and the Relu after
it) move into the row's shape with it, their operands of the image's shape read as views, so
that they stay in its kernel's epilogue; whatever else reads a result (a 3x3 convolution, a
pool) reads it through a Reshape back, a view again. A convolution whose results would reach an
elementwise op or a Concat that cannot move is left as it is: the Reshape would cut the
epilogue from its kernel, or keep a Concat from taking its input in place.

It runs after layout planning, on convolutions whose output is an even number of whole vectors
(the fallback's two-block tile: MobileNetV2's 144 -> 24 on 56x56, three blocks in a 3 x 4 tile,
ran 0.7x as fast over one row as over its image, gcc reading its three weight vectors from
memory in each FMA), and only for targets of 16 vector registers, where it was measured; on
32, rows of 7, 14, 28 and 56 already take 7 or 8 columns. EPYC Zen 3, alone, image -> one row, GFLOP/s: 2 threads, medians of 3-5,
1024 -> 256 on 14x14 125 -> 179, 1024 -> 1024 123 -> 184, 576 -> 96 157 -> 175, 2048 -> 512 on
7x7 126 -> 161, 512 -> 512 on 28x28 168-178 -> 184-188, 64 -> 256 on 56x56 172 -> 186; 1 thread,
7x7 layers of MobileNetV2 61-67 -> 83-87. In the model (`benchmarks/models.py --baseline`, 1
thread, 20-30 runs): MobileNetV2 1.04-1.06x faster, the ResNeXt block 1.05x, SqueezeNet 1.07x,
the other zoo blocks 0.98-1.04x (at 2 threads this host's noise, 0.9-1.5x between runs of the
same pair, hid any difference).
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of


def flatten_pointwise(graph: Graph, lanes: int) -> Graph:
    """`graph` with every eligible blocked 1x1 convolution (blocks of `lanes` channels), and the
    elementwise ops after it, computed over [N, C/b, 1, H·W, b]."""
    convs, moved = _plan(graph, lanes)
    if not convs:
        return graph
    value = NewValues(graph)
    rows: dict[str, str] = {}  # a value of the image's shape -> its one-row view or result
    computed: set[str] = set()  # the values the moved nodes compute as rows
    shaped: set[str] = set()  # those of them a Reshape back gives their image-shaped name
    nodes: list[Node] = []

    def as_row(name: str) -> str:
        if name not in rows:
            v = graph.values[name]
            rows[name] = value(f"{name}:row", _row_shape(v.shape), v.dtype)
            nodes.append(Node(f"{name}:to_row", Op.RESHAPE, (name,), (rows[name],), {"shape": _row_shape(v.shape)}))
        return rows[name]

    def as_image(name: str) -> None:
        if name in computed and name not in shaped:
            shape = graph.values[name].shape
            nodes.append(Node(f"{name}:to_image", Op.RESHAPE, (rows[name],), (name,), {"shape": shape}))
            shaped.add(name)

    for node in graph.nodes:
        if node.name in convs or node.name in moved:
            out = graph.values[node.outputs[0]]
            operands = (as_row(node.inputs[0]), *node.inputs[1:]) if node.name in convs else tuple(
                as_row(n) if n in rows or graph.values[n].shape == out.shape else n for n in node.inputs)
            rows[out.name] = value(f"{out.name}:row", _row_shape(out.shape), out.dtype)
            computed.add(out.name)
            nodes.append(Node(node.name, node.op, operands, (rows[out.name],), node.attrs))
            continue
        for name in node.inputs:
            as_image(name)
        nodes.append(node)
    for v in graph.outputs:
        as_image(v.name)
    return rebuild(graph, nodes, graph.constants, value.values)


def _row_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    n, blocks, h, w, b = shape
    return (n, blocks, 1, h * w, b)


def _plan(graph: Graph, lanes: int) -> tuple[set[str], set[str]]:
    """The convolutions to flatten and the elementwise nodes that move with them (by name): the
    eligible ones, less every convolution whose results reach a reader that cannot take the
    Reshape back, until none does."""
    consumers = graph.consumers()
    excluded: set[str] = set()
    while True:
        convs, moved, sources = _spread(graph, lanes, excluded)
        blocked = {src for name, srcs in sources.items() for reader in consumers.get(name, [])
                   if reader.name not in convs | moved and _cuts(reader) for src in srcs}
        if not blocked:
            return convs, moved
        excluded |= blocked


def _spread(graph: Graph, lanes: int, excluded: set[str]) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """The eligible convolutions not `excluded`, the elementwise nodes whose every operand is a
    row result, a value of the same shape or a broadcast constant along the image, and for each
    row result the convolutions it comes from."""
    convs: set[str] = set()
    moved: set[str] = set()
    sources: dict[str, set[str]] = {}  # row result -> the convolutions it depends on
    for node in graph.nodes:
        if node.name not in excluded and _eligible(graph, node, lanes):
            convs.add(node.name)
            sources[node.outputs[0]] = {node.name}
            continue
        if len(node.outputs) != 1 or kind_of(node.op) is not OpKind.ELEMWISE:
            continue
        shape = graph.values[node.outputs[0]].shape
        rows = [n for n in node.inputs if n in sources]
        if rows and all(graph.values[n].shape == shape for n in rows) and all(n in sources or _moves_along(graph, n, shape) for n in node.inputs):
            moved.add(node.name)
            sources[node.outputs[0]] = set().union(*(sources[n] for n in rows))
    return convs, moved, sources


def _moves_along(graph: Graph, name: str, shape: tuple[int, ...]) -> bool:
    """Whether operand `name` of an elementwise op of output `shape` reads the same in the row's
    shape: a computed value of that shape (read through a view), or one that broadcasts along
    both spatial axes (a bias per channel, a scalar)."""
    operand = graph.values[name].shape
    if operand == shape:
        return name not in graph.constants
    padded = (1,) * (len(shape) - len(operand)) + tuple(operand)
    return len(padded) == len(shape) and padded[2] == padded[3] == 1


def _cuts(reader: Node) -> bool:
    """Whether a reader of a row result, not moved with it, loses by reading it through a
    Reshape back: an elementwise op would leave the convolution's epilogue; a Concat could not
    take its input in place."""
    return reader.op is Op.CONCAT or kind_of(reader.op) is OpKind.ELEMWISE


def _eligible(graph: Graph, node: Node, lanes: int) -> bool:
    """A blocked float Conv of constant 1x1 weights, one group, stride 1 and no padding, whose
    input and output come in blocks of `lanes` channels, an even number of output blocks, more
    than one row."""
    if node.op is not Op.CONV_NCHWC or node.inputs[1] not in graph.constants:
        return False
    at = node.attrs
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    w = graph.constants[node.inputs[1]]
    if at.get("in_block") != lanes or at.get("out_block") != lanes or w.ndim != 4 or tuple(w.shape[2:]) != (1, 1):
        return False
    if (at.get("group", 1) != 1 or tuple(at.get("strides", (1, 1))) != (1, 1)
            or any(at.get("pads", (0,) * 4))):
        return False
    return len(y.shape) == 5 and y.shape[1] % 2 == 0 and y.shape[2] > 1 and x.dtype.startswith("float")
