"""Operator fusion: partition the graph into the groups that become kernels.

An anchor (Conv, Gemm, MatMul) absorbs the elementwise nodes after it
— bias add, activation, residual add, a GELU written as an Erf chain — so
their work happens while the anchor's result is still in registers.  A run
of elementwise nodes with no anchor before it becomes one group the same
way.  Reductions, pools and data movement are groups of their own, but for the Reshapes,
Splits and Concats that only say where bytes live, which are no kernels at all (`aliases.py`).

A node joins a group only if the group still has one way out: every value
computed inside, except the group's single output, is read only inside the
group.  That allows diamonds (GELU reads its input twice) but never a
kernel whose intermediate someone else needs.

A sigmoid ends a matrix product's epilogue where the product has rows to
spare (`_keeps_out`): the SiLU chain after it is a kernel of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from autosched.graph.ir import Graph, Node, Op, toposort
from autosched.graph.passes.aliases import find_aliases
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

# Longest epilogue considered; far beyond any real activation chain, it only
# bounds the search in pathological graphs.
MAX_EPILOGUE = 32
#: rows of a matrix product from which a sigmoid stays out of its epilogue (`_keeps_out`)
SIGMOID_OUT_ROWS = 16

_GRAPH_OUTPUT = -1  # stands for "read by the caller" among a value's readers


@dataclass(frozen=True, eq=False)
class FusedGroup:
    """One future kernel: an anchor node and the elementwise nodes fused after it.

    `epilogue` is in execution order; every epilogue node has exactly one
    output, of the anchor's output shape.  `inputs` are the values the group
    reads from outside (graph inputs, constants, other groups' outputs) in
    order of first use, anchor operands first.  `outputs` are the values it
    writes for others: the last epilogue node's output, or all outputs of an
    anchor without epilogue.
    """

    kind: OpKind
    anchor: Node
    epilogue: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.anchor.name

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.anchor, *self.epilogue)


def fuse(graph: Graph) -> list[FusedGroup]:
    """The fused groups of `graph`, in an order where producers come first."""
    consumers = graph.consumers()
    graph_outputs = {value.name for value in graph.outputs}

    def readers(value: str) -> set[int]:
        ids = {id(node) for node in consumers.get(value, [])}
        return ids | {_GRAPH_OUTPUT} if value in graph_outputs else ids

    assigned: set[int] = set()
    groups: list[FusedGroup] = []
    for index, node in enumerate(graph.nodes):
        if id(node) in assigned:
            continue
        epilogue: list[Node] = []
        if kind_of(node.op) in (OpKind.ANCHOR, OpKind.ELEMWISE) and len(node.outputs) == 1:
            epilogue = _epilogue(graph, index, readers, assigned)
        assigned.update(id(member) for member in (node, *epilogue))
        groups.append(_make_group(node, epilogue))
    available = [*(v.name for v in graph.inputs), *graph.constants]
    free = find_aliases(graph).free
    return [g for g in toposort(groups, available) if g.anchor.name not in free]


def _epilogue(graph: Graph, start: int, readers: Callable[[str], set[int]], assigned: set[int]) -> list[Node]:
    """Longest run of elementwise nodes after `graph.nodes[start]` that keeps one exit."""
    anchor = graph.nodes[start]
    chain_shape = graph.values[anchor.outputs[0]].shape
    unread = {anchor.outputs[0]: readers(anchor.outputs[0])}  # inside value → readers not yet inside
    members: list[Node] = []
    best: list[Node] = []
    for node in graph.nodes[start + 1:]:
        read = [name for name in node.inputs if name in unread]
        if not read:
            continue
        if (
            id(node) in assigned
            or kind_of(node.op) is not OpKind.ELEMWISE
            or len(node.outputs) != 1
            or graph.values[node.outputs[0]].shape != chain_shape
            or len(members) == MAX_EPILOGUE
            or _keeps_out(anchor, node, chain_shape)
        ):
            break
        members.append(node)
        for name in read:
            unread[name].discard(id(node))
        out = node.outputs[0]
        unread[out] = readers(out)
        if not any(pending for name, pending in unread.items() if name != out):
            best = list(members)
    return best


def _keeps_out(anchor: Node, node: Node, shape: tuple[int, ...]) -> bool:
    """Whether `node` stays out of the epilogue of `anchor`: a sigmoid after a MatMul or Gemm
    of at least `SIGMOID_OUT_ROWS` rows.

    Why: Llama's SwiGLU gate projection (128 x 512 by 512 x 1376, then x * sigmoid(x) * up)
    ran 1.93-2.05 ms with the chain in its epilogue against 1.42-1.46 for the up projection of
    the same shape, and 1.47 plus 0.09 for the chain as a kernel of its own; the whole block ran
    0.94 of the fused build's time in two alternated runs, 0.96 at width 768 and 64 tokens,
    0.98 at 256 tokens (EPYC Zen 3, AVX2, 2 threads). Inlined, outlined into a function, with
    its operand prefetched or with loops aligned, the epilogue stayed slow; why is not known
    (no hardware counters on these hosts). A decode step's single row went the other way
    (1.02: the extra kernel costs more than the epilogue), and so did convolutions' SiLU
    (an EfficientNet block 1.2x slower with its sigmoids apart), which keep it; tanh and erf
    GELU epilogues (ViT's, BERT's) cost the same fused.
    """
    if node.op is not Op.SIGMOID or anchor.op not in (Op.MATMUL, Op.GEMM):
        return False
    return math.prod(shape[:-1]) >= SIGMOID_OUT_ROWS


def _make_group(anchor: Node, epilogue: list[Node]) -> FusedGroup:
    produced = {out for node in (anchor, *epilogue) for out in node.outputs}
    inputs = dict.fromkeys(name for node in (anchor, *epilogue) for name in node.inputs if name not in produced)
    outputs = (epilogue[-1].outputs[0],) if epilogue else anchor.outputs
    return FusedGroup(kind_of(anchor.op), anchor, tuple(epilogue), tuple(inputs), tuple(outputs))
