"""Integer convolutions on blocked maps: uint8 activations by int8 filters into exact int32 sums.

What a quantized model's convolution computes once its operands' zero points are taken out
(`graph/passes/integer_conv.py`). The input is NCHW[ib]c bytes, so the four channels
4q .. 4q + 3 of a pixel's block are one word (`codegen.dot.word_source`: one 32-bit load); the
filters are packed into words of four input channels per output lane, [OC/ob, C/ib, KH, KW,
ib/4, ob], which the build precomputes. Each step of the reduction is then one `dot4`
(vpdpbusd) per output vector: 4 input channels by ob output channels, 64 products where a
float32 FMA does 16. The padding holds the input's zero point (`pad_value`), not 0, so the
zero point's correction is one constant per output channel, the same at the borders; a zero
point computed at run time (DynamicQuantizeLinear's) is a third input, read by the padding.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autosched import te
from autosched.ops.conv import conv_out_size
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn, apply_epilogue
from autosched.ops.integer_matmul import PACK_TAG, WORD, byte_word
from autosched.ops.transform import PAD_TAG, pad
from autosched.ops.util import as_pads2d, as_pair, local_accumulator, parallel_copy
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor

INTEGER_CONV_TAG = "integer_conv_nchwc"
#: the untuned kernel's register tile: four output blocks (one vector each) by four pixels, 16
#: accumulators; per step of the reduction 4 filter vectors and 4 pixel words feed 16 vpdpbusd.
#: Timed alone (`LocalRunner`, weights folded, Xeon, 2 threads) on a uint8 ResNet-18's layers
#: against two blocks by a row of 7 or 8 pixels: 56x56 and 28x28 maps 0.204 and 0.229 ms with
#: the pixels a column of 4 against 0.296 and 0.298 (a row of 8: 28 accumulators spilled, 0.72),
#: 14x14 0.231-0.361 with a 2x2 square against 0.247-0.481 (the column, which 14 rows do not
#: hold whole, 0.273-0.521), 7x7 0.521 with the column against 0.648 with the square (neither
#: divides 7), stride-2 layers alike
OC_TILE = 4
DEFAULT_ACCUMULATORS = 16


def default_tile(out_blocks: int, rows: int, width: int, taps: int) -> tuple[int, int, int]:
    """(oc_tile, tile_oh, tile_ow) of the untuned kernel. A filter of several taps: as many of
    `OC_TILE` output blocks as divide them, by four pixels: a column where 4 divides the rows,
    else a 2x2 square where 2 divides both sides, else a column (a row where there is one
    row). A 1x1 filter (one tap): two blocks by the widest divisor of the row within 16
    accumulators, which MobileNetV2's pointwise layers ran faster with (its uint8 model 0.88x
    and 0.92x as fast in two alternated runs with the four-block tile)."""
    if taps == 1:
        oc_tile = 2 if out_blocks % 2 == 0 else 1
        limit = DEFAULT_ACCUMULATORS // oc_tile
        return oc_tile, 1, max(d for d in range(1, min(width, limit) + 1) if width % d == 0)
    oc_tile = next(t for t in (OC_TILE, 2, 1) if out_blocks % t == 0)
    if rows == 1:
        return oc_tile, 1, min(4, width)
    if rows % 4 and rows % 2 == 0 and width % 2 == 0:
        return oc_tile, 2, 2
    return oc_tile, 4, 1


def integer_conv_nchwc(x: Tensor, w: Tensor, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                       dilation: int | Sequence[int] = 1, *, pad_value: int | Tensor, out_block: int,
                       epilogue: Sequence[EpilogueFn] = (), name: str = "integer_conv") -> Tensor:
    """y[n, o, oh, ow, ob] = Σ int32(x_padded[n, c // ib, oh·s + kh·d, ow·s + kw·d, c % ib]) ·
    int32(w[o·ob + ob, c, kh, kw]) for uint8 x in blocks of ib (a multiple of 4) and int8 OIHW
    w, the padding `pad_value` (a constant, or a 0-d uint8 tensor)."""
    if x.dtype != "uint8" or w.dtype != "int8" or x.ndim != 5 or w.ndim != 4 or x.shape[-1] % WORD:
        raise ValueError(f"{name}: expects uint8 NCHW[ib]c input, ib a multiple of {WORD}, and int8 OIHW weights, got "
                         f"{x.dtype}{list(x.shape)} and {w.dtype}{list(w.shape)}")
    n, blocks, h, wd, ib = x.shape
    oc, c, kh_, kw_ = w.shape
    if c != blocks * ib or oc % out_block:
        raise ValueError(f"{name}: weights {list(w.shape)} do not match {blocks * ib} input channels in blocks "
                         f"of {ib} and output blocks of {out_block}")
    (sh, sw), (dh, dw) = as_pair(stride, "stride"), as_pair(dilation, "dilation")
    top, left, bottom, right = as_pads2d(padding)
    oh, ow = conv_out_size(h, kh_, sh, top, bottom, dh), conv_out_size(wd, kw_, sw, left, right, dw)
    xp = x
    if top or left or bottom or right:
        xp = pad(x, ((0, 0), (0, 0), (top, bottom), (left, right), (0, 0)), value=pad_value, name=f"{name}_pad")
    words = ib // WORD
    wp = te.compute((oc // out_block, blocks, kh_, kw_, words, out_block),
                    lambda o, b, y, z, q, ob: byte_word(lambda t: w[o * out_block + ob, b * ib + q * WORD + t, y, z]),
                    name=f"{w.name}_words", tag=PACK_TAG)
    cb, kh, kw, q = (te.reduce_axis(e, v) for e, v in ((blocks, "cb"), (kh_, "kh"), (kw_, "kw"), (words, "q")))

    def body(b, o, y, z, ob):
        pixel = (b, cb, y * sh + kh * dh, z * sw + kw * dw)
        return te.sum(te.dot4(byte_word(lambda t: xp[pixel + (q * WORD + t,)]), wp[o, cb, kh, kw, q, ob]),
                      [cb, kh, kw, q])

    y = te.compute((n, oc // out_block, oh, ow, out_block), body, name=name, tag=INTEGER_CONV_TAG,
                   attrs={"stride": (sh, sw), "padding": (top, left, bottom, right), "dilation": (dh, dw)})
    return apply_epilogue(y, epilogue)


def integer_conv_of(inputs: Sequence[Tensor], attrs: Mapping[str, Any], epilogue: Sequence[EpilogueFn] = ()) -> Tensor:
    """`integer_conv_nchwc` of the graph node's inputs (x, w and, where the padding's value is
    known at run time only, that value) with its attributes (ONNX's names)."""
    x, w = inputs[0], inputs[1]
    return integer_conv_nchwc(x, w, attrs.get("strides", (1, 1)), tuple(attrs.get("pads", (0, 0, 0, 0))),
                              attrs.get("dilations", (1, 1)),
                              pad_value=inputs[2] if len(inputs) > 2 else attrs["pad_value"],
                              out_block=attrs["out_block"], epilogue=epilogue)


def schedule_integer_conv(out: Tensor, lanes: int, oc_tile: int = 1, tile_oh: int = 1, tile_ow: int = 1) -> Schedule:
    """Register tiles of `oc_tile` output blocks by `tile_oh` x `tile_ow` pixels, over the
    threads; each accumulates in registers over input blocks, taps and words (the words and
    the tile unrolled), one vector of `lanes` int32 per output block and pixel. The padded
    input is written once, in parallel."""
    s = create_schedule(out)
    anchor = next(st for st in s.stages if st.op.tag == INTEGER_CONV_TAG)
    for st in s.stages:
        if st.op is not out.op and st.op.tag == EPILOGUE_TAG:
            s.compute_inline(st)
        elif st.op.tag in (PACK_TAG, PAD_TAG):
            parallel_copy(st)
    acc = local_accumulator(s, anchor, out)
    o = s[out]
    b, oc, oh, ow, ob = o.op.axes
    oco, oci = o.split(oc, oc_tile)
    oho, ohi = o.split(oh, tile_oh)
    owo, owi = o.split(ow, tile_ow)
    o.reorder(b, oco, oho, owo, oci, ohi, owi, ob)
    tile = o.fuse(b, oco, oho, owo)
    o.parallel(tile)
    _, obv = o.split(ob, lanes)
    o.vectorize(obv)
    s.compute_at(acc, o, tile)
    ab, aoc, aoh, aow, aob = acc.op.axes
    cb, kh, kw, q = acc.op.reduce_axes
    _, aobv = acc.split(aob, lanes)
    acc.reorder(ab, cb, kh, kw, q, aoc, aoh, aow, aobv)
    for axis in (q, aoc, aoh, aow):
        acc.unroll(axis)
    acc.vectorize(aobv)
    return s
