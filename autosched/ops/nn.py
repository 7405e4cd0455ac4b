"""Neural-network layers that are not anchors: batch norm (inference), pooling, softmax, layer norm.

Each follows the same shape: small per-channel or per-row stages, and a reduction computed
inside the parallel tiles of the output so it lives in registers or a small local buffer.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from autosched import te
from autosched.ops.reduce import reduce_max, reduce_mean
from autosched.ops.transform import PAD_TAG, pad, unflatten
from autosched.ops.util import (
    as_pads2d,
    as_pair,
    normalize_axis,
    tile_reduction,
    vector_width,
    vectorize_innermost,
)
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.te import Expr, Tensor

BATCH_NORM_TAG = "batch_norm"
POOL_TAG = "pool"
SOFTMAX_TAG = "softmax"
LAYER_NORM_TAG = "layer_norm"
_INT_MIN = {"int8": -2 ** 7, "uint8": 0, "int32": -2 ** 31, "int64": -2 ** 63}


# --- batch norm --------------------------------------------------------------------------------

def batch_norm(x: Tensor, gamma: Tensor, beta: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5,
               axis: int = 1) -> Tensor:
    """(x - mean) / sqrt(var + ε) · γ + β with running statistics, per channel along `axis`.

    Folded once per channel into scale and shift stages, so each element costs one FMA.
    """
    axis = normalize_axis(axis, x.ndim)
    c = x.shape[axis]
    for t in (gamma, beta, mean, var):
        if t.shape != (c,):
            raise ValueError(f"batch_norm: {t.name}{list(t.shape)} must have shape [{c}] (channels along axis {axis})")
    scale = te.compute((c,), lambda k: gamma[k] * te.rsqrt(var[k] + te.const(epsilon, var.dtype)),
                       name="batch_norm_scale", tag=BATCH_NORM_TAG)
    shift = te.compute((c,), lambda k: beta[k] - mean[k] * scale[k], name="batch_norm_shift", tag=BATCH_NORM_TAG)
    return te.compute(x.shape, lambda *i: x[i] * scale[i[axis]] + shift[i[axis]], name="batch_norm",
                      tag=BATCH_NORM_TAG, attrs={"axis": axis})


def schedule_batch_norm(out: Tensor, vector_lanes: int) -> Schedule:
    """Scale and shift at root (one value per channel); the axes after the channel fused into
    the vector, along which both are constant."""
    s = create_schedule(out)
    axis = out.compute_op.attrs["axis"]
    vectorize_innermost(s[out], vector_lanes, fuse_from=min(axis + 1, out.ndim - 1))
    return s


# --- pooling ---------------------------------------------------------------------------------------

def pool_out_size(size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int,
                  ceil_mode: bool) -> int:
    """Window count; with ceil_mode a last partial window counts only if it starts inside the
    input or the leading padding (PyTorch's and ONNX Runtime's rule)."""
    span = size + pad_before + pad_after - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


def max_pool2d(x: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False) -> Tensor:
    """Max over each window of an NCHW tensor; padding never wins (it is -inf)."""
    fill = -math.inf if x.dtype.startswith("float") else _INT_MIN[x.dtype]
    return _pool(x, "max", kernel, stride, padding, dilation, ceil_mode, fill)


def avg_pool2d(x: Tensor, kernel: int | Sequence[int], stride: int | Sequence[int] = 1,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               count_include_pad: bool = False) -> Tensor:
    """Mean over each window of an NCHW tensor.

    The divisor counts the window's cells inside the input, plus those in the padding when
    `count_include_pad`; cells past the padding (a ceil_mode overhang) never count.
    """
    window_sum = _pool(x, "sum", kernel, stride, padding, dilation, ceil_mode, 0.0)
    oh, ow = window_sum.shape[2:4]
    a = window_sum.compute_op.attrs
    (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = a["kernel"], a["stride"], a["dilation"], a["padding"]
    h, w = x.shape[2:4]
    lo_h, hi_h = (-top, h + bottom) if count_include_pad else (0, h)
    lo_w, hi_w = (-left, w + right) if count_include_pad else (0, w)
    rows = _window_counts(oh, kh, sh, dh, top, lo_h, hi_h)
    cols = _window_counts(ow, kw, sw, dw, left, lo_w, hi_w)
    attrs = dict(a, count_include_pad=count_include_pad)
    if len(set(rows)) == 1 and len(set(cols)) == 1:
        inv = te.const(1.0 / (rows[0] * cols[0]), x.dtype)
        return te.compute(window_sum.shape, lambda *i: window_sum[i] * inv, name="avg_pool2d", tag=POOL_TAG + "_avg",
                          attrs=attrs)
    row_inv = _count_table(rows, "avg_pool2d_row_inv", x.dtype)
    col_inv = _count_table(cols, "avg_pool2d_col_inv", x.dtype)
    return te.compute(window_sum.shape, lambda *i: window_sum[i] * row_inv[i[2]] * col_inv[i[3]],
                      name="avg_pool2d", tag=POOL_TAG + "_avg", attrs=attrs)


def _window_counts(out: int, kernel: int, stride: int, dilation: int, pad_before: int, lo: int, hi: int) -> list[int]:
    """Per output position, how many window taps fall in [lo, hi) (input coordinates)."""
    return [sum(lo <= o * stride - pad_before + k * dilation < hi for k in range(kernel)) for o in range(out)]


def _count_table(counts: list[int], name: str, dtype: str) -> Tensor:
    """1/count per position as a small stage: a chain of selects on the position, folded from
    the Python list (pooling shapes are static)."""
    def body(o: Expr) -> Expr:
        out: Expr = te.const(1.0 / counts[-1], dtype)
        for k in range(len(counts) - 2, -1, -1):
            if counts[k] != counts[k + 1]:
                out = te.select(o <= k, te.const(1.0 / counts[k], dtype), out)
        return out
    return te.compute((len(counts),), body, name=name, tag=POOL_TAG + "_count")


def _pool(x: Tensor, combiner: str, kernel: int | Sequence[int], stride: int | Sequence[int],
          padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool, fill: float) -> Tensor:
    """The windowed max or sum (tag "pool"), reading a padded copy wherever a window leaves the input.
    x is NCHW, or blocked NCHW[b]c: a trailing block axis rides along untouched."""
    if x.ndim not in (4, 5):
        raise ValueError(f"pool2d expects an NCHW or NCHW[b]c tensor, got {list(x.shape)}")
    n, c, h, w = x.shape[:4]
    block = tuple(x.shape[4:])
    (kh, kw), (sh, sw), (dh, dw) = as_pair(kernel, "kernel"), as_pair(stride, "stride"), as_pair(dilation, "dilation")
    top, left, bottom, right = as_pads2d(padding)
    oh = pool_out_size(h, kh, sh, top, bottom, dh, ceil_mode)
    ow = pool_out_size(w, kw, sw, left, right, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"pool2d: the {kh}x{kw} window does not fit the padded {h}x{w} input")
    # the taps some window reads inside the input (padding adds nothing to a sum and never wins
    # a max): EfficientNet's pooler, a 2560x2560 window over a 7x7 map, reads 7x7 taps
    (first_y, taps_y), (first_x, taps_x) = (_taps_inside(size, k, st, d, before, out) for size, k, st, d, before, out in
                                            ((h, kh, sh, dh, top, oh), (w, kw, sw, dw, left, ow)))
    # how far past the input those taps reach: at most the stated padding, unless a ceil_mode
    # window overhangs it
    above, ahead = max(0, top - first_y * dh), max(0, left - first_x * dw)
    below = max(0, (oh - 1) * sh - top + dh * (first_y + taps_y - 1) + 1 - h)
    beyond = max(0, (ow - 1) * sw - left + dw * (first_x + taps_x - 1) + 1 - w)
    xp = x
    if above or ahead or below or beyond:
        xp = pad(x, ((0, 0), (0, 0), (above, below), (ahead, beyond)) + ((0, 0),) * len(block), fill,
                 name=f"{combiner}_pool2d_pad")
    shift_y, shift_x = first_y * dh - top + above, first_x * dw - left + ahead
    ry, rx = te.reduce_axis(taps_y, "ry"), te.reduce_axis(taps_x, "rx")
    reducer = te.max_reduce if combiner == "max" else te.sum
    attrs = {"kernel": (kh, kw), "stride": (sh, sw), "padding": (top, left, bottom, right), "dilation": (dh, dw),
             "ceil_mode": ceil_mode}
    return te.compute((n, c, oh, ow, *block),
                      lambda n_, c_, y, z, *b: reducer(xp[(n_, c_, y * sh + ry * dh + shift_y,
                                                           z * sw + rx * dw + shift_x) + b], [ry, rx]),
                      name="max_pool2d" if combiner == "max" else "avg_pool2d_sum", tag=POOL_TAG, attrs=attrs)


def _taps_inside(size: int, kernel: int, stride: int, dilation: int, before: int, out: int) -> tuple[int, int]:
    """(first, count) of the window taps along an axis that land inside the input for some
    output position; all of them where none does (a window entirely in padding)."""
    first = max(0, -(-(before - (out - 1) * stride) // dilation))
    last = min(kernel - 1, (size - 1 + before) // dilation)
    return (first, last - first + 1) if last >= first else (0, kernel)


def global_avg_pool2d(x: Tensor) -> Tensor:
    """Mean over H and W, keeping them as 1 × 1 (ONNX GlobalAveragePool)."""
    return reduce_mean(x, (2, 3), keepdims=True)


def global_max_pool2d(x: Tensor) -> Tensor:
    return reduce_max(x, (2, 3), keepdims=True)


#: output pixels per register tile of a blocked pool (at most: the largest divisor of the width)
POOL_TILE = 4
#: windows of at most this many taps are unrolled in a blocked pool
UNROLLED_WINDOW = 9


def schedule_pool2d(out: Tensor, vector_lanes: int) -> Schedule:
    """Divisor tables at root; windows reduced per tile of output columns, the window loops
    outside the vector of columns, the padding copied at root. A channel-blocked input (layout
    planning's NCHW[b]c) is read in place instead, a window's bounds tested per vector of the
    block: its padded copy cost as much as the pool (ResNet-18's MaxPool after conv1, 112x112
    in 4 blocks of 16 on a Xeon, 2 threads, in the model: 0.185 ms with the copy, 0.058 in
    place; onnxruntime's 0.098); rows of output pixels run in parallel. There each window
    reduces a register tile of up to `POOL_TILE` pixels, small windows unrolled, so that the
    taps neighbouring pixels share are loaded once and the bounds tests of a row fold: PoolFormer's
    3x3 average pools (count_include_pad=0) went from 0.044 to 0.032 ms at 56x56x64 and
    0.025 to 0.017 at 28x28x128 (in the model, fastest of 3 alternated runs, EPYC Zen 4,
    2 threads; onnxruntime's 0.034 and 0.025), a 3x3 stride-1 MaxPool at 28x28x192 0.030 to
    0.023, ResNet-18's stride-2 one unchanged (0.027)."""
    s = create_schedule(out)
    anchor = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == POOL_TAG)
    blocked = len(anchor.shape) == 5
    for st in s.stages:
        if st.op.tag == PAD_TAG:
            if blocked:
                s.compute_inline(st)
            else:
                st.parallel(st.fuse(*st.op.axes[:3]))
    acc = s[s.cache_write(anchor, "local")] if anchor.op is out.op else s[anchor]
    acc.set_scope("local")
    if blocked:
        o = s[out]
        n, c, oh, ow, b = o.op.axes
        o.parallel(o.fuse(n, c, oh))
        tile = max(t for t in range(1, POOL_TILE + 1) if o.op.shape[3] % t == 0)
        columns, ow = o.split(ow, tile)
        o.reorder(columns, ow, b)
        o.vectorize(b)
        s.compute_at(acc, o, columns)
        *outer, pixels, lanes = acc.op.axes
        acc.reorder(*outer, *acc.op.reduce_axes, pixels, lanes)
        acc.unroll(pixels)
        ry, rx = acc.op.reduce_axes
        if ry.extent * rx.extent <= UNROLLED_WINDOW:
            acc.unroll(ry)
            acc.unroll(rx)
        acc.vectorize(lanes)
        return s
    tile_reduction(s, s[out], acc, vector_lanes, vectorize=True)
    return s


# --- softmax ---------------------------------------------------------------------------------------

def softmax(x: Tensor, axis: int = -1, lanes: int | None = None) -> Tensor:
    """exp(x - max) / Σ exp(x - max) along `axis`: subtracting the max keeps exp from overflowing.

    Four stages: the max, the exponentials (a full-size temporary, so exp runs once per
    element), their sum, the quotient. Each reduction has exactly one reader, so a schedule
    can compute it inside that reader's tiles.

    With `lanes` (the target's vector width) and `axis` the last of several, the row form of
    `_softmax_rows` instead: one pass per row, with reductions that vectorize.
    """
    axis = normalize_axis(axis, x.ndim)
    if lanes is not None and axis == x.ndim - 1 and x.ndim > 1:
        # a whole vector wherever the row holds one: its last chunk shifts back (`_softmax_rows`)
        width = lanes if x.shape[axis] >= lanes else vector_width(x.shape[axis], lanes)
        if width >= 2:
            return _softmax_rows(x, width)
    k1, k2 = te.reduce_axis(x.shape[axis], "k"), te.reduce_axis(x.shape[axis], "k")
    shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]

    def along(i: tuple, k) -> tuple:
        return i[:axis] + (k,) + i[axis + 1:]

    def row(i: tuple) -> tuple:
        return i[:axis] + (0,) + i[axis + 1:]

    mx = te.compute(shape, lambda *i: te.max_reduce(x[along(i, k1)], k1), name="softmax_max", tag=SOFTMAX_TAG)
    e = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[row(i)]), name="softmax_exp", tag=SOFTMAX_TAG)
    total = te.compute(shape, lambda *i: te.sum(e[along(i, k2)], k2), name="softmax_sum", tag=SOFTMAX_TAG)
    return te.compute(x.shape, lambda *i: e[i] / total[row(i)], name="softmax", tag=SOFTMAX_TAG,
                      attrs={"axis": axis})


