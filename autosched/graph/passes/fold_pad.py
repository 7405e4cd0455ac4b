"""Zero padding of the spatial axes that only convolutions read becomes their own padding.

Exporters write `F.pad` before a convolution as a Pad node: WaveNet's and temporal convolution
networks' causal padding (only before the sequence), TensorFlow ports' "SAME" padding of strided
layers (one more after than before). As a node it is a kernel and a copy of the whole map, and
between a 1-D convolution and the next it keeps the map out of channel blocks. A convolution
pads with zeros itself, on each side by its own amount: a constant-zero Pad of the spatial axes
alone, read only by convolutions, is added to theirs and goes.
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import fold_into_readers


def fold_pad(graph: Graph) -> Graph:
    """`graph` with every foldable Pad (`_spatial_pads`) folded into the convolutions reading it."""
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    folded: dict[str, tuple[str, tuple[int, ...]]] = {}  # a Pad's output -> (its input, its spatial pads)
    for node in graph.nodes:
        pads = _spatial_pads(graph, node)
        readers = consumers.get(node.outputs[0], [])
        if (pads is not None and node.outputs[0] not in outputs and readers
                and all(r.op is Op.CONV and r.inputs[0] == node.outputs[0] and node.outputs[0] not in r.inputs[1:]
                        for r in readers)):
            folded[node.outputs[0]] = (node.inputs[0], pads)
    if not folded:
        return graph

    def padded(conv: Node, extra: tuple[int, ...]) -> dict:
        own = conv.attrs.get("pads", (0,) * len(extra))
        return {**conv.attrs, "pads": tuple(a + b for a, b in zip(own, extra))}
    return fold_into_readers(graph, folded, Op.PAD, Op.CONV, padded)


def _spatial_pads(graph: Graph, node: Node) -> tuple[int, ...] | None:
    """A constant-zero Pad's widths on the spatial axes (begins, then ends), or None where it pads
    the batch or channels, crops (a negative width), or fills with anything but zero."""
    if node.op is not Op.PAD or node.attrs.get("mode", "constant") != "constant" or node.attrs.get("value", 0) != 0:
        return None
    pads = tuple(node.attrs["pads"])
    rank = len(graph.values[node.inputs[0]].shape)
    if rank < 3 or min(pads) < 0 or any(pads[a] or pads[rank + a] for a in (0, 1)):
        return None
    return (*pads[2:rank], *pads[rank + 2:])
