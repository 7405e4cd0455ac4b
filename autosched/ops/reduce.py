"""Reductions over axes: sum, mean, max, with or without the reduced dimensions kept.

A reduction is the whole body of its stage, so mean is two stages: the sum (tag "reduce",
the anchor a schedule looks for) and an elementwise scale by 1/count.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from autosched import te
from autosched.ops.util import normalize_axes, tile_reduction, vector_width
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor

REDUCE_TAG = "reduce"
REDUCE_LANES_TAG = "reduce_lanes"
REDUCE_PARTIALS_TAG = "reduce_partials"
#: a reduction of every axis splits its outer axes into at least this many rows of partial
#: results, which the threads share
PARTIAL_ROWS = 8
#: independent vector accumulators per row: a max's or a sum's latency (4 cycles) is then
#: hidden, where one accumulator waited on each result before the next load
ACCUMULATORS = 4
_REDUCERS = {"sum": te.sum, "prod": te.prod_reduce, "max": te.max_reduce, "min": te.min_reduce}


def _reduce(x: Tensor, combiner: str, axes: int | Sequence[int] | None, keepdims: bool, name: str,
            lanes: int | None = None) -> Tensor:
    axes = normalize_axes(axes, x.ndim)
    if lanes is not None and x.ndim - 1 in axes:
        width = vector_width(x.shape[-1], lanes)
        if width >= 2 and x.shape[-1] % width == 0:
            if len(axes) == x.ndim and x.ndim > 1:
                return _reduce_everything(x, combiner, keepdims, name, width)
            return _reduce_by_lanes(x, combiner, axes, keepdims, name, width)
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


def _reduce_by_lanes(x: Tensor, combiner: str, axes: tuple[int, ...], keepdims: bool, name: str,
                     width: int, shape: tuple[int, ...] | None = None) -> Tensor:
    """A reduction that includes the innermost axis, as `width` partial results per output
    accumulated as one vector over chunks of that axis (and the other reduced axes), then
    combined: the rfactor of the innermost axis, written out. Why: reducing a contiguous
    axis in scalar order is one chain of dependent operations that gcc may not reassociate.
    A sum's association changes by rounding only; a max's not at all. `shape`: the output's,
    where every axis is reduced (ones, as many as another tensor's axes, for its keepdims)."""
    last = x.ndim - 1
    raxes = {d: te.reduce_axis(x.shape[d], f"r{d}") for d in axes if d != last}
    chunk = te.reduce_axis(x.shape[last] // width, "k")
    if shape is None:
        shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)

    def source(i: tuple, lane) -> tuple:
        idx, k = [], 0
        for d in range(x.ndim):
            if d == last:
                idx.append(chunk * width + lane)
            elif d in raxes:
                idx.append(raxes[d])
                k += keepdims
            else:
                idx.append(i[k])
                k += 1
        return tuple(idx)

    reducer = _REDUCERS[combiner]
    part = te.compute(shape + (width,), lambda *i: reducer(x[source(i[:-1], i[-1])], list(raxes.values()) + [chunk]),
                      name=f"{name}_lanes", tag=REDUCE_LANES_TAG)
    lane = te.reduce_axis(width, "lane")
    return te.compute(shape, lambda *i: reducer(part[tuple(i) + (lane,)], lane), name=name, tag=REDUCE_TAG,
                      attrs={"axes": axes, "keepdims": keepdims, "width": width})


def _reduce_everything(x: Tensor, combiner: str, keepdims: bool, name: str, width: int, signs: int = 1) -> Tensor:
    """A reduction of every axis (DynamicQuantizeLinear's range of a whole tensor) in two steps:
    rows of partial results over the outer axes, which threads compute in parallel, each in
    `ACCUMULATORS` (or 2) vectors of `width` lanes interleaved along an inner axis; then the lanes
    form (`_reduce_by_lanes`) over the partials. One thread with one vector accumulator had
    reduced a 56x56x64 map at 30-47 GB/s, waiting on each max (Xeon, 2 threads). `signs` 2:
    the reduction of x and of -x side by side, each element loaded once (`reduce_range`); the
    result then holds both, shape (2,)."""
    last = x.ndim - 1
    rows, outer = 1, 0
    while outer < last and rows < PARTIAL_ROWS:
        rows *= x.shape[outer]
        outer += 1
    extents = [*x.shape[outer:last], x.shape[last] // width]  # the inner reduced axes, the chunks of the last
    inner, split = next(((d, n) for n in (ACCUMULATORS, 2) for d in reversed(range(len(extents))) if extents[d] % n == 0),
                        (None, 1))
    raxes = [te.reduce_axis(e // split if d == inner else e, f"r{outer + d}") for d, e in enumerate(extents)]

    def source(i: tuple) -> tuple:
        *row, p, lane = i
        steps = [r * split + p if d == inner else r for d, r in enumerate(raxes)]
        return (*row, *steps[:-1], steps[-1] * width + lane)

    reducer = _REDUCERS[combiner]

    def element(i: tuple):
        *row, sign, p, lane = i
        value = x[source((*row, p, lane))]
        return value if signs == 1 else te.select(sign.equal(0), value, -value)

    partials = te.compute((*x.shape[:outer], signs, split, width), lambda *i: reducer(element(i), raxes),
                          name=f"{name}_partials", tag=REDUCE_PARTIALS_TAG)
    reduced = tuple(d for d in range(partials.ndim) if d != outer)
    return _reduce_by_lanes(partials, combiner, reduced if signs > 1 else tuple(range(partials.ndim)), False, name,
                            width, None if signs > 1 else (1,) * x.ndim if keepdims else ())


def reduce_sum(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
               lanes: int | None = None) -> Tensor:
    """Σ over `axes` (None: all of them); `lanes` (the target's vector width) allows the
    vector form when the innermost axis is reduced."""
    return _reduce(x, "sum", axes, keepdims, "reduce_sum", lanes)


def reduce_max(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
               lanes: int | None = None) -> Tensor:
    return _reduce(x, "max", axes, keepdims, "reduce_max", lanes)


def reduce_prod(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
                lanes: int | None = None) -> Tensor:
    return _reduce(x, "prod", axes, keepdims, "reduce_prod", lanes)


def reduce_min(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
               lanes: int | None = None) -> Tensor:
    return _reduce(x, "min", axes, keepdims, "reduce_min", lanes)


def reduce_mean(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
                lanes: int | None = None) -> Tensor:
    total = _reduce(x, "sum", axes, keepdims, "reduce_mean_sum", lanes)
    count = math.prod(x.shape[d] for d in normalize_axes(axes, x.ndim))
    return te.compute(total.shape, lambda *i: total[i] * te.const(1.0 / count, x.dtype), name="reduce_mean")


def range_width(shape: tuple[int, ...], lanes: int | None) -> int:
    """The lanes `reduce_range` reads a tensor of `shape` in, 0 where it cannot (fewer than 2
    axes, or an innermost axis no vector of at least 2 lanes divides)."""
    width = vector_width(shape[-1], lanes) if len(shape) >= 2 and lanes else 0
    return width if width >= 2 and shape[-1] % width == 0 else 0


def reduce_range(x: Tensor, lanes: int | None) -> tuple[Tensor, Tensor]:
    """(max, min) of every element of x, one pass: the maximum of x and of -x, each element
    loaded once for both. DynamicQuantizeLinear measures a tensor's range so; as ReduceMax and
    ReduceMin, each read the tensor, a dynamically quantized MobileNetV2 spent 0.34 ms of its
    3.5 in the second read (Xeon, 2 threads)."""
    width = range_width(x.shape, lanes)
    if not width:
        raise ValueError(f"reduce_range: expects at least 2 axes, the innermost a whole number of vectors of up to "
                         f"{lanes} lanes, got {list(x.shape)}")
    both = _reduce_everything(x, "max", False, "reduce_range", width, signs=2)
    return (te.compute((), lambda: both[0], name="range_max"),
            te.compute((), lambda: -both[1], name="range_min"))


def _schedule_partials(s: Schedule, partials: Tensor) -> None:
    """Rows of partials over the threads; each row's accumulators (signs x interleaved vectors)
    unrolled in registers, a local copy written out once. Accumulated in the partials' own
    buffer, every step stored each vector back (gcc cannot keep a shared buffer in registers)."""
    acc = s[s.cache_write(partials, "local")]
    out = s[partials]
    *rows, _, _, lane = out.op.axes
    row = out.fuse(*rows) if len(rows) > 1 else rows[0]
    out.parallel(row)
    out.vectorize(lane)
    s.compute_at(acc, out, row)
    *acc_rows, sign, p, acc_lane = acc.op.axes
    acc.reorder(*acc_rows, *acc.op.reduce_axes, sign, p, acc_lane)
    acc.unroll(sign)
    acc.unroll(p)
    acc.vectorize(acc_lane)


def schedule_reduce(out: Tensor | list[Tensor], vector_lanes: int) -> Schedule:
    """Outputs in parallel tiles, each reducing into a local accumulator.

    When the input's innermost axis survives the reduction, a tile is one vector along it and
    the reduction loops run outside the vector (contiguous loads, no horizontal sums); when it
    is reduced, each output is a scalar running sum.
    """
    outs = out if isinstance(out, list) else [out]
    s = create_schedule(outs)
    out = outs[0]  # a range's maximum: its minimum reads the same accumulator
    anchor = next(t for t in te.post_order(outs) if getattr(t.op, "tag", "") == REDUCE_TAG)
    acc = s[s.cache_write(anchor, "local")] if anchor.op is out.op else s[anchor]
    acc.set_scope("local")
    partials = next((t for t in te.post_order(outs) if getattr(t.op, "tag", "") == REDUCE_PARTIALS_TAG), None)
    if partials is not None:
        _schedule_partials(s, partials)
    if "width" in anchor.compute_op.attrs:  # the lanes form: its partials inside each output's accumulator
        tile_reduction(s, s[out], acc, vector_lanes, vectorize=False)
        part = next(st for st in s.stages if st.op.tag == REDUCE_LANES_TAG)
        part.set_scope("local")
        if acc.op.axes:
            s.compute_at(part, acc, acc.op.axes[-1])
        spatial = list(part.op.axes)
        part.reorder(*spatial[:-1], *part.op.reduce_axes, spatial[-1])
        part.vectorize(spatial[-1])
        return s
    (source,) = anchor.op.inputs()
    tile_reduction(s, s[out], acc, vector_lanes, vectorize=source.ndim - 1 not in anchor.compute_op.attrs["axes"])
    return s


__all__ = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_range", "schedule_reduce", "REDUCE_TAG", "REDUCE_LANES_TAG"]
