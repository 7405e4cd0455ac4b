"""A blocked float convolution of quantized integers becomes an int8 one: `IntegerConvNCHWc`.

The counterpart of `integer_matmul` for the convolutions layout planning has blocked
(`ConvNCHWc`): on a target that multiplies bytes four at a time (x86's VNNI) a quantized
ResNet-18's 3x3 convolutions ran 1.0-2.1 ms each as float sums of integers against
onnxruntime's 0.25 ms u8·s8 kernels (Xeon, 2 threads). A ConvNCHWc is rewritten where:

- it is dense (one group), reads whole blocks of a multiple of 4 channels and no window of its
  input (`crop`), and its bias, if any, is a constant;
- its filters are a constant Q · s, Q int8 and s one scale or one per output channel, bit for
  bit (`graph.integers.integer_weights`, on the filters as columns);
- its input is (X - Z) · a as for `integer_matmul`, with a zero point Z either constant or
  computed at run time (DynamicQuantizeLinear's, one value) and provably within X's bytes.

With lo the least value X holds, the int8 convolution reads X - lo padded with Z - lo, so
conv(X - Z, Q) = conv(X - lo, Q) - (Z - lo) · ΣQ[oc] everywhere, borders included; the
correction, the scales and the bias run in its epilogue on the blocked output. A run-time
Z - lo reaches the convolution as a third input, one uint8, which its padding reads.
"""
from __future__ import annotations

import functools

import numpy as np

from autosched.graph.integers import BYTE_VALUES, bytes_and_offset, integer_range, integer_weights, scaled_operand
from autosched.graph.ir import Graph, Node, Op, Value, toposort
from autosched.graph.passes.integer_matmul import Offset, as_bytes, finish_integer_product
from autosched.graph.passes.rewrite import Emitter, NewValues, rebuild
from autosched.ops.integer_matmul import WORD


def integer_conv(graph: Graph) -> Graph:
    """`graph` with each blocked convolution of quantized integers (module doc) an
    `IntegerConvNCHWc`, its zero-point correction, its scales and its bias."""
    producers = graph.producers()
    constants = dict(graph.constants)
    value = NewValues(graph)
    replaced: dict[str, list[Node]] = {}
    bytes_of: dict[tuple[str, int], str] = {}  # (X, lo) -> X - lo as uint8
    blocked_of: dict[tuple[str, int], str] = {}  # (bytes, block) -> the bytes blocked so
    padding_of: dict[tuple[str, int], str] = {}  # (Z, lo) -> Z - lo as one uint8
    for node in graph.nodes:
        if not _eligible(graph, node):
            continue
        # the input as layout planning blocked it, or the plain value a transform blocked
        transform = producers.get(node.inputs[0])
        if transform is None or transform.op is not Op.LAYOUT_TRANSFORM:
            transform = None
        a_scale, centred = scaled_operand(graph, producers, transform.inputs[0] if transform else node.inputs[0])
        split = bytes_and_offset(graph, producers, centred)
        filters = constants[node.inputs[1]]
        weights = None if split is None else integer_weights(filters.reshape(filters.shape[0], -1).T.copy())
        if split is None or weights is None:
            continue
        x, lo, zero = split
        if not _padding_fits(graph, producers, zero, lo):
            continue
        integers, w_scale = weights
        q = integers.T.reshape(filters.shape)
        out = graph.values[node.outputs[0]]
        channels, block = filters.shape[0], node.attrs["out_block"]

        emit = Emitter(node, out, constants, value)
        sums = value(f"{out.name}:int32", out.shape, "int32")
        attrs = {key: node.attrs[key] for key in ("strides", "pads", "dilations", "in_block", "out_block")}
        source = as_bytes(emit, graph, producers, x, lo, bytes_of)
        if transform is not None:  # the bytes blocked as the float input was
            key = (source, transform.attrs["dst_block"])
            if key not in blocked_of:
                blocked_of[key] = value(f"{source}@blocked", graph.values[node.inputs[0]].shape, "uint8")
                emit.nodes.append(Node(f"{node.name}/blocked", Op.LAYOUT_TRANSFORM, (source,), (blocked_of[key],),
                                       transform.attrs))
            source = blocked_of[key]
        elif attrs["in_block"] == 0:  # a plain input (a first layer's 3 channels): words of 4 channels
            source, q = _in_words(emit, Value(source, graph.values[x].shape, "uint8"), q)
            attrs["in_block"] = WORD
        operands: tuple[str, ...] = (source, emit.constant("int8", q))
        if zero is None or zero in constants:
            attrs["pad_value"] = int((0.0 if zero is None else float(constants[zero].reshape(()))) - lo)
        else:
            operands += (_padding(emit, zero, lo, padding_of),)
        emit.nodes.append(Node(f"{node.name}/integer", Op.INTEGER_CONV_NCHWC, operands, (sums,), {**attrs, "group": 1}))
        bias = constants[node.inputs[2]] if len(node.inputs) > 2 else None
        finish_integer_product(emit, sums, Offset(lo, zero, q.astype(np.int64).sum(axis=(1, 2, 3)),
                                                  graph.values[zero].shape if zero else ()),
                               (a_scale * w_scale).astype(np.float32), bias,
                               functools.partial(_blocked, channels, block))
        replaced[node.name] = emit.nodes
    if not replaced:
        return graph
    nodes = [m for node in graph.nodes for m in replaced.get(node.name, (node,))]
    return rebuild(graph, toposort(nodes, [*(v.name for v in graph.inputs), *constants]), constants, value.values)


