"""2-D convolution computed in the blocked NCHW[x]c layout: dense, depthwise, grouped by whole blocks or several groups per block.

The output channels are cut into blocks of `oc_bn` and the block is the innermost axis of the
result (N, OC/oc_bn, OH, OW, oc_bn): a vector of output channels is then contiguous in the
accumulator, and each step of the reduction broadcasts one input element against one vector
of weights. That holds whatever the output width, where vectorizing NCHW along the columns
runs out of lanes on 56- or 7-wide rows. Weights are repacked so the block is contiguous too.

The input is read either in its own NCHW layout (`ic_bn=None`: each element broadcast as it
is) or packed to NCHW[ic_bn]c first, so consecutive reduction steps read consecutive
addresses. The blocked result is unpacked to NCHW by an elementwise stage, into which the
bias and the fused epilogue go: the task's contract stays NCHW in and out.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autosched import te
from autosched.graph.layout import blocked_groups, blocked_shape, plain_shape
from autosched.ops.conv import conv_geometry, conv_out_size
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn, apply_epilogue, bias_add
from autosched.ops.transform import PAD_TAG, pad
from autosched.ops.util import vector_width, vectorize_innermost
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor

CONV2D_NCHWC_TAG = "conv2d_nchwc"
PACK_TAG = "pack"
UNPACK_TAG = "unpack"


def pack_weights(w: Tensor, oc_bn: int, ic_bn: int | None) -> Tensor:
    """OIHW → [OC/oc_bn, IC, KH, KW, oc_bn], or [OC/oc_bn, IC/ic_bn, KH, KW, ic_bn, oc_bn] when ic_bn is set."""
    oc, ic, kh, kw = w.shape
    if ic_bn is None:
        return te.compute((oc // oc_bn, ic, kh, kw, oc_bn), lambda o, i, y, x, ob: w[o * oc_bn + ob, i, y, x],
                          name=f"{w.name}_packed", tag=PACK_TAG)
    return te.compute((oc // oc_bn, ic // ic_bn, kh, kw, ic_bn, oc_bn),
                      lambda o, i, y, x, ib, ob: w[o * oc_bn + ob, i * ic_bn + ib, y, x],
                      name=f"{w.name}_packed", tag=PACK_TAG)


def pack_data(x: Tensor, ic_bn: int) -> Tensor:
    """NCHW → NCHW[ic_bn]c: [N, C/ic_bn, H, W, ic_bn]."""
    n, c, h, w = x.shape
    return te.compute((n, c // ic_bn, h, w, ic_bn), lambda b, i, y, z, ib: x[b, i * ic_bn + ib, y, z],
                      name=f"{x.name}_packed", tag=PACK_TAG)


@dataclass(frozen=True)
class InputWindow:
    """The rows and columns of an input a convolution reads, from `top` and `left` on, indexed
    as a tensor of `shape` of their own: the kernel loads them in place, where a slice of them
    would be copied first (each region of a convolution `crop_taps` cut reads a window of the
    image)."""
    tensor: Tensor
    top: int
    left: int
    shape: tuple[int, ...]

    def __getitem__(self, idx: tuple[Any, ...]) -> te.Expr:
        return self.tensor[idx[:2] + (idx[2] + self.top, idx[3] + self.left) + idx[4:]]


def input_window(x: Tensor, crop: Sequence[int]) -> InputWindow:
    """`x` without `crop` = (top, left, bottom, right) rows and columns at its edges."""
    top, left, bottom, right = (int(v) for v in crop)
    if min(top, left, bottom, right) < 0 or top + bottom >= x.shape[2] or left + right >= x.shape[3]:
        raise ValueError(f"{x.name}: crop {tuple(crop)} does not leave a window of its {x.shape[2]}x{x.shape[3]} map")
    shape = (*x.shape[:2], x.shape[2] - top - bottom, x.shape[3] - left - right, *x.shape[4:])
    return InputWindow(x, top, left, shape)


def conv2d_blocked(x: Tensor, w: Tensor, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                   dilation: int | Sequence[int] = 1, *, in_block: int, out_block: int, groups: int = 1,
                   crop: Sequence[int] = (0, 0, 0, 0), name: str = "conv2d") -> Tensor:
    """The convolution's blocked stage (tag "conv2d_nchwc"): [N, OC/out_block, OH, OW, out_block].

    x is NCHW[in_block]c, or plain NCHW with `in_block` 0 (each element broadcast as it is).
    A depthwise convolution (one filter per channel) reads x in blocks of `out_block` and
    multiplies a vector of channels by a vector of their filters' taps. A grouped one whose
    groups are whole blocks (ResNeXt's 32 groups of 8 or more channels on 8-float vectors) is a
    dense one whose reduction runs over its own group's input blocks only. One with several
    groups per block (ResNeXt's groups of 4 or 8 channels in blocks of 16) reads, for output
    lane `ob` and reduction step `icb`, input channel ob // icg * icg + icb of the same block:
    one vector load and a shuffle that repeats each group's channel across its lanes
    (codegen.c), against the vector of the lanes' weights, where blocks of one group each ran
    4-float vectors. With `crop`, the convolution (unpadded) reads the window of x inside it
    (`input_window`).
    """
    n, c = x.shape[0], x.shape[1] * (in_block or 1)
    oc, icg, kh_, kw_ = w.shape
    if out_block < 1 or oc % out_block:
        raise ValueError(f"{name}: output channel block {out_block} does not divide {oc} channels")
    kind = blocked_groups(c, oc, groups, in_block, out_block)
    if kind is None or icg * groups != c:
        raise ValueError(f"{name}: {groups} groups of weights {list(w.shape)} on {c} channels do not run in blocks "
                         f"of {in_block} in and {out_block} out (a group is one channel, or whole blocks)")
    depthwise = kind == "depthwise"
    xp: Tensor | InputWindow
    if any(crop):
        (sh, sw), (dh, dw), pads, _, _ = conv_geometry(x, w, stride, padding, dilation, name)
        if any(pads):
            raise ValueError(f"{name}: a convolution reading a window of its input is not padded, got pads {pads}")
        xp = input_window(x, crop)
        oh_, ow_ = (conv_out_size(xp.shape[2 + a], w.shape[2 + a], (sh, sw)[a], 0, 0, (dh, dw)[a]) for a in (0, 1))
    else:
        (sh, sw), (dh, dw), pads, (oh_, ow_), xp = conv_geometry(x, w, stride, padding, dilation, name)
    kh, kw = te.reduce_axis(kh_, "kh"), te.reduce_axis(kw_, "kw")
    if depthwise:
        wp = te.compute((oc // out_block, kh_, kw_, out_block), lambda o, y, z, ob: w[o * out_block + ob, 0, y, z],
                        name=f"{w.name}_packed", tag=PACK_TAG)

        def body(b, o, y, z, ob):
            return te.sum(xp[b, o, y * sh + kh * dh, z * sw + kw * dw, ob] * wp[o, kh, kw, ob], [kh, kw])
    elif not in_block:
        wp = pack_weights(w, out_block, None)
        icr = te.reduce_axis(c, "ic")

        def body(b, o, y, z, ob):
            return te.sum(xp[b, icr, y * sh + kh * dh, z * sw + kw * dw] * wp[o, icr, kh, kw, ob], [icr, kh, kw])
    elif kind == "dense":
        wp = pack_weights(w, out_block, in_block)
        icc, icb = te.reduce_axis(c // in_block, "icc"), te.reduce_axis(in_block, "icb")

        def body(b, o, y, z, ob):
            return te.sum(xp[b, icc, y * sh + kh * dh, z * sw + kw * dw, icb] * wp[o, icc, kh, kw, icb, ob],
                          [icc, kh, kw, icb])
    elif kind == "lanes":
        wp = pack_weights(w, out_block, icg)
        icc, icb = te.reduce_axis(1, "icc"), te.reduce_axis(icg, "icb")

        def body(b, o, y, z, ob):
            return te.sum(xp[b, o + icc, y * sh + kh * dh, z * sw + kw * dw, ob // icg * icg + icb]
                          * wp[o, icc, kh, kw, icb, ob], [icc, kh, kw, icb])
    else:
        wp = pack_weights(w, out_block, in_block)
        icc, icb = te.reduce_axis(icg // in_block, "icc"), te.reduce_axis(in_block, "icb")
        blocks_out, blocks_in = oc // groups // out_block, icg // in_block  # per group

        def body(b, o, y, z, ob):
            first = o // blocks_out * blocks_in  # the group's first input block
            return te.sum(xp[b, first + icc, y * sh + kh * dh, z * sw + kw * dw, icb] * wp[o, icc, kh, kw, icb, ob],
                          [icc, kh, kw, icb])

    attrs = {"stride": (sh, sw), "padding": pads, "dilation": (dh, dw), "oc_bn": out_block,
             "ic_bn": in_block or None, "depthwise": depthwise, "groups": groups}
    if any(crop):
        attrs["crop"] = tuple(crop)
    return te.compute((n, oc // out_block, oh_, ow_, out_block), body, name=f"{name}_nchwc",
                      tag=CONV2D_NCHWC_TAG, attrs=attrs)


def blocked_bias(bias: Tensor, block: int) -> EpilogueFn:
    """Adds bias[channel] to a blocked output, whose channel is block index · block + lane."""
    return lambda v, i: v + bias[i[1] * block + i[-1]]


def conv2d_nchwc(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, *, oc_bn: int,
                 ic_bn: int | None = None, epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d") -> Tensor:
    """The NCHW result of conv2d(x, w) (+ bias, epilogue), computed blocked by `oc_bn` output
    channels (in `whole_blocks` of them).

    Stages: data packing (tag "pack", with `ic_bn`), padding (tag "pad", when there is any),
    weight packing (tag "pack"), the blocked convolution (tag "conv2d_nchwc"), its unpacking to
    NCHW (tag "unpack"), then one stage per epilogue function.
    """
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"{name}: expects NCHW input and OIHW weights, got {list(x.shape)} and {list(w.shape)}")
    if ic_bn is not None and (ic_bn < 1 or x.shape[1] % ic_bn):
        raise ValueError(f"{name}: input channel block {ic_bn} does not divide {x.shape[1]} channels")
    xc = pack_data(x, ic_bn) if ic_bn else x
    blocked = conv2d_blocked(xc, whole_blocks(w, oc_bn), stride, padding, dilation, in_block=ic_bn or 0,
                             out_block=oc_bn, name=name)
    return unpack_nchw(blocked, w.shape[0], bias, epilogue, name)


def whole_blocks(w: Tensor, oc_bn: int) -> Tensor:
    """OIHW filters `w` with zero filters after them up to whole blocks of `oc_bn`, which
    `unpack_nchw` drops again (a weight-only stage: a build computes it once). ShuffleNetV2's
    1x1 convolutions of 58 channels on 28x28 ran in blocks of 29 lanes at 57 GFLOP/s (AVX-512
    Zen 4, 2 threads, 0.092 ms); in two vectors of 16, 64 channels computed, at 125 GFLOP/s
    (0.042 ms)."""
    oc = w.shape[0]
    return w if oc % oc_bn == 0 else pad(w, [(0, -oc % oc_bn), (0, 0), (0, 0), (0, 0)], name=f"{w.name}_padded")


def unpack_nchw(blocked: Tensor, oc: int, bias: Tensor | None, epilogue: Sequence[EpilogueFn], name: str) -> Tensor:
    """The first `oc` channels of a blocked result [N, OC/block, OH, OW, block] in NCHW (tag
    "unpack"), then the bias and the epilogue: a blocked convolution's task stays NCHW."""
    n, _, oh_, ow_, block = blocked.shape
    y = te.compute((n, oc, oh_, ow_), lambda b, o, r, s: blocked[b, o // block, r, s, o % block], name=name,
                   tag=UNPACK_TAG)
    pre = (bias_add(bias, 1),) if bias is not None else ()
    return apply_epilogue(y, pre + tuple(epilogue))


def layout_transform(x: Tensor, src_block: int, dst_block: int, name: str = "layout_transform") -> Tensor:
    """x converted between the plain layout (block 0) and channel blocks (autosched.graph.layout)."""
    plain = plain_shape(x.shape, src_block)
    c = plain[1]

    def body(*i):
        ch = i[1] * dst_block + i[-1] if dst_block else i[1]  # plain channel of the output element
        spatial = i[2:-1] if dst_block else i[2:]
        if src_block:
            return x[(i[0], ch // src_block) + spatial + (ch % src_block,)]
        return x[(i[0], ch) + spatial]
    if dst_block and c % dst_block:
        raise ValueError(f"{name}: {c} channels do not split into blocks of {dst_block}")
    return te.compute(blocked_shape(plain, dst_block), body, name=name, tag="injective")


def schedule_layout_transform(out: Tensor, vector_lanes: int) -> Schedule:
    """Rows of the output in parallel, the loop along a row serial, its innermost axis (the
    block, or the columns of a plain output) in vectors. The injective default fuses every outer
    axis into the parallel loop, and the conversion's index then takes a division and a modulo
    per axis for each vector it copies (blocks of 8 to blocks of 4 channels at 56x56 moved
    10 GB/s); here they happen once per row, and the row loop steps by constants. To the plain
    layout, rows that whole vectors do not fill are fused into one row of the whole map."""
    s = create_schedule(out)
    for st in s.stages:
        if st.op is not out.op:
            s.compute_inline(st)
    o = s[out]
    axes = list(o.op.axes)
    if len(axes) < 3:
        vectorize_innermost(o, vector_lanes)
        return s
    block = _source_block(out)
    if block and len(axes) == 4 and axes[1].extent % block == 0:
        # to the plain layout: each vector of a row gathers one channel from `block`-channel
        # pixels; the block's channels run inside the columns' loop, so the pixels one vector
        # gathers serve the block's other channels from L1 (channel by channel over whole rows,
        # each pixel's line came back from L2 once per channel: WaveNet's 4 MB output, 256
        # channels in blocks of 16 by 4,000 columns, at 21 GB/s)
        co, ci = o.split(axes[1], block)
        if axes[3].extent % vector_lanes == 0:
            wo, lanes = o.split(axes[3], vector_lanes)
            o.reorder(axes[0], co, axes[2], wo, ci, lanes)
            o.parallel(o.fuse(axes[0], co, axes[2]))
        else:
            # rows that whole vectors do not fill (19 or 28 columns) run as one row of the map,
            # which both layouts lay out contiguously: one edge per channel, not one per row
            pixels = o.fuse(axes[2], axes[3])
            wo, lanes = o.split(pixels, vector_width(axes[2].extent * axes[3].extent, vector_lanes))
            o.reorder(axes[0], co, wo, ci, lanes)
            o.parallel(o.fuse(axes[0], co, wo))
        o.vectorize(lanes)
        return s
    _, lanes = o.split(axes[-1], vector_width(axes[-1].extent, vector_lanes))
    o.parallel(o.fuse(*axes[:-2]))
    o.vectorize(lanes)
    return s


def _source_block(out: Tensor) -> int:
    """The channel block a conversion to the plain layout reads (its input's innermost axis),
    or 0 where it converts to blocks."""
    inputs = out.op.inputs()
    return inputs[0].shape[-1] if len(inputs) == 1 and len(inputs[0].shape) == len(out.shape) + 1 else 0


def schedule_conv2d_blocked(out: Tensor, vector_lanes: int) -> Schedule:
    """Register tiles of one block of output channels (the vector) × up to 4 output columns,
    the reduction outside them; padding and packing at root. The tunable template
    (search_spaces/llvm/conv2d_nchwc.py) does better; this is the op library's plain baseline."""
    s = create_schedule(out)
    anchor = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == CONV2D_NCHWC_TAG)
    for st in s.stages:
        if st.op.tag == EPILOGUE_TAG and st.op is not out.op:
            s.compute_inline(st)
        elif st.op.tag in (PAD_TAG, PACK_TAG) and len(st.op.axes) > 1:
            st.parallel(st.fuse(*st.op.axes[:-1]))
    acc = s[s.cache_write(anchor, "local")] if out.op is anchor.op else s[anchor]
    acc.set_scope("local")
    o = s[out]
    n, ocb, oh, ow, b = o.op.axes
    owo, owi = o.split(ow, next(t for t in (4, 3, 2, 1) if ow.extent % t == 0))
    o.reorder(n, ocb, oh, owo, owi, b)
    tile = o.fuse(n, ocb, oh, owo)
    o.parallel(tile)
    o.vectorize(b)
    s.compute_at(acc, o, tile)
    axes, reduce = acc.op.axes, acc.op.reduce_axes
    acc.reorder(*axes[:3], *reduce, axes[3], axes[4])
    acc.unroll(axes[3])
    acc.vectorize(axes[4])
    return s


__all__ = ["schedule_conv2d_blocked", "schedule_layout_transform", "conv2d_nchwc", "conv2d_blocked", "blocked_bias", "layout_transform", "pack_weights", "pack_data", "CONV2D_NCHWC_TAG", "PACK_TAG", "UNPACK_TAG"]
