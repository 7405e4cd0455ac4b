"""The implicit-GEMM form of a 2-D convolution on the GPU: per image and group, the GEMM
Y[oc, p] = Σ_k W[oc, k] · X̂[k, p] of M = OC / groups output channels, N = OH·OW output pixels
and K = IC / groups · KH·KW, where X̂ is the im2col matrix of the group's input channels. X̂ is
never stored: it is an operand view whose index arithmetic (k → channel and window offset,
p → output row and column, padding as a bounds test) the shared-memory copy evaluates while it
gathers each K step's tile, so the tiling is the matmul template's own (`schedule_gemm`). Images and groups run on blockIdx.z, so
tiles do not straddle two images or groups; the GEMM over all N·OH·OW pixels is that one, cut at
image borders.

Where it pays: 1×1 and strided convolutions and small maps with many channels, whose windows
share little between neighbouring outputs for the direct template's shared tiles to reuse; and
groups wide enough for whole GEMM tiles, as split-K makes them (`graph/passes/split_k.py`: a
deep convolution's input channels cut into groups whose outputs are summed afterwards).
"""
from __future__ import annotations

from collections.abc import Callable

from autosched import te
from autosched.ops.conv import conv_geometry
from autosched.ops.epilogue import EpilogueFn, apply_epilogue, bias_add
from autosched.ops.transform import INJECTIVE_TAG
from autosched.te import Tensor
from search_spaces.llvm.conv2d import ConvDims

IMPLICIT_GEMM_TAG = "conv2d_implicit_gemm"


#: a group's output channels are a multiple of this, and its reduction at least MIN_GROUP_K long,
#: for the GEMM form (narrower groups, depthwise ones above all, would fill a fraction of each
#: tile: they stay direct)
GROUP_ROWS, MIN_GROUP_K = 32, 32


def gemm_groups(d: ConvDims) -> bool:
    """Whether the convolution has the GEMM form: one group, or groups of whole GEMM tiles."""
    return d.groups == 1 or (d.oc // d.groups % GROUP_ROWS == 0 and d.c // d.groups * d.kh * d.kw >= MIN_GROUP_K)


def group_rows_fit(d: ConvDims, padded_rows: int) -> bool:
    """Whether GEMM rows padded to a multiple of `padded_rows` (a block's, or a raster group's)
    stay within each group: a block that ran past its group's channels would read the next
    group's as its own (the output's channel -> (group, row) map is a division the bounds of a
    padded tile cannot resolve)."""
    return d.groups == 1 or (d.oc // d.groups) % padded_rows == 0


def _weight_rows(w: Tensor, d: ConvDims) -> Tensor:
    """W as an OC × K matrix, K a group's (k = (ic·KH + kh)·KW + kw: OIHW's own order, a free view)."""
    window = d.kh * d.kw
    return te.compute((d.oc, d.c // d.groups * window), lambda o, k: w[o, k // window, k // d.kw % d.kh, k % d.kw],
                      name="weight_rows", tag=INJECTIVE_TAG)


def _im2col(xp: Tensor, d: ConvDims) -> Tensor:
    """The padded input as N × K × (OH·OW) im2col matrices, one per image (never materialized)."""
    (sh, sw), (dh, dw), window = d.stride, d.dilation, d.kh * d.kw

    def body(n, k, p):
        return xp[n, k // window, p // d.ow * sh + k // d.kw % d.kh * dh, p % d.ow * sw + k % d.kw * dw]

    return te.compute((d.n, d.c * window, d.oh * d.ow), body, name="im2col", tag=INJECTIVE_TAG)


#: builds a batched product on another layout: (batch, (m, n, k), a_at(batch index, row, k),
#: b_at(batch index, k, column), whether k is each operand's innermost dimension) -> batch + (m, n)
Product = Callable[[tuple[int, ...], tuple[int, int, int], Callable, Callable, tuple[bool, bool]], Tensor]


def conv2d_implicit_gemm(x: Tensor, w: Tensor, bias: Tensor | None, d: ConvDims,
                         epilogue: tuple[EpilogueFn, ...], product: Product | None = None) -> Tensor:
    """The convolution's NCHW output (bias and epilogue applied) read from the GEMM's N × OC ×
    (OH·OW) result (N × groups × OC / groups × (OH·OW) with several groups), whose stage carries
    IMPLICIT_GEMM_TAG; or, given a `product`, from what it makes of the same operands (the tensor
    cores' layout)."""
    if not gemm_groups(d):
        raise ValueError(f"implicit GEMM needs groups of a multiple of {GROUP_ROWS} output channels and "
                         f"{MIN_GROUP_K} products, not {d.oc // d.groups} and {d.c // d.groups * d.kh * d.kw}")
    *_, xp = conv_geometry(x, w, d.stride, d.pads, d.dilation, "conv2d")
    a, b = _weight_rows(w, d), _im2col(xp, d)
    rows, depth = d.oc // d.groups, a.shape[1]
    if d.groups == 1:
        if product is None:
            k = te.reduce_axis(depth, "k")
            gemm = te.compute((d.n, d.oc, d.oh * d.ow), lambda n, o, p: te.sum(a[o, k] * b[n, k, p], [k]),
                              name="implicit_gemm", tag=IMPLICIT_GEMM_TAG)
        else:
            gemm = product((d.n,), (d.oc, d.oh * d.ow, depth), lambda i, o, k: a[o, k],
                           lambda i, k, p: b[i[0], k, p], (True, False))
        y = te.compute((d.n, d.oc, d.oh, d.ow), lambda n, o, h, v: gemm[n, o, h * d.ow + v], name="conv2d",
                       tag=INJECTIVE_TAG)
    else:
        if product is None:
            k = te.reduce_axis(depth, "k")
            gemm = te.compute((d.n, d.groups, rows, d.oh * d.ow),
                              lambda n, g, o, p: te.sum(a[g * rows + o, k] * b[n, g * depth + k, p], [k]),
                              name="implicit_gemm", tag=IMPLICIT_GEMM_TAG)
        else:
            gemm = product((d.n, d.groups), (rows, d.oh * d.ow, depth), lambda i, o, k: a[i[1] * rows + o, k],
                           lambda i, k, p: b[i[0], i[1] * depth + k, p], (True, False))
        y = te.compute((d.n, d.oc, d.oh, d.ow), lambda n, o, h, v: gemm[n, o // rows, o % rows, h * d.ow + v],
                       name="conv2d", tag=INJECTIVE_TAG)
    pre = (bias_add(bias, 1),) if bias is not None else ()
    return apply_epilogue(y, pre + epilogue)


__all__ = ["IMPLICIT_GEMM_TAG", "conv2d_implicit_gemm", "gemm_groups", "group_rows_fit"]
