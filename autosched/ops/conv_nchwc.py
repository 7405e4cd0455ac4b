"""2-D convolution computed in the blocked NCHW[x]c layout, for groups == 1.

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

from typing import Sequence

from autosched import te
from autosched.ops.conv import conv_geometry
from autosched.ops.epilogue import EpilogueFn, apply_epilogue, bias_add
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


def conv2d_nchwc(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, *, oc_bn: int,
                 ic_bn: int | None = None, epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d") -> Tensor:
    """The NCHW result of conv2d(x, w) (+ bias, epilogue), computed blocked by `oc_bn` output channels.

    Stages: padding (tag "pad", when there is any), weight and data packing (tag "pack"), the
    blocked convolution (tag "conv2d_nchwc"), its unpacking to NCHW (tag "unpack"), then one
    stage per epilogue function.
    """
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"{name}: expects NCHW input and OIHW weights, got {list(x.shape)} and {list(w.shape)}")
    n, c, h, wd = x.shape
    oc, ic, kh_, kw_ = w.shape
    if ic != c:
        raise ValueError(f"{name}: {c} input channels but weights {list(w.shape)} (grouped convolutions "
                         "are not blocked)")
    if oc_bn < 1 or oc % oc_bn:
        raise ValueError(f"{name}: output channel block {oc_bn} does not divide {oc} channels")
    if ic_bn is not None and (ic_bn < 1 or c % ic_bn):
        raise ValueError(f"{name}: input channel block {ic_bn} does not divide {c} channels")
    (sh, sw), (dh, dw), (top, left, bottom, right), (oh_, ow_), xp = conv_geometry(x, w, stride, padding, dilation, name)
    wp = pack_weights(w, oc_bn, ic_bn)
    kh = te.reduce_axis(kh_, "kh")
    kw = te.reduce_axis(kw_, "kw")
    if ic_bn is None:
        icr = te.reduce_axis(c, "ic")

        def body(b, o, y, z, ob):
            return te.sum(xp[b, icr, y * sh + kh * dh, z * sw + kw * dw] * wp[o, icr, kh, kw, ob], [icr, kh, kw])
    else:
        xc = pack_data(xp, ic_bn)
        icc, icb = te.reduce_axis(c // ic_bn, "icc"), te.reduce_axis(ic_bn, "icb")

        def body(b, o, y, z, ob):
            return te.sum(xc[b, icc, y * sh + kh * dh, z * sw + kw * dw, icb] * wp[o, icc, kh, kw, icb, ob],
                          [icc, kh, kw, icb])

    attrs = {"stride": (sh, sw), "padding": (top, left, bottom, right), "dilation": (dh, dw), "oc_bn": oc_bn,
             "ic_bn": ic_bn}
    blocked = te.compute((n, oc // oc_bn, oh_, ow_, oc_bn), body, name=f"{name}_nchwc", tag=CONV2D_NCHWC_TAG,
                         attrs=attrs)
    y = te.compute((n, oc, oh_, ow_), lambda b, o, r, s: blocked[b, o // oc_bn, r, s, o % oc_bn], name=name,
                   tag=UNPACK_TAG)
    pre = (bias_add(bias, 1),) if bias is not None else ()
    return apply_epilogue(y, pre + tuple(epilogue))


__all__ = ["conv2d_nchwc", "pack_weights", "pack_data", "CONV2D_NCHWC_TAG", "PACK_TAG", "UNPACK_TAG"]
