"""Convolution (NCHW): the anchor most models spend their time in."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.ops import conv as conv_ops
from autosched.opset.algebra import AlgebraOp
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape, UnsupportedTaskError, contiguous, on_output
from autosched.opset.window import channel_param, output_spatial, pad_spatial, sliding_windows, window_attrs
from autosched.te import Tensor


def conv_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    """Output of a convolution of plain (unblocked) operands."""
    x, w = inputs[0], inputs[1]
    group = node.attrs["group"]
    if len(x.shape) != len(w.shape) or len(x.shape) < 3:
        raise ValueError(f"input {list(x.shape)} and weight {list(w.shape)} ranks differ")
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ValueError(f"input channels {x.shape[1]} do not match weight {list(w.shape)} with group {group}")
    if len(inputs) == 3 and inputs[2].shape != (w.shape[0],):
        raise ValueError(f"bias has shape {list(inputs[2].shape)}, expected [{w.shape[0]}]")
    spatial = output_spatial(node, x.shape[2:], w.shape[2:], ceil_mode=False)
    return [((x.shape[0], w.shape[0], *spatial), x.dtype)]


def conv_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    """Grouped convolution as strided windows and one matmul per group, so whole models evaluate
    in seconds."""
    x, w = args[0], args[1]
    rank = x.ndim - 2
    pads = attrs["pads"]
    group = attrs["group"]
    padded = pad_spatial(x, pads[:rank], pads[rank:], 0)
    windows = sliding_windows(padded, w.shape[2:], attrs["strides"], attrs["dilations"])
    n, c = x.shape[:2]
    out_spatial = windows.shape[2:2 + rank]
    m = w.shape[0]
    cg, mg = c // group, m // group
    patch = cg * math.prod(w.shape[2:])
    cols = windows.reshape(n, group, cg, *out_spatial, *w.shape[2:])
    cols = np.moveaxis(cols, 2, 2 + rank).reshape(n, group, -1, patch).transpose(1, 0, 2, 3).reshape(group, -1, patch)
    weights = w.reshape(group, mg, patch).transpose(0, 2, 1)
    y = np.matmul(cols, weights)  # [group, n * out pixels, mg]
    y = y.reshape(group, n, *out_spatial, mg)
    y = np.moveaxis(y, -1, 1).reshape(group * mg, n, *out_spatial).swapaxes(0, 1)
    if len(args) == 3:
        y = y + channel_param(args[2], x.ndim)
    return [contiguous(y).astype(x.dtype, copy=False)]


def _compute(args: ComputeArgs) -> list[Tensor]:
    at = args.attrs
    if len(args.inputs[0].shape) != 4:
        raise UnsupportedTaskError(f"Conv over {len(args.inputs[0].shape) - 2} spatial dims: "
                                   "only 2-D convolution is compiled")
    p = at.get("pads", (0, 0, 0, 0))
    ins = args.inputs
    return [conv_ops.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=at.get("strides", (1, 1)),
                            padding=(p[0], p[1], p[2], p[3]), dilation=at.get("dilations", (1, 1)),
                            groups=at.get("group", 1), epilogue=args.epilogues)]


#: a Conv of integers less their zero points (the integer ONNX ops, `opset.quantize`): its sums
#: must be the exact integer ones, so no algorithm that rounds between the products (Winograd)
EXACT_SUMS_ATTR = "exact_sums"


def import_conv(imp: Importer, node: OnnxNode, exact_sums: bool = False) -> None:
    x, w = imp.value(node.inputs[0]), imp.value(node.inputs[1])
    kernel = node.attr("kernel_shape", w.shape[2:])
    attrs = window_attrs(node, x.shape[2:], kernel)
    if tuple(kernel) != w.shape[2:]:
        raise node.error(f"kernel_shape {list(kernel)} disagrees with weight shape {list(w.shape)}")
    del attrs["kernel_shape"]
    attrs["group"] = int(node.attr("group", 1))
    if exact_sums:
        attrs[EXACT_SUMS_ATTR] = 1
    inputs = [name for name in node.inputs if name]
    imp.emit(node, Op.CONV, inputs, node.outputs, attrs)


def _import_transpose(imp: Importer, node: OnnxNode) -> None:
    """ConvTranspose: strided ones as a convolution of every output phase (`_import_phases`);
    otherwise (no stride, or a bias computed at run time) as a convolution of the input with
    zeros inserted between its elements (stride - 1 of them along each axis) by the transposed,
    spatially flipped filters, padded by dilation · (kernel - 1) less the given padding, plus
    output_padding at the end. The zeros come from a Reshape that gives each element axes of 1,
    a Pad of those axes to the stride, and a Reshape back."""
    x, w = imp.value(node.inputs[0]), node.required_const(1)
    rank = len(x.shape) - 2
    if rank not in (1, 2, 3) or w.ndim != rank + 2:
        raise node.error(f"ConvTranspose over {rank} spatial dims: 1-D, 2-D and 3-D are compiled")
    group = int(node.attr("group", 1))
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != w.shape[2:] or w.shape[0] != x.shape[1] or x.shape[1] % group:
        raise node.error(f"weight {list(w.shape)} does not match input {list(x.shape)} with group {group}")
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    extra = list(node.attr("output_padding", [0] * rank))
    span = [d * (k - 1) + 1 for d, k in zip(dilations, kernel)]
    natural = [s * (n - 1) + e + k for s, n, e, k in zip(strides, x.shape[2:], extra, span)]
    pads = list(node.attr("pads", [0] * 2 * rank))
    auto_pad, output_shape = node.attr("auto_pad", "NOTSET"), node.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = list(output_shape)[-rank:] if output_shape is not None else [n * s for n, s in zip(x.shape[2:], strides)]
        total = [a - b for a, b in zip(natural, target)]
        upper = auto_pad == "SAME_UPPER"
        pads = [t // 2 if upper else t - t // 2 for t in total] + [t - t // 2 if upper else t // 2 for t in total]
    elif auto_pad == "VALID":
        pads = [0] * 2 * rank
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if _import_phases(imp, node, x, w, group, strides, dilations, pads, extra, bias):
        return
    # the filters as a convolution's: [C_out, C_in / group, ...], each group's transposed, flipped
    c_in, c_out = w.shape[0] // group, w.shape[1]
    flipped = w[(slice(None), slice(None)) + (slice(None, None, -1),) * rank]
    filters = flipped.reshape(group, c_in, c_out, *kernel).swapaxes(1, 2).reshape(group * c_out, c_in, *kernel)
    weight = f"{node.outputs[0]}:filters"
    imp.add_constant(weight, np.ascontiguousarray(filters))
    source = node.inputs[0]
    if any(s > 1 for s in strides):  # zeros between the elements: [.., n, 1, ..] padded to [.., n, s, ..]
        steps = [(n, 1) for n in x.shape[2:]]
        spread = (*x.shape[:2], *(d for pair in steps for d in pair))
        after = [0, 0] + [a for s in strides for a in (0, s - 1)]
        names = [f"{node.outputs[0]}:{part}" for part in ("spread", "strided", "zeros")]
        imp.emit(replace(node, name=f"{node.name}/spread"), Op.RESHAPE, [source], [names[0]], {"shape": spread})
        imp.emit(replace(node, name=f"{node.name}/strided"), Op.PAD, [names[0]], [names[1]],
                 {"pads": (0,) * len(spread) + tuple(after), "mode": "constant", "value": 0})
        imp.emit(replace(node, name=f"{node.name}/zeros"), Op.RESHAPE, [names[1]], [names[2]],
                 {"shape": (*x.shape[:2], *(n * s for n, s in zip(x.shape[2:], strides)))})
        source = names[2]
    # the convolution's padding: the full correlation's, less the given; the zero tail of the
    # last element's stride counts against the end
    begin = [sp - 1 - p for sp, p in zip(span, pads[:rank])]
    end = [sp - 1 - p + e - (s - 1) for sp, p, e, s in zip(span, pads[rank:], extra, strides)]
    if min(begin + end) < 0:  # padding beyond the full correlation's crops the input
        length = imp.value(source).shape[2:]
        starts = [0, 0] + [max(0, -b) for b in begin]
        ends = [*x.shape[:2]] + [n + min(0, e) for n, e in zip(length, end)]
        cropped = f"{node.outputs[0]}:cropped"
        imp.emit(replace(node, name=f"{node.name}/crop"), Op.SLICE, [source], [cropped],
                 {"starts": tuple(starts), "ends": tuple(ends), "steps": (1,) * (rank + 2)})
        source, begin, end = cropped, [max(0, b) for b in begin], [max(0, e) for e in end]
    attrs = {"strides": (1,) * rank, "dilations": tuple(dilations), "pads": tuple(begin + end), "group": group}
    imp.emit(node, Op.CONV, [source, weight, *([bias] if bias else [])], node.outputs, attrs)


def _import_phases(imp: Importer, node: OnnxNode, x: Value, w: np.ndarray, group: int, strides: list[int],
                   dilations: list[int], pads: list[int], extra: list[int], bias: str) -> bool:
    """A strided ConvTranspose as one convolution that computes all stride^rank phases of its
    output at once, then a depth-to-space shuffle and a crop (the sub-pixel decomposition).

    Along an axis of stride s and kernel K, the output at q·s + r sums x[q - j]·w[j·s + r] over
    j < ceil(K/s): for each phase r an ordinary convolution of the input, stride 1, by every
    s-th tap of the flipped filter. Stacking the phases as output channels (c, r_h, r_w) makes
    one convolution of C_out·s^rank channels with kernels ceil(K/s) wide, multiplying no inserted
    zero (the zero-insertion form multiplies s^rank times more terms; a DCGAN generator's 4x4
    stride-2 layers ran at 3.6x onnxruntime's time that way). An axis of one input element
    takes the stride K, which changes nothing there: its whole output is one patch (a 1x1
    input's 4x4 output is a matrix product). False where it does not apply: no stride, or a
    bias computed at run time."""
    rank, n_in = len(kernel_axes := w.shape[2:]), x.shape[2:]
    if bias and bias not in imp.constants:
        return False
    # dilation: the filter with its holes filled by zeros; then every tap sits at its offset
    span = [d * (k - 1) + 1 for d, k in zip(dilations, kernel_axes)]
    dense = np.zeros((*w.shape[:2], *span), w.dtype)
    dense[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dilations)] = w
    steps = [max(s, k) if n == 1 else s for s, k, n in zip(strides, span, n_in)]
    if all(s == 1 for s in steps):
        return False
    out_len = [s * (n - 1) + e + k - pb - pe for s, n, e, k, pb, pe
               in zip(strides, n_in, extra, span, pads[:rank], pads[rank:])]
    taps = [-(-k // s) for k, s in zip(span, steps)]
    first = [min(pb // s, j - 1) for pb, s, j in zip(pads[:rank], steps, taps)]  # the first phase row computed
    last = [-(-(pb + o) // s) for pb, o, s in zip(pads[:rank], out_len, steps)]  # one past the last
    conv_pads = [j - 1 - f for j, f in zip(taps, first)] + [max(0, e - n) for e, n in zip(last, n_in)]
    rows = [n + b + e - j + 1 for n, b, e, j in zip(n_in, conv_pads[:rank], conv_pads[rank:], taps)]
    # filters [(c_out, r...), c_in / group, j...]: phase r's tap m is w[(J - 1 - m)·s + r] (zero past K)
    c_in, c_out = w.shape[0] // group, w.shape[1]
    padded = np.zeros((*w.shape[:2], *(j * s for j, s in zip(taps, steps))), w.dtype)
    padded[(slice(None), slice(None)) + tuple(slice(0, k) for k in span)] = dense
    phased = padded.reshape(group, c_in, c_out, *(d for j, s in zip(taps, steps) for d in (j, s)))
    phased = phased[(slice(None),) * 3 + tuple(a for _ in range(rank) for a in (slice(None, None, -1), slice(None)))]
    order = (0, 2, *(4 + 2 * a for a in range(rank)), 1, *(3 + 2 * a for a in range(rank)))
    filters = phased.transpose(order).reshape(group * c_out * math.prod(steps), c_in, *taps)
    if _import_separate_phases(imp, node, filters, group, steps, taps, pads[:rank], out_len, bias):
        return True
    name = node.outputs[0]
    inputs = [node.inputs[0], f"{name}:phase_filters"]
    imp.add_constant(inputs[1], filters)
    if bias:
        inputs.append(f"{name}:phase_bias")
        imp.add_constant(inputs[2], np.repeat(imp.constants[bias], math.prod(steps)))
    n, _ = x.shape[:2]
    phases, split, spread, whole = (f"{name}:{part}" for part in ("phases", "split", "spread", "whole"))
    imp.emit(replace(node, name=f"{node.name}/phases"), Op.CONV, inputs, [phases],
             {"strides": (1,) * rank, "dilations": (1,) * rank, "pads": tuple(conv_pads), "group": group})
    imp.emit(replace(node, name=f"{node.name}/split"), Op.RESHAPE, [phases], [split],
             {"shape": (n, group * c_out, *steps, *rows)})
    imp.emit(replace(node, name=f"{node.name}/spread"), Op.TRANSPOSE, [split], [spread],
             {"perm": (0, 1, *(i for a in range(rank) for i in (2 + rank + a, 2 + a)))})
    shape = (n, group * c_out, *(r * s for r, s in zip(rows, steps)))
    offsets = [pb - f * s for pb, f, s in zip(pads[:rank], first, steps)]
    if tuple(shape[2:]) == tuple(out_len):
        imp.emit(node, Op.RESHAPE, [spread], node.outputs, {"shape": shape})
        return True
    imp.emit(replace(node, name=f"{node.name}/merge"), Op.RESHAPE, [spread], [whole], {"shape": shape})
    imp.emit(node, Op.SLICE, [whole], node.outputs,
             {"starts": (0, 0, *offsets), "ends": (n, group * c_out, *(o + k for o, k in zip(offsets, out_len))),
              "steps": (1,) * (rank + 2)})
    return True


#: computed phase pixels over needed ones from which each phase is a convolution of its own
#: (`_import_separate_phases`). The DCGAN generator's 4x4 layer (1.56x, 512 -> 256 channels):
#: one convolution 1.31 ms in the model untuned and 1.08 at the best of a scan of its tiles and
#: orders, four 1.15 ms untuned and 4 x 0.19 at their best. Its 8x8 layer (1.27x) lost untuned:
#: 4 x 0.24-0.26 against 0.91 ms (EPYC Zen 3, 2 threads): each phase's image is small for the
#: untuned tile, and four tasks share the tuning budget one had.
SEPARATE_PHASES_WASTE = 1.5


def _import_separate_phases(imp: Importer, node: OnnxNode, filters: np.ndarray, group: int, steps: list[int],
                            taps: list[int], pads: list[int], out_len: list[int], bias: str) -> bool:
    """The phases as one convolution each, over exactly the rows each needs, joined on the
    channel axis (in place) and interleaved: no crop, no pixel computed only to be cropped.

    One convolution of all phases computes, along each axis, the union of the rows the phases
    need, and they need different ones where the padding is not a multiple of the stride: a
    DCGAN layer of kernel 4, stride 2 and padding 1 on 4x4 computes 5x5 rows per phase for the
    4x4 each needs, 1.56x the multiply-adds (1.27x on 8x8). Each phase r along an axis needs q
    from q_lo = ceil((pad - r) / s), as many as out_len / s where s divides the output, and
    lands at offset q_lo·s + r - pad of each stride of the output: the phases, joined in the
    order of those offsets, interleave as one Transpose. False where the waste is below
    `SEPARATE_PHASES_WASTE`, s does not divide the output, or a phase would need negative padding."""
    rank = len(steps)
    x = imp.value(node.inputs[0])
    n_in = x.shape[2:]
    if any(o % s for o, s in zip(out_len, steps)):
        return False
    counts = [o // s for o, s in zip(out_len, steps)]
    union = [max(n, -(-(p + o) // s)) - min(p // s, j - 1)  # the rows of one convolution of all phases
             for n, p, o, s, j in zip(n_in, pads, out_len, steps, taps)]
    if math.prod(union) < SEPARATE_PHASES_WASTE * math.prod(counts):
        return False
    axes = []  # per axis, per phase r: (offset in each stride of the output, pad begin, pad end)
    for n, p, s, j, count in zip(n_in, pads, steps, taps, counts):
        phases = []
        for r in range(s):
            q_lo = -(-(p - r) // s)
            begin = j - 1 - q_lo
            end = count - n - begin + j - 1
            if min(begin, end) < 0:
                return False
            phases.append((q_lo * s + r - p, begin, end))
        axes.append(phases)
    group_channels = filters.shape[0] // math.prod(steps)
    per_phase = filters.reshape(group_channels, *steps, *filters.shape[1:])
    name, (batch, _) = node.outputs[0], x.shape[:2]
    placed: dict[tuple[int, ...], str] = {}  # offsets in the output's strides -> the phase's output
    for r in np.ndindex(*steps):
        tag = "_".join(map(str, r))
        weight, out = f"{name}:phase{tag}_filters", f"{name}:phase{tag}"
        imp.add_constant(weight, np.ascontiguousarray(per_phase[(slice(None),) + tuple(r)]))
        phase_pads = tuple(axes[a][r[a]][1] for a in range(rank)) + tuple(axes[a][r[a]][2] for a in range(rank))
        imp.emit(replace(node, name=f"{node.name}/phase{tag}"), Op.CONV,
                 [node.inputs[0], weight, *([bias] if bias else [])], [out],
                 {"strides": (1,) * rank, "dilations": (1,) * rank, "pads": phase_pads, "group": group})
        placed[tuple(axes[a][r[a]][0] for a in range(rank))] = out
    joined, split, spread = (f"{name}:{part}" for part in ("phases", "split", "spread"))
    imp.emit(replace(node, name=f"{node.name}/phases"), Op.CONCAT, [placed[k] for k in sorted(placed)], [joined],
             {"axis": 1})
    imp.emit(replace(node, name=f"{node.name}/split"), Op.RESHAPE, [joined], [split],
             {"shape": (batch, *steps, group_channels, *counts)})
    imp.emit(replace(node, name=f"{node.name}/spread"), Op.TRANSPOSE, [split], [spread],
             {"perm": (0, 1 + rank, *(i for a in range(rank) for i in (2 + rank + a, 1 + a)))})
    imp.emit(node, Op.RESHAPE, [spread], node.outputs, {"shape": (batch, group_channels, *out_len)})
    return True


def _same_conv_attrs(shapes: Sequence[Shape], size: int | None) -> dict[str, Any]:
    """A 2-D convolution, stride 1, padded so the output keeps the input's size (odd kernels)."""
    kh, kw = shapes[1][2:]
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"kernel {kh}x{kw} has no centre: 'same' padding needs odd sizes")
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    return {"strides": (1, 1), "dilations": (1, 1), "pads": (ph, pw, ph, pw), "group": 1}


#: `conv(x, w)`: stride 1, "same" padding, one group; [N, C, H, W] * [F, C, kh, kw] -> [N, F, H, W]
SAME_CONV = AlgebraOp("conv", Op.CONV, (4, 4), lambda a, n: (a[0][0], a[1][0], a[0][2], a[0][3]),
                      lambda a: [(a[0][1], a[1][1])], _same_conv_attrs)

#: `convb(x, w, b)`: the same with a bias [F] added to each output channel
SAME_CONV_BIAS = AlgebraOp("convb", Op.CONV, (4, 4, 1), lambda a, n: (a[0][0], a[1][0], a[0][2], a[0][3]),
                           lambda a: [(a[0][1], a[1][1]), (a[2][0], a[1][0])], _same_conv_attrs)

RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.CONV, OpKind.ANCHOR, conv_shape, conv_reference, _compute, on_output(conv_ops.schedule_conv2d),
          {"Conv": Converter(import_conv), "ConvTranspose": Converter(_import_transpose, constant_inputs=(1,))},
          algebra=(SAME_CONV, SAME_CONV_BIAS)),
)