def _padding_fits(graph: Graph, producers: dict[str, Node], zero: str | None, lo: int) -> bool:
    """Whether the zero point less lo is a byte, as the padding must be: a constant integer, or
    one value computed at run time whose bounds are known (DynamicQuantizeLinear's clip)."""
    if zero is None:
        return True
    if zero in graph.constants:
        known = float(graph.constants[zero].reshape(()))
        return known.is_integer() and 0 <= known - lo < BYTE_VALUES
    bounds = integer_range(graph, producers, zero)
    return graph.values[zero].shape == () and bounds is not None and lo <= bounds[0] and bounds[1] - lo < BYTE_VALUES


def _padding(emit: Emitter, zero: str, lo: int, made: dict[tuple[str, int], str]) -> str:
    """Z - lo as one uint8 for the padding, once for all the convolutions that read X - Z."""
    if (zero, lo) not in made:
        source = zero
        if lo:
            source = emit.step("zero_point_bytes", Op.ADD, (zero, emit.constant("least", np.array(-lo, np.float32))),
                               shape=())
        made[zero, lo] = emit.step("padding", Op.CAST, (source,), {"to": "uint8"}, dtype="uint8", shape=())
    return made[zero, lo]


def _blocked(channels: int, block: int, per_channel: np.ndarray) -> np.ndarray:
    """One value, or one per output channel, shaped to broadcast over the blocked output."""
    values = np.broadcast_to(np.asarray(per_channel), (channels,))
    return values.reshape(1, channels // block, 1, 1, block).copy()


def _in_words(emit: Emitter, x: Value, q: np.ndarray) -> tuple[str, np.ndarray]:
    """Plain NCHW bytes `x` as NCHW4c, its channels padded to whole words (the padding's filter
    taps 0), and the filters `q` padded alike: a first layer's RGB image read a word per pixel.
    In float the 3-channel 7x7 layer of a uint8 ResNet-18 took 1.05 ms against onnxruntime's
    0.85 (Xeon, 2 threads)."""
    n, c, h, w = x.shape
    words = -(-c // WORD) * WORD
    if words != c:
        padded = emit.value(f"{x.name}:channel_words", (n, words, h, w), "uint8")
        emit.nodes.append(Node(f"{emit.node.name}/channel_words", Op.PAD, (x.name,), (padded,),
                               {"pads": (0, 0, 0, 0, 0, words - c, 0, 0), "mode": "constant", "value": 0}))
        q = np.concatenate([q, np.zeros((q.shape[0], words - c, *q.shape[2:]), q.dtype)], axis=1)
    else:
        padded = x.name
    blocked = emit.value(f"{x.name}@nchw{WORD}c", (n, words // WORD, h, w, WORD), "uint8")
    emit.nodes.append(Node(f"{emit.node.name}/words", Op.LAYOUT_TRANSFORM, (padded,), (blocked,),
                           {"src_block": 0, "dst_block": WORD}))
    return blocked, q


def _eligible(graph: Graph, node: Node) -> bool:
    """A dense convolution of whole words of channels (blocked) or of a plain input (`_in_words`),
    constant filters and bias, and a float input not read through a window."""
    attrs = node.attrs
    return (node.op is Op.CONV_NCHWC and attrs.get("group", 1) == 1 and not any(attrs.get("crop", (0, 0, 0, 0)))
            and attrs.get("in_block", 0) % WORD == 0 and attrs["out_block"] % WORD == 0
            and all(name in graph.constants for name in node.inputs[1:])
            and graph.values[node.inputs[0]].dtype == "float32")
