"""A MatMul of a 2-D B reads all of A's leading axes as rows of one product.

ONNX broadcasts a 2-D B over A's leading axes, so `A[d..., m, k] @ B[k, n]` is one product of
`prod(d) * m` rows: the same bytes in, the same bytes out. As imported it is a batched product
of `m` rows per batch element, and where `m` is 1 that is a matrix-vector product per element,
each re-reading all of B. PyTorch's `nn.MultiheadAttention` without `batch_first` (torchvision's
ViTs) feeds its input projection tokens-first, `(197, 1, 768) @ (768, 2304)`: 197 products of one
row, 15 ms a layer on an EPYC Zen 3 (2 threads; 46 GFLOP/s) where the same work as 197 rows
runs at the speed of the encoder's MLP products.

The rewrite reads A through a Reshape to `(rows, k)` (a view, folded into the product's operand)
and carries the elementwise chain that follows (bias, activation, residual) onto the 2-D
product, reshaping back after it, so the chain stays the product's epilogue. Where that would
end in a graph output, the product stays as it is: the Reshape back into the caller's buffer
would be a copy kernel.
"""
from __future__ import annotations

import heapq
import math

from autosched.graph.ir import Graph, Node, Op, toposort
from autosched.graph.passes.rewrite import NewValues, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of


def matmul_rows(graph: Graph) -> Graph:
    """`graph` with every batched MatMul of a 2-D B (`_batched_rows`) a product of rows."""
    consumers = graph.consumers()
    position = {id(n): k for k, n in enumerate(graph.nodes)}
    outputs = {v.name for v in graph.outputs}
    constants = dict(graph.constants)
    value = NewValues(graph)
    replaced: dict[str, list[Node]] = {}  # a rewritten product -> its nodes and its chain's
    dropped: set[str] = set()
    for node in graph.nodes:
        if node.op is not Op.MATMUL or node.name in dropped or not _batched_rows(graph, node):
            continue
        chain = _epilogue(graph, node, consumers, position, outputs)
        if (chain[-1] if chain else node).outputs[0] in outputs:
            continue  # the Reshape back would be a copy into the caller's buffer
        a, out = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
        rows, k, n = math.prod(a.shape[:-1]), a.shape[-1], out.shape[-1]
        flat = value(f"{a.name}_rows", (rows, k), a.dtype)
        product = value(f"{out.name}_rows", (rows, n), out.dtype)
        new = [Node(f"{node.name}/rows", Op.RESHAPE, (a.name,), (flat,), {"shape": (rows, k)}),
               Node(node.name, Op.MATMUL, (flat, node.inputs[1]), (product,), node.attrs)]
        source = node.outputs[0]
        rows_of = {source: product}  # a value of the product's shape -> its rows
        for step in chain:
            inputs = []
            for name in step.inputs:
                if name in rows_of:
                    inputs.append(rows_of[name])
                elif name in constants:
                    array = constants[name]
                    shape = (rows, n) if array.shape == out.shape else (array.size,)
                    flat_const = value(f"{name}_rows", shape, graph.values[name].dtype)
                    constants[flat_const] = array.reshape(shape)
                    inputs.append(flat_const)
                else:
                    other = graph.values[name]
                    shape = (rows, n) if other.shape == out.shape else (other.size,)
                    viewed = value(f"{name}_rows", shape, other.dtype)
                    new.append(Node(f"{step.name}/rows_{len(inputs)}", Op.RESHAPE, (name,), (viewed,), {"shape": shape}))
                    inputs.append(viewed)
            source = step.outputs[0]
            rows_of[source] = value(f"{source}_rows", (rows, n), graph.values[source].dtype)
            new.append(Node(step.name, step.op, tuple(inputs), (rows_of[source],), step.attrs))
            dropped.add(step.name)
        new.append(Node(f"{node.name}/unrows", Op.RESHAPE, (rows_of[source],), (source,), {"shape": out.shape}))
        replaced[node.name] = new
    if not replaced:
        return graph
    nodes = [m for node in graph.nodes if node.name not in dropped for m in replaced.get(node.name, (node,))]
    available = [*(v.name for v in graph.inputs), *constants]  # a residual may come after the product
    return rebuild(graph, toposort(nodes, available), constants, value.values)


def _batched_rows(graph: Graph, node: Node) -> bool:
    """A float MatMul of a 2-D B whose A has leading axes of more than one element."""
    a, b = (graph.values[name] for name in node.inputs[:2])
    return (len(b.shape) == 2 and len(a.shape) >= 3 and math.prod(a.shape[:-2]) > 1
            and a.dtype.startswith("float") and not node.attrs)


def _epilogue(graph: Graph, node: Node, consumers: dict[str, list[Node]], position: dict[int, int],
              outputs: set[str]) -> list[Node]:
    """The elementwise nodes after `node` that can run on its rows (`_on_rows`), in graph order:
    the longest run of them whose only value read elsewhere is the last one's output, as fusion
    takes an epilogue (a GELU reads its input twice)."""
    shape = graph.values[node.outputs[0]].shape
    region, taken = {node.outputs[0]}, []
    # the readers of the region, in graph order: a scan of every later node for each product
    # made this pass quadratic (MaxViT's 7,200 products' epilogues: 5 s in a substitution search)
    heap = [(position[id(r)], r.name, r) for r in consumers.get(node.outputs[0], ())]
    heapq.heapify(heap)
    seen = {id(r) for _, _, r in heap}
    while heap:
        _, _, later = heapq.heappop(heap)
        if _on_rows(graph, later, region, shape):
            taken.append(later)
            region.add(later.outputs[0])
            for reader in consumers.get(later.outputs[0], ()):
                if id(reader) not in seen:
                    seen.add(id(reader))
                    heapq.heappush(heap, (position[id(reader)], reader.name, reader))
    for end in range(len(taken), 0, -1):
        inside = {node.name} | {n.name for n in taken[:end]}
        read_outside = {v for n in (node, *taken[:end]) for v in n.outputs
                        if v in outputs or any(r.name not in inside for r in consumers.get(v, ()))}
        if read_outside == {taken[end - 1].outputs[0]}:
            return taken[:end]
    return []


def _on_rows(graph: Graph, node: Node, region: set[str], shape: tuple[int, ...]) -> bool:
    """Whether `node`, reading values of `region` (of `shape`), can run on their rows: one
    elementwise output of `shape` whose other inputs are scalars, vectors along the last axis,
    or of `shape` too."""
    if kind_of(node.op) is not OpKind.ELEMWISE or len(node.outputs) != 1:
        return False
    if graph.values[node.outputs[0]].shape != shape:
        return False
    for name in node.inputs:
        if name in region:
            continue
        other = graph.values[name].shape
        along_last = other[-1:] in ((shape[-1],), (1,)) and math.prod(other[:-1]) == 1
        if not (math.prod(other) == 1 or along_last or other == shape):
            return False
    return True