def _softmax_rows(x: Tensor, width: int) -> Tensor:
    """Softmax along the last axis, each row in one parallel iteration, reductions by vector.

    Why: the four-stage form reduces in scalar order (gcc may not reassociate a float sum) and
    writes a full-size temporary of exponentials. Here each reduction runs in two steps, an
    rfactor written out: `width` partial maxima (sums) per row, accumulated as one vector over
    the row's chunks, then combined in scalar. The row's exponentials go to a row-sized
    temporary in L1 that the sum and the quotients both read: exp, the costliest part, runs
    once per element, and the quotients are products with the sum's reciprocal.
    The sum's association differs from a sequential sum by rounding only. A row that `width`
    does not divide (197 tokens of a ViT) ends in a chunk shifted back to end at the row's end:
    the max reads its overlap twice, which changes nothing, and the sum masks the lanes it has
    already counted; the exponentials and quotients shift their last vector back the same way
    (`Stage.split(shift=True)`). So every chunk runs as vectors (a guarded partial chunk would
    run in scalar code, with scalar exp, doubling the kernel's time).
    """
    rows, n = x.shape[:-1], x.shape[-1]

    def chunked(fn, reducer, name: str) -> Tensor:
        k = te.reduce_axis(-(-n // width), "k")

        def lane(*i):
            if n % width == 0:
                return fn(i[:-1], k * width + i[-1])
            j = te.min(k * width, n - width) + i[-1]
            if reducer is te.max_reduce:
                return fn(i[:-1], j)
            return te.select(j >= k * width, fn(i[:-1], j), te.const(0.0, x.dtype))

        return te.compute(rows + (width,), lambda *i: reducer(lane(*i), k), name=name, tag=SOFTMAX_TAG)

    def combined(part: Tensor, reducer, name: str) -> Tensor:
        lane = te.reduce_axis(width, "lane")
        return te.compute(rows, lambda *r: reducer(part[tuple(r) + (lane,)], lane), name=name, tag=SOFTMAX_TAG)

    mx = combined(chunked(lambda r, j: x[tuple(r) + (j,)], te.max_reduce, "softmax_lane_max"), te.max_reduce,
                  "softmax_max")
    e = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[i[:-1]]), name="softmax_exp", tag=SOFTMAX_TAG)
    total = combined(chunked(lambda r, j: e[tuple(r) + (j,)], te.sum, "softmax_lane_sum"), te.sum, "softmax_sum")
    one = te.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: e[i] * (one / total[i[:-1]]), name="softmax",
                      tag=SOFTMAX_TAG, attrs={"axis": x.ndim - 1, "width": width})


