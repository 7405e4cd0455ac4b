"""Matrix products: MatMul (batched, possibly through operand views), Gemm, and Einsum, which
imports as sums, transposes, reshapes and batched MatMuls (view folding then reads the
transposes in place)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.graph.views import keeps_rows, operand_views, view_array, view_shape, view_tensor
from autosched.ops import integer_matmul as imm_ops
from autosched.ops import matmul as mm_ops
from autosched.opset import attention, recurrent
from autosched.opset.algebra import AlgebraOp, no_attrs
from autosched.opset.record import (
    ComputeArgs,
    OpDef,
    OpKind,
    Shape,
    UnsupportedTaskError,
    direct,
    on_output,
)
from autosched.schedule import Schedule
from autosched.target import CpuCapabilities
from autosched.te import Tensor


def _matmul_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    view_a, view_b = operand_views(node.attrs)
    a, b = view_shape(inputs[0].shape, view_a), view_shape(inputs[1].shape, view_b)
    if not a or not b:
        raise ValueError("operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {list(a)} @ {list(b)}")
    shape = (*np.broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return [(shape, inputs[0].dtype)]


def _matmul_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    view_a, view_b = operand_views(attrs)
    return [np.matmul(view_array(args[0], view_a), view_array(args[1], view_b))]


def _matmul_compute(args: ComputeArgs) -> list[Tensor]:
    view_a, view_b = operand_views(args.attrs)
    ins = args.inputs
    a, b = view_tensor(ins[0], view_a), view_tensor(ins[1], view_b)
    if a.ndim < 2 or b.ndim < 2:
        raise UnsupportedTaskError("MatMul with a 1-D operand is not compiled (only 2-D and batched operands)")
    m, n = a.shape[-2], b.shape[-1]
    # A seen through a view is packed (its index arithmetic then runs once per element, not per
    # FMA) unless the view keeps A's rows contiguous: then the index is affine and A is read in place
    packing = mm_ops.default_packing(m, n, _cpu(args), trans_a=not keeps_rows(ins[0].shape, view_a))
    return [mm_ops.matmul(a, b, epilogue=args.epilogues, packing=packing)]


def _integer_matmul_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    a, b = inputs[0], inputs[1]
    if (a.dtype, b.dtype) != ("uint8", "int8") or len(a.shape) < 2 or len(b.shape) != 2 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"expects uint8 A [..., m, k] and int8 B [k, n], got {a.dtype}{list(a.shape)} and "
                         f"{b.dtype}{list(b.shape)}")
    return [((*a.shape[:-1], b.shape[1]), "int32")]


def _integer_matmul_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [np.matmul(args[0].astype(np.int64), args[1].astype(np.int64)).astype(np.int32)]


def _integer_matmul_compute(args: ComputeArgs) -> list[Tensor]:
    mr, mb, vectors, _ = imm_ops.DEFAULT_TILE
    return [imm_ops.integer_matmul(args.inputs[0], args.inputs[1], vectors * _cpu(args).lanes(4), mr * mb,
                                   epilogue=args.epilogues)]


def _integer_matmul_schedule(outs: list[Tensor], lanes: int) -> Schedule:
    mr, mb, _, k_unroll = imm_ops.DEFAULT_TILE
    return imm_ops.schedule_integer_matmul(outs[0], lanes, mr, mb, k_unroll)


def _cpu(args: ComputeArgs) -> CpuCapabilities:
    """Matmul panels are sized for a CPU's registers and caches."""
    if not isinstance(args.caps, CpuCapabilities):
        raise UnsupportedTaskError("matrix products are compiled for CPUs only by the default compute")
    return args.caps


def _gemm_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    a, b = inputs[0].shape, inputs[1].shape
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"operands must be matrices, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if node.attrs["transA"] else a
    k2, n = (b[1], b[0]) if node.attrs["transB"] else b
    if k != k2:
        raise ValueError(f"inner dimensions differ: {k} and {k2}")
    if len(inputs) == 3:
        if np.broadcast_shapes(inputs[2].shape, (m, n)) != (m, n):
            raise ValueError(f"bias {list(inputs[2].shape)} does not broadcast to [{m}, {n}]")
    return [((m, n), inputs[0].dtype)]


