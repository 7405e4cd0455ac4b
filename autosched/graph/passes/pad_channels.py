"""Convolutions whose output channels fall just short of whole vectors, padded to them.

Layout planning blocks a tensor by a whole vector of channels, else by a smaller power of two
that divides its channels. A convolution with 1000 output channels (SqueezeNet's classifier) on
AVX-512 gets blocks of 8, and every FMA of its kernel then runs in half a register: tuned for 96
trials it reached 139 GFLOP/s on a 2-core Xeon, the same layer with 1008 channels in blocks of
16 208 GFLOP/s; ShuffleNet's 58 channels get blocks of 2. So the filters (and bias) of such a
convolution (a *seed*) gain zero rows up to the next multiple of the vector, as onnxruntime's
NCHWc convolutions pad them, and the padded channels are *carried*, as a tensor of the padded
width, through the ops that compute each channel alone: elementwise ops (with per-channel or
scalar constants, or of two carried tensors, as a residual add), pools, spatial reductions and
grouped and depthwise convolutions (the padding adds whole groups, of zero filters).
A dense convolution reading a carried tensor absorbs the padding: its filters gain zero
columns for the padded channels, which adds exact zeros if the padded channels hold finite
values (`_FINITE`: no exponential, logarithm or division by a tensor on their way). Anything
else that reads a carried tensor, and a graph output, reads a Slice of its real channels.

ShuffleNet's 58-channel units then run in blocks of 16 through their depthwise convolutions,
sliced only before the Concat, and RegNet's 104-channel stages through their convolutions in
groups of 8 (one more group), the SE scale joining two padded values: 1.85-1.92x and 1.14-1.17x
faster untuned, a MobileNetV3-style block 1.06-1.08x (Xeon, 2 threads, `models.py --baseline`,
20-30 runs). Padding costs at most `MAX_WASTE` of a seed's work, and as much again in every
convolution that absorbs it: EfficientNet's 40-channel projections padded to 48 (a sixth more
work there and in the expansion reading them) ran 0.92x as fast on a Xeon, MobileNetV2's 24 to
32 0.98x; on Zen 5 cores both paid, so there the limit is `FULL_WIDTH_WASTE` (`max_waste`).
The seeds joined by the ops that carry their padding (a residual add of two of them) are padded
together or not at all: not where the Slices cost more than `MAX_SLICED` element copies per
multiply-add of their convolutions. A MobileNetV3 block's 120-channel expansions, sliced at
full size before the depthwise convolutions (which did not carry padding then), cost 0.077 ms
of the block's 0.70 in the slices and conversions around them.

A head, a convolution to fewer channels than one vector from a blocked input (a
super-resolution network's 9 or 3 output channels), is padded to one vector whatever the waste:
the plain convolution it otherwise is ran at 36 GFLOP/s (ESPCN's 32 -> 9 channels on 128x128,
2.4 ms alone), and a 64 -> 3 channel head on 128x128 ran 2.67x faster padded (`models.py
--baseline`, 40 runs, 2 threads); its output is small, so slicing it costs little.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of
from autosched.target import CpuCapabilities

#: the largest share of a seed's output channels that may be padding (`max_waste`)
MAX_WASTE = 1 / 8
#: the same on cores that run a full vector at the rate of a half-width one's instructions
FULL_WIDTH_WASTE = 1 / 4
#: the cores of `FULL_WIDTH_WASTE` (gcc's names)
FULL_WIDTH_CORES = frozenset({"znver5"})
#: the most elements a group's Slices (other than of graph outputs) may copy per multiply-add
#: of its seeds' convolutions
MAX_SLICED = 1 / 16
#: elementwise ops whose output is finite wherever their inputs are (Div: by a constant only)
_FINITE = frozenset({
    Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN, Op.NEG, Op.ABS, Op.IDENTITY, Op.DROPOUT, Op.RELU,
    Op.LEAKY_RELU, Op.PRELU, Op.CLIP, Op.SIGMOID, Op.HARD_SIGMOID, Op.HARD_SWISH, Op.TANH, Op.SOFTSIGN,
    Op.GELU, Op.ERF, Op.ELU, Op.SELU, Op.CELU, Op.SWISH, Op.THRESHOLDED_RELU, Op.SHRINK, Op.SIN, Op.COS,
    Op.ATAN, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIGN,
})
_SPATIAL_REDUCTIONS = frozenset({Op.REDUCE_MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN})


@dataclass
class _Carried:
    """A value computed at the padded width: its real and padded channel counts, the group of
    seeds whose padding it carries, and whether its padded channels are known finite."""

    channels: int
    padded: int
    group: str
    finite: bool


@dataclass
class _Plan:
    """Where padding would go, before deciding which groups are worth it."""

    carried: dict[str, _Carried] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)  # seed node -> its padded channels
    carries: set[str] = field(default_factory=set)  # nodes computing at the padded width
    absorbs: dict[str, str] = field(default_factory=dict)  # dense conv -> the carried value it reads
    parent: dict[str, str] = field(default_factory=dict)  # union-find over seed groups

    def group(self, value: str) -> str:
        """The group whose padding `value` carries."""
        g = self.carried[value].group
        while self.parent[g] != g:
            g = self.parent[g]
        return g


def max_waste(caps: CpuCapabilities) -> float:
    """How much of a seed's output may be padding on `caps`' cores. Where a 512-bit FMA runs at
    full width (Zen 5), a convolution in blocks of 8 channels does half the work per instruction
    that blocks of 16 do, and EfficientNet's 40-channel projections padded to 48 pay there:
    the EfficientNet-style block ran 0.91-0.95x, the MobileNetV3-style block 0.93x and
    MobileNetV2 0.93-0.99x the time of the build with `MAX_WASTE` (EPYC Zen 5, 2 threads,
    `models.py --baseline`, 20 runs, all 26 zoo models, the others within 0.97-1.03). On a
    Sapphire Rapids Xeon the same padding made the EfficientNet-style block 0.92x as fast."""
    return FULL_WIDTH_WASTE if caps.core in FULL_WIDTH_CORES else MAX_WASTE


def pad_channels(graph: Graph, lanes: int, waste: float = MAX_WASTE) -> Graph:
    """`graph` with each worthwhile group of seeds computing whole vectors of `lanes` output
    channels, the padding carried and absorbed as far as it goes and sliced off elsewhere;
    padding is at most `waste` of a seed's output channels (a head's may be more)."""
    plan = _plan(graph, lanes, waste)
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}

    def plain_readers(value: str) -> list[Node]:
        return [r for r in consumers.get(value, [])
                if r.name not in plan.carries and plan.absorbs.get(r.name) != value]

    sliced: dict[str, int] = {}
    for name in plan.carried:
        if plain_readers(name) and name not in outputs:
            sliced[plan.group(name)] = sliced.get(plan.group(name), 0) + graph.values[name].size
    work: dict[str, int] = {}
    heads: set[str] = set()
    for node in graph.nodes:
        if node.name in plan.seeds:
            g = plan.group(node.outputs[0])
            work[g] = work.get(g, 0) + graph.values[node.outputs[0]].size * math.prod(graph.values[node.inputs[1]].shape[1:])
            if _head(graph, node, lanes) and plan.seeds[node.name] - graph.values[node.outputs[0]].shape[1] > plan.seeds[node.name] * waste:
                heads.add(g)
    absorbed = {plan.group(v) for v in plan.absorbs.values()}
    # a head's padding may waste more than `waste`, but only up to the slice of its output:
    # a convolution absorbing it would do as much more work
    accepted = {g for g in work if (g not in absorbed if g in heads else sliced.get(g, 0) <= MAX_SLICED * work[g])}
    if not accepted:
        return graph

    def on(value: str) -> bool:
        return value in plan.carried and plan.group(value) in accepted

    constants = dict(graph.constants)
    value = NewValues(graph)
    made: dict[tuple[str, int, int], str] = {}
    wide: dict[str, str] = {}  # carried value -> its padded version

    def pad(name: str, axis: int, channels: int, padded: int, mode: str) -> str:
        return _pad_constant(constants, value, made, name, axis, channels, padded, mode)

    nodes: list[Node] = []
    for node in graph.nodes:
        inputs, attrs, out = list(node.inputs), node.attrs, node.outputs[0]
        if node.name in plan.carries and on(out):
            c = plan.carried[out]
            grouped = node.op is Op.CONV
            inputs = [wide[n] if n in wide else
                      pad(n, 0 if grouped else constants[n].ndim - 3, c.channels, c.padded,
                          "constant" if grouped else "edge") if n in constants else n for n in inputs]
            if grouped:
                attrs = {**attrs, "group": c.padded // constants[node.inputs[1]].shape[1]}
        else:
            if node.name in plan.absorbs and on(plan.absorbs[node.name]):
                c = plan.carried[plan.absorbs[node.name]]
                inputs[0], inputs[1] = wide[inputs[0]], pad(inputs[1], 1, c.channels, c.padded, "constant")
            if node.name in plan.seeds and on(out):
                oc, padded = graph.values[out].shape[1], plan.seeds[node.name]
                inputs[1:] = [pad(n, 0, oc, padded, "constant") for n in inputs[1:]]
        if not on(out):
            nodes.append(Node(node.name, node.op, tuple(inputs), node.outputs, attrs))
            continue
        real = graph.values[out]
        wide[out] = value(f"{out}_pad{plan.carried[out].padded}",
                          (real.shape[0], plan.carried[out].padded, *real.shape[2:]), real.dtype)
        nodes.append(Node(node.name, node.op, tuple(inputs), (wide[out], *node.outputs[1:]), attrs))
        if plain_readers(out) or out in outputs:
            nodes.append(Node(f"{node.name}/unpad", Op.SLICE, (wide[out],), (out,),
                              {"starts": (0,) * len(real.shape), "ends": real.shape, "steps": (1,) * len(real.shape)}))
    return rebuild(graph, nodes, constants, value.values)


def _plan(graph: Graph, lanes: int, waste: float) -> _Plan:
    """Every seed, the values that would carry its padding and the convolutions that would
    absorb it, in one pass in graph order."""
    plan = _Plan()
    for node in graph.nodes:
        if _carries(graph, node, plan.carried):
            wide = [n for n in node.inputs if n in plan.carried]
            root = plan.group(wide[0])
            for n in wide[1:]:
                plan.parent[plan.group(n)] = root
            first = plan.carried[wide[0]]
            finite = all(plan.carried[n].finite for n in wide) and _keeps_finite(graph, node)
            plan.carried[node.outputs[0]] = _Carried(first.channels, first.padded, root, finite)
            plan.carries.add(node.name)
            continue
        if _dense_conv(graph, node) and node.inputs[0] in plan.carried and plan.carried[node.inputs[0]].finite:
            plan.absorbs[node.name] = node.inputs[0]
        padded = _padded_channels(graph, node, lanes, waste)
        if padded is not None:
            plan.seeds[node.name] = padded
            plan.parent[node.name] = node.name
            plan.carried[node.outputs[0]] = _Carried(graph.values[node.outputs[0]].shape[1], padded, node.name, True)
    return plan


def _dense_conv(graph: Graph, node: Node) -> bool:
    """A dense 2-D float32 Conv of constant filters (and bias)."""
    if node.op is not Op.CONV or node.attrs.get("group", 1) != 1 or len(node.inputs) < 2:
        return False
    x = graph.values[node.inputs[0]]
    return all(n in graph.constants for n in node.inputs[1:]) and len(x.shape) == 4 and x.dtype == "float32"


def _padded_channels(graph: Graph, node: Node, lanes: int, waste: float) -> int | None:
    """The padded output channel count of a dense convolution whose channels are not whole
    vectors, if padding wastes at most `waste` (or it is a head)."""
    if lanes < 2 or not _dense_conv(graph, node):
        return None
    oc = graph.values[node.outputs[0]].shape[1]
    padded = -(-oc // lanes) * lanes
    return padded if padded != oc and (padded - oc <= padded * waste or _head(graph, node, lanes)) else None


def _head(graph: Graph, node: Node, lanes: int) -> bool:
    """A convolution to fewer channels than one vector from at least one vector of them (a
    super-resolution or segmentation head)."""
    return graph.values[node.outputs[0]].shape[1] < lanes <= graph.values[node.inputs[0]].shape[1]


def _carries(graph: Graph, node: Node, carried: dict[str, _Carried]) -> bool:
    """Whether `node` reads carried values only (besides constants) and computes each channel
    of them alone, keeping the channel axis: an elementwise op whose constants broadcast per
    channel (or not along channels at all) and which grows no tensor, a 2-D pool, a mean, sum,
    maximum or minimum over the spatial axes, a grouped or depthwise convolution."""
    if len(node.outputs) != 1:
        return False
    tensors = [n for n in node.inputs if n not in graph.constants]
    if not tensors or any(n not in carried for n in tensors):
        return False
    channels = carried[tensors[0]].channels
    out = graph.values[node.outputs[0]]
    if len(out.shape) != 4 or out.shape[1] != channels or any(carried[n].channels != channels for n in tensors):
        return False
    if node.op is Op.CONV:  # grouped: the padding adds whole groups, of zero filters
        width = _group_width(graph, node)
        return (width is not None and len(tensors) == 1 and tensors[0] == node.inputs[0]
                and (carried[tensors[0]].padded - channels) % width == 0)
    kind = kind_of(node.op)
    if kind is OpKind.POOL:
        return len(tensors) == 1
    if node.op in _SPATIAL_REDUCTIONS:
        return len(tensors) == 1 and bool(node.attrs.get("keepdims", 1)) and set(node.attrs["axes"]) <= {2, 3}
    # BatchNorm indexes its parameters by channel position; a broadcast that grows the tensor
    # would not keep it one output per input element
    if kind is not OpKind.ELEMWISE or node.op is Op.BATCH_NORM:
        return False
    if all(graph.values[n].shape != out.shape for n in tensors):
        return False
    for name in node.inputs:
        shape = graph.values[name].shape
        if name in graph.constants and len(shape) > 4:
            return False
        if name in graph.constants and len(shape) >= 3 and shape[len(shape) - 3] not in (1, channels):
            return False
    return True


def _group_width(graph: Graph, node: Node) -> int | None:
    """The channels per group of a grouped Conv (depthwise: 1) with as many output channels as
    input channels."""
    group, filters = node.attrs.get("group", 1), graph.values[node.inputs[1]].shape
    channels = graph.values[node.inputs[0]].shape[1]
    if group == 1 or channels % group or filters[0] != channels or filters[1] != channels // group:
        return None
    return channels // group


def _keeps_finite(graph: Graph, node: Node) -> bool:
    """Whether `node`'s output is finite wherever its carried inputs are."""
    if node.op is Op.DIV:
        return node.inputs[1] in graph.constants
    return node.op in _FINITE or node.op is Op.CONV or node.op in _SPATIAL_REDUCTIONS or kind_of(node.op) is OpKind.POOL


def _pad_constant(constants: dict[str, np.ndarray], value: NewValues, made: dict[tuple[str, int, int], str], name: str,
                  axis: int, channels: int, padded: int, mode: str) -> str:
    """`name` padded along `axis` from `channels` to `padded` (filters and biases: zeros; an
    elementwise operand: `mode="edge"`, its last value repeated, so that a divisor stays
    nonzero), under a new name; a constant without `channels` along that axis as it is."""
    array = constants[name]
    if axis < 0 or array.shape[axis] != channels:
        return name
    if (name, axis, padded) not in made:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, padded - channels)
        wide = np.pad(array, widths, mode=mode)  # type: ignore[call-overload]
        made[(name, axis, padded)] = value(f"{name}_pad{padded}", tuple(wide.shape), str(wide.dtype))
        constants[made[(name, axis, padded)]] = wide
    return made[(name, axis, padded)]
