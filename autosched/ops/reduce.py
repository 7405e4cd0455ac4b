"""Reductions over axes: sum, mean, max, with or without the reduced dimensions kept.

A reduction is the whole body of its stage, so mean is two stages: the sum (tag "reduce",
the anchor a schedule looks for) and an elementwise scale by 1/count.
"""
from __future__ import annotations

import math
from typing import Sequence

from autosched import te
from autosched.ops.util import normalize_axes, tile_reduction
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor

REDUCE_TAG = "reduce"
_REDUCERS = {"sum": te.sum, "max": te.max_reduce}


def _reduce(x: Tensor, combiner: str, axes: int | Sequence[int] | None, keepdims: bool, name: str) -> Tensor:
    axes = normalize_axes(axes, x.ndim)
    raxes = {d: te.reduce_axis(x.shape[d], f"r{d}") for d in axes}
    shape = tuple(1 if d in raxes else n for d, n in enumerate(x.shape) if keepdims or d not in raxes)

    def body(*i):
        idx, k = [], 0
        for d in range(x.ndim):
            if d in raxes:
                idx.append(raxes[d])
                k += keepdims
            else:
                idx.append(i[k])
                k += 1
        return _REDUCERS[combiner](x[tuple(idx)], list(raxes.values()))

    return te.compute(shape, body, name=name, tag=REDUCE_TAG, attrs={"axes": axes, "keepdims": keepdims})


def reduce_sum(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Σ over `axes` (None: all of them)."""
    return _reduce(x, "sum", axes, keepdims, "reduce_sum")


def reduce_max(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    return _reduce(x, "max", axes, keepdims, "reduce_max")


def reduce_mean(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    total = _reduce(x, "sum", axes, keepdims, "reduce_mean_sum")
    count = math.prod(x.shape[d] for d in normalize_axes(axes, x.ndim))
    return te.compute(total.shape, lambda *i: total[i] * te.const(1.0 / count, x.dtype), name="reduce_mean")


def schedule_reduce(out: Tensor, vector_lanes: int) -> Schedule:
    """Outputs in parallel tiles, each reducing into a local accumulator.

    When the input's innermost axis survives the reduction, a tile is one vector along it and
    the reduction loops run outside the vector (contiguous loads, no horizontal sums); when it
    is reduced, each output is a scalar running sum.
    """
    s = create_schedule(out)
    anchor = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == REDUCE_TAG)
    acc = s[s.cache_write(anchor, "local")] if anchor.op is out.op else s[anchor]
    acc.set_scope("local")
    (source,) = anchor.op.inputs()
    tile_reduction(s, s[out], acc, vector_lanes, vectorize=source.ndim - 1 not in anchor.op.attrs["axes"])
    return s


__all__ = ["reduce_sum", "reduce_mean", "reduce_max", "schedule_reduce", "REDUCE_TAG"]