def schedule_softmax(out: Tensor, vector_lanes: int) -> Schedule:
    """Two parallel passes, each with its reduction computed per tile: max then exponentials,
    sum then quotients; for the row form, one parallel pass (`_schedule_softmax_rows`)."""
    if "width" in out.compute_op.attrs:
        return _schedule_softmax_rows(out)
    s = create_schedule(out)
    axis = out.compute_op.attrs["axis"]
    for st in s.stages:
        if not st.op.reduce_axes:  # the exponentials, the quotients
            reduction = next(r for r in s.stages if r.op.reduce_axes and s.readers(r) == [st])
            reduction.set_scope("local")
            _tile_rows(s, st, axis, reduction, vector_lanes)
    return s


def _schedule_softmax_rows(out: Tensor) -> Schedule:
    """Rows fused into one parallel loop; every other stage computed inside it, the partial
    (per-lane) reductions with their chunk loop outside the vector of lanes, the exponentials
    as vectors. Readers attach first, so the exponentials can live in the row loop that both
    of their readers run in."""
    s = create_schedule(out)
    o = s[out]
    width = out.compute_op.attrs["width"]
    axes = list(o.op.axes)
    _, lanes = o.split(axes[-1], width, shift=True)
    o.vectorize(lanes)
    tile = o.fuse(*axes[:-1])
    o.parallel(tile)
    for st in reversed(s.stages):
        if st is o:
            continue
        st.set_scope("local")
        readers = s.readers(st)
        spatial = list(st.op.axes)
        if o in readers:
            s.compute_at(st, o, tile)
        else:  # before the reader's reduction loops, inside its (single-row) spatial ones
            (reader,) = readers
            s.compute_at(st, reader, reader.op.axes[len(out.shape) - 2])
        if len(spatial) == len(out.shape) and st.op.reduce_axes:  # a partial: rows, chunks, lanes
            st.reorder(*spatial[:-1], *st.op.reduce_axes, spatial[-1])
            st.vectorize(spatial[-1])
        elif len(spatial) == len(out.shape):  # the row's exponentials
            _, exp_lanes = st.split(spatial[-1], width, shift=True)
            st.vectorize(exp_lanes)
    return s