def _gemm_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    a = args[0].T if attrs["transA"] else args[0]
    b = args[1].T if attrs["transB"] else args[1]
    y = attrs["alpha"] * np.matmul(a, b)
    if len(args) == 3:
        y = y + attrs["beta"] * args[2]
    return [np.asarray(y).astype(args[0].dtype, copy=False)]


def _gemm_compute(args: ComputeArgs) -> list[Tensor]:
    at, ins = args.attrs, args.inputs
    ta, tb = bool(at.get("transA", 0)), bool(at.get("transB", 0))
    m = ins[0].shape[1] if ta else ins[0].shape[0]
    n = ins[1].shape[0] if tb else ins[1].shape[1]
    return [mm_ops.gemm(ins[0], ins[1], ins[2] if len(ins) > 2 else None, at.get("alpha", 1.0), at.get("beta", 1.0),
                        ta, tb, epilogue=args.epilogues,
                        packing=mm_ops.default_packing(m, n, _cpu(args), trans_a=ta))]


def _import_gemm(imp: Importer, node: OnnxNode) -> None:
    attrs = {
        "alpha": float(node.attr("alpha", 1.0)),
        "beta": float(node.attr("beta", 1.0)),
        "transA": int(node.attr("transA", 0)),
        "transB": int(node.attr("transB", 0)),
    }
    imp.emit(node, Op.GEMM, [name for name in node.inputs if name], node.outputs, attrs)


