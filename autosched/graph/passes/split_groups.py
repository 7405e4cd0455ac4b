"""A grouped 3x3 convolution of wide groups as one convolution per group, concatenated.

Winograd computes ungrouped convolutions only (`search_spaces/llvm/conv2d_winograd.py`); a
group of 64 channels in and out is an ungrouped 64 -> 64 convolution, the shape ResNet-18's
first layers take Winograd for. Cut apart, each group reads its channels of the input (a Split
along channels of a batch of one: no copy, `aliases`) and writes its range of the output (the
Concat: no copy either), and the activation after the convolution is applied per group so that
it stays in each kernel's epilogue. Untuned, 2 threads, EPYC Zen 4, one grouped conv + ReLU
(`benchmarks/models.py --baseline`, 20 runs; before -> after, onnxruntime): 64-channel groups,
3 on 28x28 0.85 -> 0.33 ms (0.82), 2 on 56x56 2.54 -> 0.86 (2.31; `autosched bench`, 20 runs,
before and after); 32-channel groups, 8 on
56x56 2.48 -> 1.25 (2.34), 6 on 28x28 0.48 -> 0.28 (0.45), 4 on 28x28 0.31 -> 0.18 (0.27);
HuggingFace's RegNet (64-channel groups) 1.10x faster in all, 0.94 -> 0.84 of onnxruntime's
time, with maps of 16 or more. On 14x14 maps F(2) takes each group: a 1x1 conv, 8 groups of 64
and a 1x1 conv (512 channels) ran 1.16x and 1.13x faster split, 4 groups of 64 on 14x14 1.20x
(40 runs), and RegNet 1.08x more (0.89 -> 0.76 of onnxruntime's time). On 7x7 maps the groups'
convolutions stay direct (Winograd's fallback wants 128 channels there), and 17 groups of 64 ran
as fast split as grouped: `MIN_SIZE` is the fallback's floor for Winograd. (A grouped layer
reading the model's input measures the split wrongly: the input, not in the arena, is copied
into blocks once per group.)
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.conv import EXACT_SUMS_ATTR
from autosched.opset.record import OpKind
from autosched.opset.registry import lookup

#: channels per group, in and out, from which a group is worth a Winograd convolution of its own
#: (the fallback's floor for Winograd: `conv2d_winograd.MIN_FALLBACK_CHANNELS`)
MIN_GROUP_CHANNELS = 32
#: output maps at least this wide and tall (`conv2d_winograd.MIN_FALLBACK_SIZE`)
MIN_SIZE = 8


def split_groups(graph: Graph, lanes: int) -> Graph:
    """`graph` with every eligible grouped convolution (`_eligible`) and the chain of one-input
    elementwise ops that alone read it run per group and concatenated; `lanes` is the channel
    block the layout will use, which each group's channels must fill."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            readers.setdefault(name, []).append(node)
    outputs = {v.name for v in graph.outputs}
    constants = dict(graph.constants)
    value = NewValues(graph)
    chains: dict[str, list[Node]] = {}  # a split convolution's name -> its activations, moved per group
    moved: set[str] = set()
    for node in graph.nodes:
        if _eligible(graph, node, lanes):
            chains[node.name] = chain = []
            out = node.outputs[0]
            while out not in outputs and len(readers.get(out, [])) == 1 and _unary(readers[out][0]):
                chain.append(readers[out][0])
                out = chain[-1].outputs[0]
            moved.update(n.name for n in chain)
    if not chains:
        return graph
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.name in moved:
            continue
        if node.name not in chains:
            nodes.append(node)
            continue
        groups = node.attrs["group"]
        x, w = graph.values[node.inputs[0]], graph.constants[node.inputs[1]]
        bias = graph.constants[node.inputs[2]] if len(node.inputs) > 2 else None
        y = graph.values[node.outputs[0]]
        cg, ocg = x.shape[1] // groups, w.shape[0] // groups
        parts = [value(f"{x.name}_group{g}", (x.shape[0], cg, *x.shape[2:]), x.dtype) for g in range(groups)]
        nodes.append(Node(f"{node.name}/groups", Op.SPLIT, (x.name,), tuple(parts), {"axis": 1, "split": (cg,) * groups}))
        results = []
        for g, part in enumerate(parts):
            inputs = [part, value(f"{node.inputs[1]}_group{g}", (ocg, *w.shape[1:]), str(w.dtype))]
            constants[inputs[1]] = w[g * ocg:(g + 1) * ocg]
            if bias is not None:
                inputs.append(value(f"{node.inputs[2]}_group{g}", (ocg,), str(bias.dtype)))
                constants[inputs[2]] = bias[g * ocg:(g + 1) * ocg]
            out = value(f"{node.outputs[0]}_group{g}", (y.shape[0], ocg, *y.shape[2:]), y.dtype)
            nodes.append(Node(f"{node.name}/group{g}", Op.CONV, tuple(inputs), (out,), {**node.attrs, "group": 1}))
            for act in chains[node.name]:
                src, out = out, value(f"{act.outputs[0]}_group{g}", (y.shape[0], ocg, *y.shape[2:]),
                                      graph.values[act.outputs[0]].dtype)
                nodes.append(Node(f"{act.name}/group{g}", act.op, (src,), (out,), act.attrs))
            results.append(out)
        last = chains[node.name][-1].outputs[0] if chains[node.name] else node.outputs[0]
        nodes.append(Node(f"{node.name}/concat", Op.CONCAT, tuple(results), (last,), {"axis": 1}))
    return rebuild(graph, nodes, constants, value.values)


def _unary(node: Node) -> bool:
    return len(node.inputs) == 1 and len(node.outputs) == 1 and lookup(node.op).kind is OpKind.ELEMWISE


def _eligible(graph: Graph, node: Node, lanes: int) -> bool:
    """A float 2-D Conv of constant 3x3 weights (and bias), stride 1, undilated, in groups of at
    least `MIN_GROUP_CHANNELS` whole vectors of channels in and out, onto a map of at least
    `MIN_SIZE` a side, whose sums may be rounded (not `EXACT_SUMS_ATTR`)."""
    at = node.attrs
    groups = at.get("group", 1)
    if node.op is not Op.CONV or groups == 1 or at.get(EXACT_SUMS_ATTR) or node.inputs[1] not in graph.constants:
        return False
    if len(node.inputs) > 2 and node.inputs[2] not in graph.constants:
        return False
    x, w, y = graph.values[node.inputs[0]], graph.constants[node.inputs[1]], graph.values[node.outputs[0]]
    if len(x.shape) != 4 or x.shape[0] != 1 or not x.dtype.startswith("float") or w.shape[2:] != (3, 3):
        return False
    if tuple(at.get("strides", (1, 1))) != (1, 1) or tuple(at.get("dilations", (1, 1))) != (1, 1):
        return False
    cg, ocg = x.shape[1] // groups, w.shape[0] // groups
    return (min(cg, ocg) >= MIN_GROUP_CHANNELS and cg % lanes == 0 and ocg % lanes == 0
            and min(y.shape[2:]) >= MIN_SIZE)