def _tile_rows(s: Schedule, st: Stage, axis: int, reduction: Stage, vector_lanes: int) -> None:
    """Tiles of `st` that hold whole lines along `axis`, in parallel, `reduction` computed per tile.

    Along the last axis a tile is one line, reduced in scalar order and written as vectors.
    Along an inner axis a tile is one vector of the innermost axis; the reduction then runs
    as vectors across the lines.
    """
    axes = list(st.op.axes)
    outer, lanes = st.split(axes[-1], vector_width(axes[-1].extent, vector_lanes))
    if axis == len(axes) - 1:
        tile_axes = axes[:-1]
    else:
        st.reorder(*axes[:axis], *axes[axis + 1:-1], outer, axes[axis], lanes)
        tile_axes = axes[:axis] + axes[axis + 1:-1] + [outer]
    st.vectorize(lanes)
    if not tile_axes:
        return
    tile = st.fuse(*tile_axes)
    st.parallel(tile)
    s.compute_at(reduction, st, tile)
    if axis != len(axes) - 1:
        spatial = list(reduction.op.axes)
        reduction.reorder(*spatial[:-1], *reduction.op.reduce_axes, spatial[-1])
        reduction.vectorize(spatial[-1])


# --- layer norm ------------------------------------------------------------------------------------

