"""Values that are another value's bytes: the data movement that needs no kernel.

With one arena and static shapes, some copies are only a matter of where bytes live:

- a Reshape of a dense intermediate renames its bytes (split-K's Reshape between a conv and its
  sum cost 10 µs a call on an H200, 8% of ResNet-18, as a copy);
- a Split along an axis with only unit axes before it (channels of a batch of one, plain or in
  blocks) cuts its input into consecutive byte ranges: each part is its input's bytes from an
  offset (an Inception block's merged 1x1 convolutions, split back into their branches);
- a Slice of one range of such an axis (step 1, every other axis whole) is one of those ranges;
- a Concat along such an axis is the same ranges the other way round: each input is written by
  its producer straight into its range of the output (an Inception block's four branches, whose
  concat ran 0.03-0.04 ms at 28x28 on a Zen 4, 4% of the block; a SqueezeNet fire module's two
  expands).

Each such node is no kernel where every offset is a multiple of the readers' vector alignment,
and no byte is a graph input, a constant or a graph output (those live outside the arena, and an
output needs a buffer of its own). A Concat takes its inputs in only where none of them is
already another value's bytes, and they are distinct. The memory plan gives each alias its
root's bytes from the offset and keeps the root alive from its first part's producer to its
last reader; fusion drops the nodes that are no kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autosched.graph.ir import Graph, Node, Op

#: bytes: one cache line, and enough for any SIMD load; every buffer's and every offset into a root
ALIGNMENT = 64


@dataclass(frozen=True)
class Aliases:
    """`views`: each alias → (its root value, its byte offset there), chains resolved;
    `free`: the names of the nodes that need no kernel."""

    views: dict[str, tuple[str, int]] = field(default_factory=dict)
    free: frozenset[str] = frozenset()


def find_aliases(graph: Graph, alignment: int = ALIGNMENT) -> Aliases:
    """The Reshapes, Splits, Slices and Concats of `graph` that need no kernel, and the bytes they name."""
    outputs = {v.name for v in graph.outputs}
    external = {v.name for v in graph.inputs} | set(graph.constants) | outputs
    views: dict[str, tuple[str, int]] = {}
    free: set[str] = set()
    for node in graph.nodes:  # producers first
        if any(name in outputs for name in node.outputs) or node.op not in (Op.RESHAPE, Op.SPLIT, Op.CONCAT, Op.SLICE):
            continue
        if node.op is Op.CONCAT:
            parts = _concat_parts(graph, node, external, views, alignment)
        else:
            root, base = views.get(node.inputs[0], (node.inputs[0], 0))
            parts = {} if root in external else {out: (root, base + offset)
                                                 for out, offset in _split_parts(graph, node, alignment).items()}
        if parts:
            views.update(parts)
            free.add(node.name)
    return Aliases({name: _resolve(views, name) for name in views}, frozenset(free))


def _ranges(graph: Graph, value: str, axis: int, sizes: list[int], alignment: int) -> list[int] | None:
    """Byte offsets of consecutive ranges of `sizes` along `axis` of `value`; None where the axes
    before it are not all 1, or an offset is off the alignment."""
    shape = graph.values[value].shape
    if any(d != 1 for d in shape[:axis]) or not shape[axis]:
        return None
    row = graph.values[value].nbytes // shape[axis]
    offsets = [row * sum(sizes[:k]) for k in range(len(sizes))]
    return offsets if all(o % alignment == 0 for o in offsets) else None


def _split_parts(graph: Graph, node: Node, alignment: int) -> dict[str, int]:
    if node.op is Op.RESHAPE:
        return {node.outputs[0]: 0}
    if node.op is Op.SLICE:
        return _slice_part(graph, node, alignment)
    offsets = _ranges(graph, node.inputs[0], node.attrs["axis"], list(node.attrs["split"]), alignment)
    return dict(zip(node.outputs, offsets)) if offsets is not None else {}


def _slice_part(graph: Graph, node: Node, alignment: int) -> dict[str, int]:
    """A Slice that keeps every axis whole but one, cut in one step-1 range, with only unit axes
    before it: consecutive bytes of its input (WaveNet's gate, a convolution's output cut in two
    halves of whole channel blocks)."""
    shape = graph.values[node.inputs[0]].shape
    at = node.attrs
    cut = [a for a, (b, e, t, n) in enumerate(zip(at["starts"], at["ends"], at["steps"], shape))
           if (b, min(e, n), t) != (0, n, 1)]
    if len(cut) != 1:
        return {}
    axis = cut[0]
    start, end, step = at["starts"][axis], min(at["ends"][axis], shape[axis]), at["steps"][axis]
    if step != 1 or not 0 <= start < end:
        return {}
    offsets = _ranges(graph, node.inputs[0], axis, [start, end - start], alignment)
    return {node.outputs[0]: offsets[1]} if offsets is not None else {}


def _concat_parts(graph: Graph, node: Node, external: set[str], views: dict[str, tuple[str, int]],
                  alignment: int) -> dict[str, tuple[str, int]]:
    out, axis = node.outputs[0], node.attrs["axis"]
    taken = any(name in external or name in views for name in node.inputs) or len(set(node.inputs)) < len(node.inputs)
    if taken:
        return {}
    offsets = _ranges(graph, out, axis, [graph.values[name].shape[axis] for name in node.inputs], alignment)
    return {name: (out, offset) for name, offset in zip(node.inputs, offsets)} if offsets is not None else {}


def _resolve(views: dict[str, tuple[str, int]], name: str) -> tuple[str, int]:
    """The root and offset of `name`, through chains (a split of a part of a concat)."""
    root, offset = views[name]
    while root in views:
        root, more = views[root]
        offset += more
    return root, offset
