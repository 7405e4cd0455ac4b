"""A GEMM in the accumulator layout of the tensor cores' m16n8k8 instruction, for templates that
tensorize it (`Stage.tensorize`).

A lane of an m16n8k8 `mma.sync` holds rows g and g + 8 and columns 2t and 2t + 1 of a 16 × 8
tile (g = lane / 4, t = lane % 4). In the plain (m, n) layout a lane's elements of several such
tiles lie 8 rows apart, and a register tile computed at the lane's loop would span the rows
between them. So the product is defined over (row / 8, row % 8, column / 8, column % 8 / 2,
column % 2): a lane's elements are then one dense box, the lane's own g and t fixed. The plain
result is a view of it, inlined into the store of the output.

The operands are views padded with zeros to whole block tiles (rows, columns) and whole K
steps, so every warp runs every instruction (none can be guarded); the shared-memory copies
that read them compute the padding on the fly. A view keeps the operand's own layout (k
innermost for an untransposed A), so the copies read global memory along its rows.
"""
from __future__ import annotations

from collections.abc import Callable

from autosched import te
from autosched.ops.transform import INJECTIVE_TAG
from autosched.te import Tensor

MMA_GEMM_TAG = "mma_gemm"


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _padded(shape: tuple[int, ...], extents: tuple[int, int], value: Callable, k_inner: bool, name: str) -> Tensor:
    """batch + (rows, k) or batch + (k, rows): `value(batch, row, k)` inside `extents`, else 0."""
    rows, k = extents

    def body(*i):
        b, (x, y) = i[:-2], i[-2:]
        row, kk = (x, y) if k_inner else (y, x)
        inside = [c for c, n, full in ((row < rows, rows, shape[-2 if k_inner else -1]),
                                       (kk < k, k, shape[-1 if k_inner else -2])) if n < full]
        v = value(b, row, kk)
        if not inside:
            return v
        cond = inside[0] if len(inside) == 1 else inside[0] & inside[1]
        return te.select(cond, v, te.const(0, "float32"))

    return te.compute(shape, body, name=name, tag=INJECTIVE_TAG)


def mma_gemm(batch: tuple[int, ...], dims: tuple[int, int, int], a_at: Callable, b_at: Callable,
             k_inner: tuple[bool, bool], tiles: tuple[int, int, int], name: str = "mma_gemm") -> Tensor:
    """The (batch…, m, n) product Σ_k A(b, i, k) · B(b, k, j) with `a_at(b, i, k)` and `b_at(b, k, j)`,
    computed in the fragment layout (see the module's docstring) padded to `tiles` = (rows,
    columns, k) of a block. `k_inner` says, per operand, whether k is its innermost dimension (A
    as m × k, B as n × k), as the operand lies in memory. The result's stage under the view has
    MMA_GEMM_TAG."""
    m, n, k = dims
    mp, np_, kp = _round_up(m, tiles[0]), _round_up(n, tiles[1]), _round_up(k, tiles[2])
    a = _padded(batch + ((mp, kp) if k_inner[0] else (kp, mp)), (m, k), a_at, k_inner[0], f"{name}_a")
    b = _padded(batch + ((np_, kp) if k_inner[1] else (kp, np_)), (n, k), lambda i, j, kk: b_at(i, kk, j),
                k_inner[1], f"{name}_b")
    r = te.reduce_axis(kp, "k")

    def a_of(bi: tuple, row):
        return a[bi + ((row, r) if k_inner[0] else (r, row))]

    def b_of(bi: tuple, col):
        return b[bi + ((col, r) if k_inner[1] else (r, col))]

    nb = len(batch)
    acc = te.compute(batch + (mp // 8, 8, np_ // 8, 4, 2),
                     lambda *i: te.sum(a_of(i[:nb], i[nb] * 8 + i[nb + 1]) * b_of(i[:nb], i[nb + 2] * 8 + i[nb + 3] * 2 + i[nb + 4]), r),
                     name=name, tag=MMA_GEMM_TAG)
    return te.compute(batch + (m, n), lambda *i: acc[i[:nb] + (i[nb] // 8, i[nb] % 8, i[nb + 1] // 8, i[nb + 1] % 8 // 2,
                                                              i[nb + 1] % 2)],
                      name=f"{name}_view", tag=INJECTIVE_TAG)


__all__ = ["MMA_GEMM_TAG", "mma_gemm"]
