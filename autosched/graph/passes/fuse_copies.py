"""Compose a chain of copies into one (`Op.COPY_CHAIN`): one kernel, one pass over the data.

Layout planning and the rewrites after it leave copies back to back: a transposed convolution's
phases go back to plain channels, are interleaved, cropped and put in blocks again (four kernels,
each reading and writing the whole tensor); a dilated convolution's input goes into blocks and
then into phases. Each copy is an index map, so their composition is one, and the injective
schedule inlines every stage of the composed expression into its last: what the chain writes at
the end is read once from where the first copy read it.

A chain is a run of one-input copies, each the only reader of the one before and none a graph
output. Views at its ends (`aliases.py`: Reshapes, Slices along leading axes) stay outside, as
the views they are, and so does a Reshape at its head that is a kernel (of a graph input, which
no view can alias): it streams the cold input once, and the copy after it gathers from cache.
Composed, ViT's patch embedding read its input patch by patch from memory: 0.32 ms in the model
against 0.09 + 0.14 for the Reshape and the Transpose, though 0.09 ms against 0.02 + 0.09 alone
(EPYC Zen 3, 2 threads). A chain of fewer than two copies that would run a kernel is left alone.

A Concat that is a kernel (one of its inputs is already another value's bytes, so it cannot
take them in place) heads a chain too: the copies after it follow, and so do the copies that
make each of its inputs (a padded convolution's result converted back to plain and sliced), as
branches of the chain, one input each. A ShuffleNetV2 unit's slice of its branch, Concat with
the passed-on half (a view of the previous shuffle) and channel shuffle ran as three kernels
(0.011 + 0.005 + 0.006 ms at 116 channels on 28x28), as one 0.016 ms, the block 1.10x faster
(EPYC Zen 5, 2 threads, `models.py --baseline`, 30 runs). A layout conversion after the
Concat is not taken in: its own schedule does better than the chain's (an Inception block's
concat back to plain ran 0.049 ms as one chain).
"""
from __future__ import annotations

from collections.abc import Callable

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.aliases import find_aliases
from autosched.graph.passes.rewrite import rebuild
from autosched.opset.chain import chain_step

#: the copies a chain composes: one input each, static attributes
CHAINED = frozenset({Op.RESHAPE, Op.TRANSPOSE, Op.LAYOUT_TRANSFORM, Op.SLICE})


def fuse_copies(graph: Graph) -> Graph:
    """`graph` with each chain of at least two copies that run kernels replaced by one CopyChain."""
    consumers, producers = graph.consumers(), graph.producers()
    outputs = {v.name for v in graph.outputs}
    free = find_aliases(graph).free

    def chained(node: Node) -> bool:
        return node.op in CHAINED and len(node.inputs) == 1 and len(node.outputs) == 1

    def following(node: Node) -> Node | None:
        readers = consumers.get(node.outputs[0], [])
        if node.outputs[0] in outputs or len(readers) != 1 or not chained(readers[0]):
            return None
        return readers[0]

    def only_reader(node: Node, reader: Node) -> bool:
        return node.outputs[0] not in outputs and [r is reader for r in consumers.get(node.outputs[0], [])] == [True]

    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    for node in graph.nodes:  # concats that are kernels, with the copies into and after them
        if node.op is not Op.CONCAT or node.name in free:
            continue
        chain = [node]
        while (nxt := following(chain[-1])) is not None and nxt.op is not Op.LAYOUT_TRANSFORM:
            chain.append(nxt)
        while len(chain) > 1 and chain[-1].name in free:
            chain.pop()
        branches = [_branch(name, producers, chained, only_reader, node) for name in node.inputs]
        nodes = [n for b in branches for n in b] + chain
        if sum(n.name not in free for n in nodes) < 2 or any(id(n) in removed for n in nodes):
            continue
        replaced[id(node)] = Node(chain[-1].name, Op.COPY_CHAIN, tuple(b[0].inputs[0] if b else name for b, name
                                                                     in zip(branches, node.inputs)),
                                  chain[-1].outputs, {
                                      "branches": tuple(tuple(chain_step(n, graph.values[n.outputs[0]].shape) for n in b)
                                                        for b in branches),
                                      "steps": tuple(chain_step(n, graph.values[n.outputs[0]].shape) for n in chain)})
        removed.update(id(n) for n in nodes if n is not node)
    for node in graph.nodes:
        before = producers.get(node.inputs[0])
        if (not chained(node) or id(node) in removed or id(node) in replaced
                or (before is not None and chained(before) and following(before) is node)):
            continue  # not a chain's first node
        chain = [node]
        while (nxt := following(chain[-1])) is not None and id(nxt) not in removed:
            chain.append(nxt)
        while chain and (chain[0].name in free or chain[0].op is Op.RESHAPE):
            chain.pop(0)
        while chain and chain[-1].name in free:
            chain.pop()
        if sum(n.name not in free for n in chain) < 2:
            continue
        steps = tuple(chain_step(n, graph.values[n.outputs[0]].shape) for n in chain)
        replaced[id(chain[0])] = Node(chain[-1].name, Op.COPY_CHAIN, chain[0].inputs, chain[-1].outputs,
                                      {"steps": steps})
        removed.update(id(n) for n in chain[1:])
    if not replaced:
        return graph
    return rebuild(graph, [replaced.get(id(n), n) for n in graph.nodes if id(n) not in removed])


def _branch(name: str, producers: dict[str, Node], chained: Callable[[Node], bool],
            only_reader: Callable[[Node, Node], bool], reader: Node) -> list[Node]:
    """The copies that make a concat's input `name`, first to last, each read only by the next
    (a padded convolution's result converted back to plain and sliced)."""
    branch: list[Node] = []
    node = producers.get(name)
    while node is not None and chained(node) and only_reader(node, branch[0] if branch else reader):
        branch.insert(0, node)
        node = producers.get(node.inputs[0])
    return branch
