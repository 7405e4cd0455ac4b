"""Shared by the operator modules: argument normalization, broadcasting, schedule building blocks."""
from __future__ import annotations

import math
from collections.abc import Sequence

from autosched.schedule import Schedule, Stage
from autosched.te import Expr, Tensor


def as_pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    """(h, w) from an int or a pair: strides, dilations and kernel sizes are given either way."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(int(v) < 1 for v in pair):
        raise ValueError(f"{what} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def as_pads2d(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) — ONNX's `pads` order — from an int, (h, w), or four values."""
    p = (padding,) * 4 if isinstance(padding, int) else tuple(int(v) for v in padding)
    if len(p) == 2:
        p = (p[0], p[1], p[0], p[1])
    if len(p) != 4 or any(v < 0 for v in p):
        raise ValueError(f"padding must be a non-negative int, (h, w) or (top, left, bottom, right), got {padding!r}")
    return p


def normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def normalize_axes(axes: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative, distinct axes; None means all of them."""
    if axes is None:
        return tuple(range(ndim))
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    out = sorted({normalize_axis(a, ndim) for a in axes})
    if len(out) != len(axes):
        raise ValueError(f"axes {axes} name a dimension twice")
    return tuple(out)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The numpy broadcast of `shapes`, with an error naming them when they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        sizes = {s[d - ndim + len(s)] for s in shapes if d - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_load(t: Tensor, idx: Sequence[Expr]) -> Expr:
    """t's element for output index `idx` under numpy broadcasting (missing or size-1 dims read 0)."""
    off = len(idx) - t.ndim
    return t[tuple(0 if n == 1 else idx[off + d] for d, n in enumerate(t.shape))]


def vector_width(extent: int, vector_lanes: int) -> int:
    """The widest of lanes, lanes/2, lanes/4 that divides `extent`, else min(extent, lanes).

    A vector loop that overhangs the edge carries a per-lane guard, and the C back end turns
    such a loop back into scalar code; a narrower vector that divides evenly stays SIMD.
    """
    for lanes in (vector_lanes, vector_lanes // 2, vector_lanes // 4):
        if lanes >= 2 and extent % lanes == 0:
            return lanes
    return min(extent, vector_lanes)


def vectorize_innermost(st: Stage, vector_lanes: int, fuse_from: int | None = None) -> None:
    """Fuse axes[fuse_from:] (default: just the last) into the vector axis, split it by the
    vector width; the other axes and the outer part of the split become one parallel loop."""
    axes = list(st.op.axes)
    if not axes:
        return
    k = len(axes) - 1 if fuse_from is None else fuse_from
    inner = st.fuse(*axes[k:])
    outer, lanes = st.split(inner, vector_width(math.prod(a.extent for a in axes[k:]), vector_lanes))
    st.parallel(st.fuse(*axes[:k], outer))
    st.vectorize(lanes)


def tile_reduction(s: Schedule, out: Stage, acc: Stage, vector_lanes: int, vectorize: bool) -> None:
    """Compute the reduction `acc` per parallel tile of its consumer `out`.

    With `vectorize`, out's innermost axis is split by the vector width and acc runs its
    reduction loops outside its own innermost (spatial) axis, which becomes the vector: the
    right order when the reduced input is contiguous along that axis. Without it, every
    output element is one tile and acc reduces in scalar order.
    """
    axes = list(out.op.axes)
    if not axes:
        return
    if vectorize:
        outer, inner = out.split(axes[-1], vector_width(axes[-1].extent, vector_lanes))
        tile = out.fuse(*axes[:-1], outer)
        out.vectorize(inner)
    else:
        tile = out.fuse(*axes)
    out.parallel(tile)
    s.compute_at(acc, out, tile)
    if vectorize:
        spatial = list(acc.op.axes)
        acc.reorder(*spatial[:-1], *acc.op.reduce_axes, spatial[-1])
        acc.vectorize(spatial[-1])


def tile_product(s: Schedule, out: Stage, acc: Stage, rows: int, cols: int, lanes: int, whole: bool = False) -> int:
    """A product's output (last two axes) in register tiles of `rows` x `cols`, the column panel
    outermost so that a thread's consecutive tiles read one packed panel from cache, the tiles
    over the threads, `acc` computed per tile; `whole`: the last panel of columns computed
    whole, as a packed product of whole panels computes it. Returns the vector width the columns
    store in: `lanes` where it divides `cols`, else `cols`."""
    axes = list(out.op.axes)
    io, ii = out.split(axes[-2], rows)
    jo, ji = out.split(axes[-1], cols, whole=whole)
    out.reorder(*axes[:-2], jo, io, ii, ji)
    tile = out.fuse(*axes[:-2], jo, io)
    out.parallel(tile)
    vector = lanes if cols % lanes == 0 else cols
    out.vectorize(out.split(ji, vector)[1])
    s.compute_at(acc, out, tile)
    return vector


def parallel_copy(st: Stage) -> None:
    """A layout copy (a packing) at root: every axis but the innermost fused into one parallel loop."""
    axes = list(st.op.axes)
    if len(axes) > 1:
        st.parallel(st.fuse(*axes[:-1]))


def local_accumulator(s: Schedule, anchor: Stage, out: Tensor) -> Stage:
    """The stage a register tile accumulates `anchor`'s reduction in: a local cache of it where
    it is the output itself, else the anchor moved to local scope (its epilogue then reads it)."""
    if out.op is anchor.op:
        return s[s.cache_write(out, "local")]
    anchor.set_scope("local")
    return anchor