def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None, axis: int = -1,
               epsilon: float = 1e-5, lanes: int | None = None) -> Tensor:
    """(x - mean) / sqrt(var + ε) · γ + β over the axes from `axis` on (ONNX LayerNormalization).

    Two passes (mean, then the mean of squared deviations) rather than E[x²] - E[x]², which
    cancels catastrophically when the mean is large against the spread. The row sum is
    computed twice, once for the variance and once for the output, so that each reduction
    has one reader and the whole row stays in one parallel iteration: a second pass of
    additions over a row in cache is cheaper than a full-size temporary.

    With `lanes` (the target's vector width) each row sum runs as `width` partial sums
    accumulated as one vector, then combined (`_row_sum_by_lanes`): a sequential float sum
    is one long chain of dependent additions that gcc may not reassociate.
    """
    axis = normalize_axis(axis, x.ndim)
    inner = x.shape[axis:]
    for t in (gamma, beta):
        if t is not None and t.shape != inner:
            raise ValueError(f"layer_norm: {t.name}{list(t.shape)} must have the normalized shape {list(inner)}")
    inv_n = te.const(1.0 / math.prod(inner), x.dtype)
    rows = x.shape[:axis]

    # a whole vector wherever the row holds one, its tail summed apart (`_row_sum_by_lanes`)
    width = (lanes if math.prod(inner) >= lanes else vector_width(math.prod(inner), lanes)) \
        if lanes is not None and axis > 0 else 0

    def row_sum(name: str, fn) -> Tensor:
        if width >= 2 and math.prod(inner) >= width:
            return _row_sum_by_lanes(rows, inner, width, fn, name)
        k = [te.reduce_axis(n, f"k{d}") for d, n in enumerate(inner)]
        return te.compute(rows, lambda *r: te.sum(fn(tuple(r) + tuple(k)), k), name=name, tag=LAYER_NORM_TAG)

    def centered(total: Tensor, i: tuple) -> Expr:
        return x[i] - total[i[:axis]] * inv_n

    total_var = row_sum("layer_norm_var_sum", lambda i: x[i])
    sq = row_sum("layer_norm_sqsum", lambda i: _square(centered(total_var, i)))
    total = row_sum("layer_norm_sum", lambda i: x[i])

    def body(*i):
        y = centered(total, i) * te.rsqrt(sq[i[:axis]] * inv_n + te.const(epsilon, x.dtype))
        if gamma is not None:
            y = y * gamma[i[axis:]]
        return y + beta[i[axis:]] if beta is not None else y

    return te.compute(x.shape, body, name="layer_norm", tag=LAYER_NORM_TAG, attrs={"axis": axis})