def _einsum_terms(node: OnnxNode, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The equation's input terms and output term with each '...' spelled out as letters of
    its own (right-aligned, so ellipses broadcast), and the implicit output made explicit."""
    equation = str(node.attr("equation", "")).replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)}")
    spare = [c for c in "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ" if c not in equation]
    width = max((rank - len(t) + 3 for t, rank in zip(terms, ranks) if "..." in t), default=0)
    dots = "".join(spare[:width])
    terms = [t.replace("...", dots[width - (rank - len(t) + 3):]) if "..." in t else t for t, rank in zip(terms, ranks)]
    letters = "".join(terms)
    if not arrow:
        out = dots + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in dots))
    out = out.replace("...", dots)
    for term, rank in zip(terms, ranks):
        if (term and not term.isalpha()) or len(term) != rank:
            raise node.error(f"term {term!r} of {equation!r} does not match an operand of rank {rank}")
        if len(set(term)) != len(term):
            raise node.error(f"term {term!r} repeats a subscript (a diagonal): not supported")
    if len(set(out)) != len(out) or not set(out) <= set(letters):
        raise node.error(f"output {out!r} of {equation!r} repeats a subscript or names one no operand has")
    return terms, out


def _import_einsum(imp: Importer, node: OnnxNode) -> None:
    """Operands contracted pairwise, left to right: each pair's subscripts split into batch
    (both, kept), contracted (both, summed), and each side's own, the operands transposed and
    reshaped to [batch, rows, K] and [batch, K, cols] for one MatMul; a subscript only one
    operand has and no later one needs is summed first."""
    values = [imp.value(name) for name in node.inputs]
    terms, out = _einsum_terms(node, [len(v.shape) for v in values])
    size: dict[str, int] = {}
    for term, value in zip(terms, values):
        for letter, n in zip(term, value.shape):
            if size.setdefault(letter, n) != n:
                raise node.error(f"subscript {letter!r} is {size[letter]} in one operand and {n} in another")
    steps = iter(range(1 << 30))

    def step(op: Op, inputs: list[str], attrs: dict[str, Any]) -> str:
        return imp.emit_step(node, f"{op.value.lower()}{next(steps)}", op, inputs, attrs)

    def keep_only(name: str, term: str, kept: str) -> tuple[str, str]:
        """`name` summed over the subscripts not in `kept`, then in `kept`'s order."""
        summed = tuple(i for i, c in enumerate(term) if c not in kept)
        if summed:
            name = step(Op.REDUCE_SUM, [name], {"axes": summed, "keepdims": 0})
            term = "".join(c for c in term if c in kept)
        order = [c for c in kept if c in term]
        if list(term) != order:
            name, term = step(Op.TRANSPOSE, [name], {"perm": tuple(term.index(c) for c in order)}), "".join(order)
        return name, term

    def reshape(name: str, shape: tuple[int, ...]) -> str:
        return step(Op.RESHAPE, [name], {"shape": shape})

    name, term = values[0].name, terms[0]
    for k in range(1, len(terms)):
        later = set(out).union(*terms[k + 1:])
        other, other_term = values[k].name, terms[k]
        batch = [c for c in term if c in other_term and c in later]
        contracted = [c for c in term if c in other_term and c not in later]
        rows = [c for c in term if c not in other_term and c in later]
        cols = [c for c in other_term if c not in term and c in later]
        a, _ = keep_only(name, term, "".join(batch + rows + contracted))
        b, _ = keep_only(other, other_term, "".join(batch + contracted + cols))
        dims = [math.prod(size[c] for c in group) for group in (batch, rows, contracted, cols)]
        lead = (dims[0],) if batch else ()
        product = step(Op.MATMUL, [reshape(a, (*lead, dims[1], dims[2])), reshape(b, (*lead, dims[2], dims[3]))], {})
        name, term = reshape(product, tuple(size[c] for c in batch + rows + cols)), "".join(batch + rows + cols)
    name, _ = keep_only(name, term, out)
    imp.emit(node, Op.IDENTITY, [name], node.outputs, {})


RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.MATMUL, OpKind.ANCHOR, _matmul_shape, _matmul_reference, _matmul_compute,
          on_output(mm_ops.schedule_matmul), {"MatMul": direct(Op.MATMUL), "Einsum": Converter(_import_einsum),
                                                **recurrent.IMPORTERS, **attention.IMPORTERS},
          # products without operand views (views are folded in after substitutions): 2-D, and
          # a batch of rows by one matrix (a dense layer on [batch, tokens, features], BERT's
          # projections)
          algebra=(AlgebraOp("matmul", Op.MATMUL, (2, 2), lambda a, n: (a[0][0], a[1][1]),
                             lambda a: [(a[0][1], a[1][0])], no_attrs),
                   AlgebraOp("matmul3", Op.MATMUL, (3, 2), lambda a, n: (a[0][0], a[0][1], a[1][1]),
                             lambda a: [(a[0][2], a[1][0])], no_attrs),
                   # attention's products of activations, [batch, heads, rows, k] by [batch, heads, k, cols]
                   AlgebraOp("bmatmul", Op.MATMUL, (4, 4), lambda a, n: (a[0][0], a[0][1], a[0][2], a[1][3]),
                             lambda a: [(a[0][0], a[1][0]), (a[0][1], a[1][1]), (a[0][3], a[1][2])], no_attrs))),
    # made by a CPU pass, never imported (`graph/passes/integer_matmul.py`)
    OpDef(Op.INTEGER_MATMUL, OpKind.ANCHOR, _integer_matmul_shape, _integer_matmul_reference,
          _integer_matmul_compute, _integer_matmul_schedule),
    OpDef(Op.GEMM, OpKind.ANCHOR, _gemm_shape, _gemm_reference, _gemm_compute,
          on_output(mm_ops.schedule_matmul), {"Gemm": Converter(_import_gemm)},
          # a linear layer as PyTorch exports it: x [M, K] by a weight [N, K], plus a bias [N]
          algebra=(AlgebraOp("gemmt", Op.GEMM, (2, 2, 1), lambda a, n: (a[0][0], a[1][0]),
                             lambda a: [(a[0][1], a[1][1]), (a[2][0], a[1][0])],
                             lambda shapes, n: {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}),)),
)
