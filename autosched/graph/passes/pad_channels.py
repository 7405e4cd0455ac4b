"""Convolutions whose output channels fall just short of whole vectors, padded to them.

Layout planning blocks a tensor by a whole vector of channels, else by half of one. A
convolution with 1000 output channels (SqueezeNet's classifier) on AVX-512 gets blocks of 8,
and every FMA of its kernel then runs in half a register: tuned for 96 trials it reached 139
GFLOP/s on a 2-core Xeon, the same layer with 1008 channels in blocks of 16 208 GFLOP/s. So
the filters (and bias) gain zero rows up to the next multiple of the vector, and the padded
channels ride through the ops after the convolution that treat each channel alone
(elementwise ops with per-channel or scalar constants, pools, spatial reductions) until one
that mixes channels or another reader needs the value; a Slice drops them there, where a
global pool has usually made the tensor small. onnxruntime's NCHWc convolutions pad the same
way. Padding costs at most `MAX_WASTE` of the padded convolution's work, and a convolution is
padded only where the Slice comes after such a reduction (at most `MAX_WASTE` of its output's
elements): a MobileNetV3-style block's 120-channel expansions, read next by a depthwise
convolution, were sliced at full size, and the slice with the conversions around it cost 0.077
ms of the block's 0.70; left unpadded, the block ran 1.38x and 1.30x faster (Xeon, 2 threads,
`benchmarks/models.py --baseline`, 60 runs), SqueezeNet's build unchanged.

A head, a convolution to fewer channels than one vector from a blocked input (a super-resolution
network's 9 or 3 output channels), is padded to one vector whatever the waste: the plain
convolution it otherwise is ran at 36 GFLOP/s (ESPCN's 32 -> 9 channels on 128x128, 2.4 ms
alone), and a 64 -> 3 channel head on 128x128 ran 2.67x faster padded (`models.py --baseline`,
40 runs, 2 threads); its output is small, so slicing it costs little.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: the largest share of a padded convolution's output channels that may be padding
MAX_WASTE = 1 / 16


def pad_channels(graph: Graph, lanes: int) -> Graph:
    """`graph` with each eligible convolution (`_padded_channels`) computing whole vectors of
    `lanes` output channels, sliced back after the channel-wise ops that follow it."""
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    constants = dict(graph.constants)
    value = NewValues(graph)
    padded_constants: dict[tuple[str, int, int], str] = {}
    replaced: dict[str, Node] = {}  # node name -> its padded version
    slices: dict[str, Node] = {}  # node name -> the Slice that follows it
    for node in graph.nodes:
        padded = _padded_channels(graph, node, lanes)
        if padded is None:
            continue
        oc = graph.values[node.outputs[0]].shape[1]
        chain = [node]
        while True:  # the channel-wise ops the padded channels can ride through
            readers = consumers.get(chain[-1].outputs[0], [])
            if chain[-1].outputs[0] in outputs or len(readers) != 1 or not _channel_wise(graph, readers[0], oc):
                break
            chain.append(readers[0])
        if not _head(graph, node, lanes) and graph.values[chain[-1].outputs[0]].size > MAX_WASTE * graph.values[node.outputs[0]].size:
            continue  # the padding would be sliced off a tensor as large as the convolution's output
        source = ""  # the padded value the member after it reads
        for k, member in enumerate(chain):
            out = graph.values[member.outputs[0]]
            wide = value(f"{out.name}_pad{padded}", (out.shape[0], padded, *out.shape[2:]), out.dtype)
            inputs = tuple(source if k and n == chain[k - 1].outputs[0] else
                           _pad_constant(constants, value, padded_constants, n, oc, padded, k == 0)
                           if n in constants else n for n in member.inputs)
            replaced[member.name] = Node(member.name, member.op, inputs, (wide,), member.attrs)
            source = wide
        last = graph.values[chain[-1].outputs[0]]
        slices[chain[-1].name] = Node(f"{chain[-1].name}/unpad", Op.SLICE, (source,), (last.name,),
                                      {"starts": (0,) * len(last.shape), "ends": last.shape,
                                       "steps": (1,) * len(last.shape)})
    if not replaced:
        return graph
    nodes = [n for node in graph.nodes for n in (replaced.get(node.name, node), slices.get(node.name)) if n is not None]
    return rebuild(graph, nodes, constants, value.values)


def _padded_channels(graph: Graph, node: Node, lanes: int) -> int | None:
    """The padded output channel count of a dense 2-D float32 Conv of constant filters and bias
    whose channels are not whole vectors, if padding wastes at most `MAX_WASTE`."""
    if node.op is not Op.CONV or node.attrs.get("group", 1) != 1 or len(node.inputs) < 2 or lanes < 2:
        return None
    if any(name not in graph.constants for name in node.inputs[1:]):
        return None
    x, out = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    if len(x.shape) != 4 or x.dtype != "float32":
        return None
    oc = out.shape[1]
    padded = -(-oc // lanes) * lanes
    return padded if padded != oc and (padded - oc <= padded * MAX_WASTE or _head(graph, node, lanes)) else None


def _head(graph: Graph, node: Node, lanes: int) -> bool:
    """A convolution to fewer channels than one vector from at least one vector of them (a
    super-resolution or segmentation head)."""
    return graph.values[node.outputs[0]].shape[1] < lanes <= graph.values[node.inputs[0]].shape[1]


def _channel_wise(graph: Graph, node: Node, channels: int) -> bool:
    """Whether `node` computes each channel of its one non-constant input alone, keeping the
    channel axis: an elementwise op whose constants broadcast per channel (or not along
    channels at all), a 2-D pool, a mean, sum or maximum over the spatial axes."""
    if len(node.outputs) != 1:
        return False
    out = graph.values[node.outputs[0]]
    if len(out.shape) != 4 or sum(n not in graph.constants for n in node.inputs) != 1:
        return False
    kind = kind_of(node.op)
    if kind is OpKind.POOL:
        return True
    if node.op in (Op.REDUCE_MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX):
        return bool(node.attrs.get("keepdims", 1)) and set(node.attrs["axes"]) <= {2, 3}
    # BatchNorm indexes its parameters by channel position; a broadcast that grows the tensor
    # would not keep it one output per input element
    if kind is not OpKind.ELEMWISE or node.op is Op.BATCH_NORM:
        return False
    source = next(graph.values[n] for n in node.inputs if n not in graph.constants)
    if source.shape != out.shape:
        return False
    for name in node.inputs:
        shape = graph.values[name].shape
        if name in graph.constants and len(shape) > 4:
            return False
        if name in graph.constants and len(shape) >= 3 and shape[len(shape) - 3] not in (1, channels):
            return False
    return True


def _pad_constant(constants: dict[str, np.ndarray], value: NewValues, made: dict[tuple[str, int, int], str], name: str,
                  channels: int, padded: int, filters: bool) -> str:
    """`name` padded along its channel axis (a Conv's filters and bias: axis 0, zeros; an
    elementwise operand: the axis that broadcasts against channels, its last value repeated, so
    that a divisor stays nonzero), under a new name; constants without that axis as they are."""
    array = constants[name]
    axis = 0 if filters else array.ndim - 3
    if axis < 0 or array.shape[axis] != channels:
        return name
    if (name, axis, padded) not in made:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, padded - channels)
        wide = np.pad(array, widths, mode="constant" if filters else "edge")
        made[(name, axis, padded)] = value(f"{name}_pad{padded}", tuple(wide.shape), str(wide.dtype))
        constants[made[(name, axis, padded)]] = wide
    return made[(name, axis, padded)]
