"""A tensorized reduction nest as one warp-level `mma.sync`: each lane's fragments, derived
from the scalar loops the schedule would otherwise run.

The scalar nest a lane runs is `C[c(rows, cols)] += A[a(rows, k)] · B[b(k, cols)]` over k < 8,
rows < 2, cols < 2, for the output rows lane_row + 8·rows and columns 2·lane_col + cols of a
16 × 8 tile. The m16n8k8 instruction gives a lane the same accumulator elements
(c0..c3 = rows {g, g+8} × columns {2t, 2t+1}, g = lane_row, t = lane_col) but wants other
elements of A and B than the lane's own scalar loops read (PTX ISA, "Matrix Fragments for
mma.m16n8k8" with .tf32): a0..a3 = A at (g, t), (g+8, t), (g, t+4), (g+8, t+4) and b0, b1 = B at
(t, g), (t+4, g). Those are the scalar loads with k set to t or t+4 and, for B, the column set to
g, i.e. lane_col → g / 2 and cols → g % 2. With .f16 or .bf16 inputs ("Matrix Fragments for
mma.m16n8k8" with .f16/.bf16) a lane holds pairs of k instead: a0..a3 = A at (g, 2t), (g, 2t+1),
(g+8, 2t), (g+8, 2t+1) and b0, b1 = B at (2t, g), (2t+1, g), each pair one 32-bit register.

Under .tf32, where A sits in shared memory with k contiguous and each row's k = 0, 4 start on a
16-byte boundary, A's four registers are one `ldmatrix.x4` ("Warp-level matrix load
instruction: ldmatrix"; it moves 16-bit pairs, so a 32-bit word arrives whole): lanes 8j..8j+7
hand it the rows of matrix j, and lane i gets word i % 4 of row i / 4 of each matrix. With
matrix j = a_j's 8 × 4 tile (rows + 8·(j % 2), k + 4·(j / 2)), lane i = 4g + t then receives
A(g + 8·(j % 2), t + 4·(j / 2)) = a_j. Lane l = 4g + t hands row l % 8 = 4(g % 2) + t of matrix
l / 8 = g / 2: `a_rows` is A's index there at k = 4·(g / 4).
"""
from __future__ import annotations

from autosched.lower import arith
from autosched.lower.ir import Store, WarpMma
from autosched.schedule import MmaTile, ScheduleError
from autosched.te.expr import BinOp, Const, Expr, Load, free_vars, substitute


def _c(v: int) -> Const:
    return Const(v, "int32")


def mma_statement(store: Store, tile: MmaTile, ranges: dict, stage: str) -> WarpMma:
    """The WarpMma that computes what `store`, run over `tile.loops`, computes for every lane."""
    value = store.value
    if not (isinstance(value, BinOp) and value.op == "add" and isinstance(value.a, Load)
            and value.a.source is store.buffer and isinstance(value.b, BinOp) and value.b.op == "mul"
            and isinstance(value.b.a, Load) and isinstance(value.b.b, Load)):
        raise ScheduleError(f"stage {stage}: tensorize needs a sum of products of two loads "
                            f"(C += A · B), not {value!r}")
    k, rows, cols = (iv.var for iv in tile.loops)
    g, t = tile.lane_row.var, tile.lane_col.var
    x, y = value.b.a, value.b.b
    a, b = (x, y) if rows in free_vars(x) else (y, x)
    if cols in free_vars(a) or t in free_vars(a) or rows in free_vars(b) or g in free_vars(b):
        raise ScheduleError(f"stage {stage}: tensorize needs A indexed by (row, k) and B by (k, column): "
                            f"A is {a!r}, B is {b!r}")

    def at(e: Expr, m: dict) -> Expr:
        return arith.simplify(substitute(e, m), ranges)

    if tile.precision == "tf32":
        a_at = [{rows: _c(rh), k: t + 4 * kh} for kh in (0, 1) for rh in (0, 1)]
        b_k = [t + 4 * kh for kh in (0, 1)]
    else:  # fp16, bf16: pairs of k in a register
        a_at = [{rows: _c(rh), k: t * 2 + kk} for rh in (0, 1) for kk in (0, 1)]
        b_k = [t * 2 + kk for kk in (0, 1)]
    a_frag = tuple(Load(a.source, (at(a.indices[0], m),), a.dtype) for m in a_at)
    a_rows = None
    if tile.precision == "tf32" and _ldmatrix_rows(a, k):
        a_rows = at(a.indices[0], {rows: (g // 2) % 2, k: (g // 4) * 4, g: (g % 2) * 4 + t})
    b_frag = tuple(Load(b.source, (at(b.indices[0], {k: kb, t: g // 2, cols: g % 2}),), b.dtype) for kb in b_k)
    c_frag = tuple(at(store.index, {rows: _c(rh), cols: _c(cl)}) for rh in (0, 1) for cl in (0, 1))
    return WarpMma(tile.shape, tile.precision, a_frag, b_frag, store.buffer, c_frag, a_rows)


def _ldmatrix_rows(a: Load, k) -> bool:
    """Whether A's tiles can be read by ldmatrix: float32 in shared memory, k of stride 1, and
    every row's k = 0 on a 16-byte boundary (the buffers start 16-byte aligned)."""
    if getattr(a.source, "scope", None) != "shared" or a.dtype != "float32":
        return False
    index = a.indices[0]
    step = arith.linear(arith.simplify(BinOp("sub", substitute(index, {k: k + 1}), index)))
    start = arith.linear(arith.simplify(substitute(index, {k: _c(0)})))
    return not step.terms and step.const == 1 and start.const % 4 == 0 and all(
        c * arith.known_divisor(x) % 4 == 0 for c, x in start.terms.values())


__all__ = ["mma_statement"]
