"""Split-K for GPUs: a deep product whose output is too small to fill the GPU, summed in parts.

A MatMul of `R` rows and `N` columns gives a GPU kernel of about R/64 × N/64 blocks; where that
is a fraction of the multiprocessors, most of them idle however the blocks are shaped, and each
busy one walks the whole reduction K alone. BERT-base's FFN-down GEMM (128 × 768, K = 3072)
has 24 such blocks: on an H200 its fp32 fallback ran 3.5× slower than cuBLAS's, while the
FFN-up GEMM of the same FLOPs (128 × 3072, K = 768: 96 blocks) ran 1.6×. Split in S parts along
K, the product becomes a batched one of S times as many blocks, each reducing K/S, and a
reduction over the S partial products (S × R × N floats, read once) finishes it:

    x[..., m, k] · W[k, n]  ->  ReduceSum_s( x'[s, ..., m, kk] · W'[s, 1.., kk, n] )

where x' is x viewed as [..., m, S, K/S] and transposed to put S first (a view the MatMul's
operand copy folds in: kk stays innermost, so the A tile loads stay contiguous) and W' is W
reshaped (a constant folds). The result has the MatMul's shape and name, so its epilogue (bias,
residual add) follows unchanged, as a kernel of its own. The summation order changes, within
float32 rounding as any blocked GEMM's does.

A convolution is a GEMM of OC rows, N·OH·OW columns and K = C·KH·KW (its implicit-GEMM form),
and ResNet-18's last stage (512 channels of 7 × 7: 8 tiles of 64 × 64 over K = 4608) is such a
product. Its parts are input-channel slices: one convolution of S groups, whose group s applies
W's slice s to input channels s·C/S… and yields its own OC channels, then the sum over the
groups:

    Conv(x, W, b)  ->  ReduceSum_s( Reshape_{N, S, OC, OH, OW}( Conv(x, W'', b'', group = S) ) )

W'' stacks W's S input-channel slices along the output channels (a constant computed here) and
b'' is b followed by zeros, so the bias is added once. The Reshape is a copy kernel (only
MatMuls read through views) of S · OC · OH · OW floats: 0.8 MB for ResNet-18's last stage. The
GPU templates run groups this wide as implicit GEMMs batched over the groups.
"""
from __future__ import annotations

import math

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import NewValues, rebuild

#: the output tile a fallback block computes, per side
TILE = 64
#: the reduction each part keeps at least: shorter ones pay more for the extra pass than they gain
MIN_PART = 256
MAX_PARTS = 8


def parts(rows: int, cols: int, k: int, blocks: int, window: int = 1) -> int:
    """How many parts to split a product of `rows` × `cols` over `k` into for a grid of about
    `blocks` blocks: 1 where its own grid fills half of it or the reduction is not deep (K below
    twice the larger side), else the largest power of two that keeps the grid within `blocks`,
    divides K into parts of whole `window`s (a convolution's parts are whole input channels) and
    leaves each part MIN_PART long."""
    tiles = math.ceil(rows / TILE) * math.ceil(cols / TILE)
    if 2 * tiles > blocks or k < 2 * max(rows, cols):
        return 1
    s = 1
    while 2 * s <= MAX_PARTS and 2 * s * tiles <= blocks and (k // window) % (2 * s) == 0 \
            and k // (2 * s) >= MIN_PART:
        s *= 2
    return s


def split_k(graph: Graph, blocks: int) -> Graph:
    """`graph` with each MatMul of a 2-D right operand and each ungrouped 2-D convolution of
    constant filters that `parts` splits rewritten as a product of the parts and their sum."""
    nodes: list[Node] = []
    value = NewValues(graph)
    constants = dict(graph.constants)

    for node in graph.nodes:
        if node.op is Op.CONV:
            nodes += _split_conv(graph, node, blocks, value, constants)
            continue
        x, w = (graph.values[name] for name in node.inputs[:2]) if node.op is Op.MATMUL else (None, None)
        if x is None or w is None or len(w.shape) != 2 or len(x.shape) < 2 or node.attrs:
            nodes.append(node)
            continue
        *lead, k = x.shape
        n = w.shape[1]
        s = parts(math.prod(lead), n, k, blocks)
        if s == 1:
            nodes.append(node)
            continue
        out = graph.values[node.outputs[0]]
        rank = len(lead)
        viewed = value(f"{x.name}_split{s}", (*lead, s, k // s), x.dtype)
        moved = value(f"{x.name}_parts{s}", (s, *lead, k // s), x.dtype)
        weights = value(f"{w.name}_parts{s}", (s, *([1] * (rank - 1)), k // s, n), w.dtype)
        partial = value(f"{out.name}_partial{s}", (s, *lead, n), out.dtype)
        nodes += [
            Node(f"{node.name}/split_k_view", Op.RESHAPE, (x.name,), (viewed,), {"shape": (*lead, s, k // s)}),
            Node(f"{node.name}/split_k_parts", Op.TRANSPOSE, (viewed,), (moved,),
                 {"perm": (rank, *range(rank), rank + 1)}),
            Node(f"{node.name}/split_k_weights", Op.RESHAPE, (w.name,), (weights,),
                 {"shape": (s, *([1] * (rank - 1)), k // s, n)}),
            Node(f"{node.name}/split_k", Op.MATMUL, (moved, weights), (partial,)),
            Node(f"{node.name}/split_k_sum", Op.REDUCE_SUM, (partial,), (out.name,), {"axes": (0,), "keepdims": 0}),
        ]
    return rebuild(graph, nodes, constants, value.values) if value.values else graph


def _split_conv(graph: Graph, node: Node, blocks: int, value: NewValues, constants: dict[str, np.ndarray]) -> list[Node]:
    """The nodes that compute `node`, a convolution: itself, or its parts and their sum (see the
    module's docstring), the parts' filters and bias added to `constants`."""
    w = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    bias = constants.get(node.inputs[2]) if len(node.inputs) > 2 else None
    if w is None or w.ndim != 4 or node.attrs.get("group", 1) != 1 or (len(node.inputs) > 2 and bias is None):
        return [node]
    out = graph.values[node.outputs[0]]
    n, oc, oh, ow = out.shape
    o, c, kh, kw = w.shape
    s = parts(oc, n * oh * ow, c * kh * kw, blocks, kh * kw)
    if s == 1:
        return [node]
    filters = value(f"{node.inputs[1]}_parts{s}", (s * o, c // s, kh, kw), out.dtype)
    constants[filters] = np.ascontiguousarray(w.reshape(o, s, c // s, kh, kw).transpose(1, 0, 2, 3, 4)
                                              .reshape(s * o, c // s, kh, kw))
    inputs = [node.inputs[0], filters]
    if bias is not None:
        inputs.append(value(f"{node.inputs[2]}_parts{s}", (s * o,), out.dtype))
        constants[inputs[-1]] = np.concatenate([bias, np.zeros((s - 1) * o, bias.dtype)])
    partial = value(f"{out.name}_partial{s}", (n, s * o, oh, ow), out.dtype)
    grouped = value(f"{out.name}_parts{s}", (n, s, o, oh, ow), out.dtype)
    return [
        Node(f"{node.name}/split_k", Op.CONV, tuple(inputs), (partial,), {**node.attrs, "group": s}),
        Node(f"{node.name}/split_k_parts", Op.RESHAPE, (partial,), (grouped,), {"shape": (n, s, o, oh, ow)}),
        Node(f"{node.name}/split_k_sum", Op.REDUCE_SUM, (grouped,), (out.name,), {"axes": (1,), "keepdims": 0}),
    ]
