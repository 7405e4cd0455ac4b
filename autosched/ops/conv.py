"""2-D convolution, NCHW activations and OIHW weights: strides, padding, dilation, groups.

Padding is its own stage (tag "pad") so a schedule chooses where the zeros come from: computed
at root, the convolution reads a plain tensor and its inner loop stays branch-free and
vectorizable; inlined, no padded copy is stored. Bias, activations and residual adds arrive
as epilogue stages, like every anchor op's.
"""
from __future__ import annotations

from collections.abc import Sequence

from autosched import te
from autosched.ops.epilogue import EPILOGUE_TAG, EpilogueFn, apply_epilogue, bias_add
from autosched.ops.transform import PAD_TAG, pad
from autosched.ops.util import as_pads2d, as_pair, vector_width
from autosched.schedule import Schedule, create_schedule
from autosched.te import Tensor

CONV2D_TAG = "conv2d"


def conv_out_size(size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int) -> int:
    """floor((size + pads - dilation·(kernel-1) - 1) / stride) + 1, the window count of ONNX and PyTorch."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def conv_geometry(x: Tensor, w: Tensor, stride, padding, dilation, name: str) -> tuple:
    """(strides, dilations, pads (top, left, bottom, right), output (h, w), padded input) of a 2-D
    convolution; x is NCHW, or blocked NCHW[b]c (its trailing block axis is not padded)."""
    h, wd = x.shape[2:4]
    kh_, kw_ = w.shape[2:]
    sh, sw = as_pair(stride, "stride")
    dh, dw = as_pair(dilation, "dilation")
    top, left, bottom, right = as_pads2d(padding)
    oh_, ow_ = conv_out_size(h, kh_, sh, top, bottom, dh), conv_out_size(wd, kw_, sw, left, right, dw)
    if oh_ < 1 or ow_ < 1:
        raise ValueError(f"{name}: the {kh_}x{kw_} kernel does not fit the padded {h}x{wd} input")
    padded = top or left or bottom or right
    widths = ((0, 0), (0, 0), (top, bottom), (left, right)) + ((0, 0),) * (x.ndim - 4)
    xp = pad(x, widths, name=f"{name}_pad") if padded else x
    return (sh, sw), (dh, dw), (top, left, bottom, right), (oh_, ow_), xp


def conv2d(x: Tensor, w: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1,
           epilogue: Sequence[EpilogueFn] = (), name: str = "conv2d") -> Tensor:
    """y[n, oc, oh, ow] = Σ x[n, g·Cg + ic, oh·s + kh·d - pad, ow·s + kw·d - pad] · w[oc, ic, kh, kw].

    g = oc // (OC / groups) picks the group; groups = C with one weight per input channel is the
    depthwise convolution. `padding` is an int, (h, w) or ONNX's (top, left, bottom, right).
    """
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"{name}: expects NCHW input and OIHW weights, got {list(x.shape)} and {list(w.shape)}")
    n, c, h, wd = x.shape
    oc, icg, kh_, kw_ = w.shape
    if groups < 1 or c % groups or oc % groups or c // groups != icg:
        raise ValueError(f"{name}: {c} input channels in {groups} groups do not match weights {list(w.shape)} "
                         f"({icg} input channels per group, {oc} outputs divisible by groups)")
    (sh, sw), (dh, dw), (top, left, bottom, right), (oh_, ow_), xp = conv_geometry(x, w, stride, padding, dilation, name)
    ocg = oc // groups
    ic = te.reduce_axis(icg, "ic")
    kh = te.reduce_axis(kh_, "kh")
    kw = te.reduce_axis(kw_, "kw")

    def body(n_, oc_, oh, ow):
        ch = ic if groups == 1 else (oc_ // ocg) * icg + ic
        return te.sum(xp[n_, ch, oh * sh + kh * dh, ow * sw + kw * dw] * w[oc_, ic, kh, kw], [ic, kh, kw])

    attrs = {"stride": (sh, sw), "padding": (top, left, bottom, right), "dilation": (dh, dw), "groups": groups}
    y = te.compute((n, oc, oh_, ow_), body, name=name, tag=CONV2D_TAG, attrs=attrs)
    pre = (bias_add(bias, 1),) if bias is not None else ()
    return apply_epilogue(y, pre + tuple(epilogue))


def schedule_conv2d(out: Tensor, vector_lanes: int) -> Schedule:
    """Register tiles of 8 output channels × one vector of output columns.

    Per tile a local accumulator runs the reduction (input channels, then the kernel window)
    with the channel rows unrolled and the columns vectorized: each step loads one vector of
    input, broadcasts eight weights and issues eight FMAs. In NCHW the columns are the
    contiguous axis of both input and output, which is why they, not the channels, carry the
    vector. The vector width is the widest of lanes, lanes/2, lanes/4 that divides the output
    width (see `vector_width`). Padding is computed at root so the inner loop reads without conditions.
    """
    s = create_schedule(out)
    anchor = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == CONV2D_TAG)
    for st in s.stages:
        if st.op.tag == EPILOGUE_TAG and st.op is not out.op:
            s.compute_inline(st)
        elif st.op.tag == PAD_TAG:
            st.parallel(st.fuse(*st.op.axes[:3]))
    if out.op is anchor.op:
        acc = s[s.cache_write(anchor, "local")]
    else:
        acc = s[anchor]
        acc.set_scope("local")
    o = s[out]
    n, oc, oh, ow = o.op.axes
    lanes = vector_width(ow.extent, vector_lanes)
    oc_block = next((b for b in (8, 4, 2) if oc.extent % b == 0), min(8, oc.extent))
    oco, oci = o.split(oc, oc_block)
    owo, owi = o.split(ow, lanes)
    o.reorder(n, oco, oh, owo, oci, owi)
    tile = o.fuse(n, oco, oh, owo)
    o.parallel(tile)
    o.vectorize(owi)
    s.compute_at(acc, o, tile)
    an, aoc, aoh, aow = acc.op.axes
    ic, kh, kw = acc.op.reduce_axes
    acc.reorder(an, aoh, ic, kh, kw, aoc, aow)
    acc.unroll(aoc)
    acc.vectorize(aow)
    return s