def _row_sum_by_lanes(rows: tuple, inner: tuple, width: int, fn, name: str) -> Tensor:
    """Σ over the inner (flattened) axes of fn(row index + inner index), as `width` partial
    sums over the whole chunks of the flat row (a vector accumulator), then their sum and the
    elements past the last whole chunk. Why the tail: wav2vec2's instance norms over 3199
    samples (no vector width divides them) summed each row as one scalar chain, 4x onnxruntime's
    time."""
    n = math.prod(inner)
    chunks, tail = divmod(n, width)
    k = te.reduce_axis(chunks, "k")
    part = te.compute(rows + (width,), lambda *i: te.sum(fn(tuple(i[:-1]) + unflatten(k * width + i[-1], inner)), k),
                      name=f"{name}_lanes", tag=LAYER_NORM_TAG)
    lane = te.reduce_axis(width + tail, "lane")

    def total(*r: Expr) -> Expr:
        if not tail:
            return te.sum(part[tuple(r) + (lane,)], lane)
        # lanes first, then the tail's elements; both indices clamped, so each read stays in range
        at = lane.var
        past = unflatten(te.max(at - width, 0) + chunks * width, inner)
        return te.sum(te.select(at < width, part[tuple(r) + (te.min(at, width - 1),)], fn(tuple(r) + past)), lane)
    return te.compute(rows, total, name=name, tag=LAYER_NORM_TAG)


def _square(v: Expr) -> Expr:
    return v * v


def schedule_layer_norm(out: Tensor, vector_lanes: int) -> Schedule:
    """One row per parallel iteration: its sums reduced first, then the normalized axes fused
    and written as vectors."""
    s = create_schedule(out)
    o = s[out]
    axis = out.compute_op.attrs["axis"]
    axes = list(o.op.axes)
    inner = o.fuse(*axes[axis:])
    # whole vectors, the last one shifted back to end at the row's end where none divides it
    outer, lanes = (o.split(inner, vector_lanes, shift=True) if inner.extent >= vector_lanes
                    else o.split(inner, vector_width(inner.extent, vector_lanes)))
    o.vectorize(lanes)
    for st in s.stages:
        if st is not o:
            st.set_scope("local")
    if axis == 0:
        return s
    tile = o.fuse(*axes[:axis])
    o.parallel(tile)
    for st in reversed(s.stages):  # readers placed first
        if st is not o:
            # the last reader holds the others (a row sum reads the mean in its lanes and its tail)
            reader = s.readers(st)[-1]
            # inside the reader's (single-row) row loops, before its reduction
            s.compute_at(st, reader, tile if reader is o else reader.op.axes[axis - 1])
            spatial = list(st.op.axes)
            if len(spatial) > axis:  # partial sums: chunks outside the vector of lanes
                st.reorder(*spatial[:-1], *st.op.reduce_axes, spatial[-1])
                st.vectorize(spatial[-1])
    return s


__all__ = [
    "batch_norm", "schedule_batch_norm", "max_pool2d", "avg_pool2d", "pool_out_size", "global_avg_pool2d",
    "global_max_pool2d", "schedule_pool2d", "softmax", "schedule_softmax", "layer_norm", "schedule_layer_norm",
    "BATCH_NORM_TAG", "POOL_TAG", "SOFTMAX_TAG", "LAYER_NORM_TAG",
]
