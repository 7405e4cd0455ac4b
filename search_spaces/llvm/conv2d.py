"""CPU templates for Conv (2-D, NCHW in and out, with bias and fused epilogue).

Two schedules, chosen by the task's groups (one template is registered for Conv; its space
is the variant's):

- `blocked` (groups == 1: regular, 1×1, strided, dilated): output channels in blocks of
  `oc_bn`, computed in the NCHW[oc_bn]c layout of `autosched.ops.conv_nchwc` so each register
  tile is tile_oh × tile_ow pixels × oc_bn channels with the channels vectorized; the input is
  broadcast from NCHW or, with `layout` "nchwc", packed to NCHW[ic_bn]c first. Knobs: the
  blocks, the reduction order and whether kw is unrolled, the order of the output tile loops
  and how many fuse into the parallel loop, padding at root or inline. On 3×3 stride-1 tasks
  the knob `algorithm` also offers Winograd F(2×2)/F(4×4) (`conv2d_winograd`, which owns those
  knobs, their schedule and their share of the fallback).
- `grouped` (groups > 1, depthwise included): the NCHW compute of `autosched.ops.conv`,
  vectorized along the output columns (the contiguous axis of a per-channel convolution),
  with tile_oc channel rows unrolled; the same tile-order, padding and parallel knobs.

Both refuse a register tile beyond `max_accumulators` of the target (see `common`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from autosched.ops import conv as conv_ops
from autosched.ops import conv_nchwc
from autosched.ops.transform import PAD_TAG
from autosched.ops.util import parallel_copy, vector_width
from autosched.opset.conv import EXACT_SUMS_ATTR
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace, Knob, ReorderKnob, SplitKnob, SplitPolicy
from autosched.target import Target
from autosched.task import Task
from autosched.te import IterVar, Tensor
from autosched.templates import TemplateError
from search_spaces.llvm import conv2d_winograd as winograd
from search_spaces.llvm.common import (
    CpuTemplate,
    check_register_tile,
    cpu_capabilities,
    divisors,
    inline_epilogue,
    task_tensors,
    vector_lanes,
)

MAX_TILE_OW = 32
TILE_OH = (1, 2, 4)
OUTER_ORDERS = (("oc", "oh", "ow"), ("oh", "oc", "ow"), ("oh", "ow", "oc"))
REDUCE_ORDERS = (("ico", "kh", "kw", "ici"), ("ico", "ici", "kh", "kw"), ("kh", "kw", "ico", "ici"))
MAX_CHANNEL_BLOCKS = 4
MAX_PADDED_CHANNELS = 1 / 4
MAX_GROUPED_TILE_OC = 8
MAX_FALLBACK_COLUMNS = 8


@dataclass(frozen=True)
class ConvDims:
    n: int
    c: int
    h: int
    w: int
    oc: int
    kh: int
    kw: int
    oh: int
    ow: int
    groups: int
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    exact_sums: bool = False  # integer operands (`EXACT_SUMS_ATTR`): no Winograd


def conv_dims(task: Task) -> ConvDims:
    if task.op != "Conv":
        raise TemplateError(f"the conv2d template does not handle op {task.op}")
    if len(task.shapes[0]) != 4:
        raise TemplateError(f"Conv over {len(task.shapes[0]) - 2} spatial dims: only 2-D convolution has a template")
    attrs = dict(task.attrs)
    (n, c, h, w), (oc, _, kh, kw) = task.shapes[0], task.shapes[1]
    _, _, oh, ow = task.out_shapes[0]
    pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    return ConvDims(n, c, h, w, oc, kh, kw, oh, ow, int(attrs.get("group", 1)), tuple(attrs.get("strides", (1, 1))),
                    pads, tuple(attrs.get("dilations", (1, 1))), bool(attrs.get(EXACT_SUMS_ATTR)))


def _channel_blocks(channels: int, lanes: int) -> tuple[int, ...]:
    """Whole vectors of channels that divide the count; else its largest small divisors, and
    the whole vectors that pad it least where that padding is at most `MAX_PADDED_CHANNELS`
    of the computed channels (`conv2d_nchwc` pads the filters with zeros)."""
    whole = tuple(lanes * v for v in range(1, MAX_CHANNEL_BLOCKS + 1) if channels % (lanes * v) == 0)
    if whole:
        return whole
    least = -(-channels // lanes) * lanes
    padded = tuple(lanes * v for v in range(1, MAX_CHANNEL_BLOCKS + 1) if -(-channels // (lanes * v)) * lanes * v == least)
    return divisors(channels, MAX_CHANNEL_BLOCKS * lanes)[-MAX_CHANNEL_BLOCKS:] + (
        padded if least - channels <= MAX_PADDED_CHANNELS * least else ())


class ConvOutput(Protocol):
    """What `conv_knobs` reads of a convolution: its output's size and its padding. `ConvDims`
    and the NCHWc template's `BlockedConvDims` both have them."""

    @property
    def oh(self) -> int: ...

    @property
    def ow(self) -> int: ...

    @property
    def pads(self) -> tuple[int, int, int, int]: ...


def conv_knobs(d: ConvOutput) -> list[Knob]:
    """The knobs the direct convolution templates (NCHW and NCHWc) share: output tiling, where
    the padding is computed, the outer loop order and how many outer loops run in parallel."""
    padded = any(d.pads)
    return [
        SplitKnob("tile_ow", d.ow, 2, SplitPolicy.ANY if shifted_columns(d.oh, d.ow) else SplitPolicy.FACTORS,
                  max_innermost=MAX_TILE_OW),
        ChoiceKnob("tile_oh", tuple(v for v in TILE_OH if d.oh % v == 0)),
        ChoiceKnob("pad", ("root", "inline") if padded else ("none",)),
        ReorderKnob("outer_order", OUTER_ORDERS),
        ChoiceKnob("parallel_depth", (1, 2, 3, 4)),
    ]


def shifted_columns(oh: int, ow: int) -> bool:
    """Whether the column tiles of an output `oh` x `ow` may leave a remainder, the last tile
    shifted back to end at the row's end (`Stage.split(shift=True)`, the columns it shares with
    the tile before computed twice). For widths whose divisors give no register tile of 4 to
    `MAX_FALLBACK_COLUMNS` columns: SqueezeNet's 13x13 layers could only tile 1 or 13 columns,
    and its 1x1 512->1000 classifier ran at 11 GFLOP/s (Xeon, 2 threads) with 1 x 1 tiles; and
    for outputs of one row (a 1-D convolution, a 1x1 one over its image as one row,
    `flatten_pointwise`), where the row's tiles are all the tiling there is and one shifted tile
    in thousands costs nothing. Other widths keep exact divisors, and with them the space of
    their shipped records."""
    if ow <= MAX_FALLBACK_COLUMNS:
        return False
    return oh == 1 or max(divisors(ow, MAX_FALLBACK_COLUMNS)) < 4


def split_columns(stage: Stage, ow: IterVar, columns: int) -> tuple[IterVar, IterVar]:
    """The column tiles of `conv_knobs`' tile_ow: shifted where they do not divide the row."""
    return stage.split(ow, columns, shift=ow.extent % columns != 0)


def fallback_columns(knob: Knob, target: Target, tile_oc: int = 2) -> tuple[int, int]:
    """The fallback's tile_ow: as many columns as leave registers for the weight vectors (two,
    or `tile_oc` where more) and the broadcast input, up to `MAX_FALLBACK_COLUMNS`, in as few
    tiles as the row allows, and of those the narrowest (shifted tiles then recompute the
    fewest columns; exact divisors have one width per tile count)."""
    vectors = max(2, tile_oc)
    return fewest_column_tiles(knob, min(MAX_FALLBACK_COLUMNS, (cpu_capabilities(target).vector_registers - 1 - vectors) // vectors))


def fewest_column_tiles(knob: Knob, columns: int) -> tuple[int, int]:
    """The tile_ow of at most `columns` columns in the fewest tiles (each loads and stores its
    accumulators once), and of those the narrowest (a shifted last tile recomputes the fewest)."""
    return min((w for w in knob.values if w[1] <= columns), key=lambda w: (w[0], w[1]))


def place_pad(s: Schedule, config: Config) -> None:
    """Inline the padding stages or give them a parallel copy loop of their own, as the `pad`
    knob of `conv_knobs` says."""
    for st in s.stages:
        if st.op.tag == PAD_TAG:
            if config["pad"] == "inline":
                s.compute_inline(st)
            else:
                parallel_copy(st)


def _tile_output(s: Schedule, out: Tensor, acc: Stage, config: Config, oc_tile: int) -> None:
    """Tiles of the NCHW output (oc_tile channels × tile_oh rows × tile_ow columns), outer tile
    loops in the configured order with the first `parallel_depth` fused and parallel; the
    accumulator `acc` is computed per tile."""
    o = s[out]
    n, oc, oh, ow = o.op.axes
    oco, oci = o.split(oc, oc_tile)
    oho, ohi = o.split(oh, config["tile_oh"])
    owo, owi = split_columns(o, ow, config["tile_ow"][1])
    tiles = {"oc": oco, "oh": oho, "ow": owo}
    outer = [n] + [tiles[a] for a in config["outer_order"]]
    o.reorder(*outer, oci, ohi, owi)
    depth = config["parallel_depth"]
    o.parallel(o.fuse(*outer[:depth]))
    o.vectorize(owi)
    s.compute_at(acc, o, o.leaf_axes[len(outer) - depth])


def _register_tile(acc: Stage, outer: list, loops: dict, config: Config, unrolled: tuple, vector) -> None:
    """The accumulator's loops: `outer`, the reduction in the configured order (kw unrolled if
    so configured), then the register tile, unrolled around its vectorized innermost axis."""
    acc.reorder(*outer, *[loops[a] for a in config["reduce_order"]], *unrolled, vector)
    if config["unroll_kw"]:
        acc.unroll(loops["kw"])
    for axis in unrolled:
        acc.unroll(axis)
    acc.vectorize(vector)


class _Blocked:
    name = "conv2d_nchwc_llvm"

    def space(self, d: ConvDims, lanes: int) -> ConfigSpace:
        one_by_one = d.kh == d.kw == 1
        return ConfigSpace(self.name, (
            ChoiceKnob("oc_bn", _channel_blocks(d.oc, lanes)),
            ChoiceKnob("layout", ("nchw", "nchwc")),
            ChoiceKnob("ic_bn", divisors(d.c, MAX_CHANNEL_BLOCKS * lanes)),
            ReorderKnob("reduce_order", REDUCE_ORDERS[:1] if one_by_one else REDUCE_ORDERS),
            ChoiceKnob("unroll_kw", (False, True) if d.kw > 1 else (False,)),
            *conv_knobs(d),
            *(winograd.winograd_knobs((d.oh, d.ow), d.dilation) if self._winograd(d) else ()),
        ))

    @staticmethod
    def _winograd(d: ConvDims) -> bool:
        return not d.exact_sums and winograd.eligible((d.kh, d.kw), d.stride, d.dilation, d.groups)

    def schedule(self, task: Task, d: ConvDims, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        lanes = vector_lanes(target, task.dtypes[0])
        if winograd.algorithm(config) != winograd.DIRECT:
            return winograd.schedule_winograd_nchw(task, config, target, lanes, padding=d.pads, dilation=d.dilation)
        oc_bn, ic_bn = config["oc_bn"], config["ic_bn"]
        vec = lanes if oc_bn % lanes == 0 else oc_bn
        check_register_tile(config["tile_oh"] * config["tile_ow"][1] * (oc_bn // vec), config, target)
        tt = task_tensors(task)
        packed = config["layout"] == "nchwc"
        out = conv_nchwc.conv2d_nchwc(
            tt.anchor[0], tt.anchor[1], tt.anchor[2] if len(tt.anchor) > 2 else None, stride=d.stride,
            padding=d.pads, dilation=d.dilation, oc_bn=oc_bn, ic_bn=ic_bn if packed else None, epilogue=tt.epilogue)
        s = create_schedule(out)
        inline_epilogue(s, out, tags=(conv_nchwc.UNPACK_TAG,))
        place_pad(s, config)
        for st in s.stages:
            if st.op.tag == conv_nchwc.PACK_TAG:
                parallel_copy(st)
        acc = next(st for st in s.stages if st.op.tag == conv_nchwc.CONV2D_NCHWC_TAG)
        acc.set_scope("local")
        _tile_output(s, out, acc, config, oc_bn)

        n, occ, oh, ow, ocb = acc.op.axes
        if packed:
            ico, kh, kw, ici = acc.op.reduce_axes
        else:
            ic, kh, kw = acc.op.reduce_axes
            ico, ici = acc.split(ic, ic_bn)
        loops = {"ico": ico, "ici": ici, "kh": kh, "kw": kw}
        ocbo, ocbv = acc.split(ocb, vec)
        _register_tile(acc, [n, occ], loops, config, (oh, ow, ocbo), ocbv)
        return s, list(tt.args) + [out]


    def fallback(self, d: ConvDims, space: ConfigSpace, lanes: int, target: Target, direct_only: bool = False) -> Config:
        """Two vectors of output channels per register tile and as many output columns as leave
        registers for the two weight vectors and the broadcast input: up to 8 columns (16
        accumulators) with AVX-512's 32 registers, 6 with AVX2's 16. Inputs are packed to
        NCHW[ic_bn]c except for 1×1 kernels, where the packing costs about what the
        convolution does. On ResNet-18's convolutions (AVX-512, 2 threads) this took the
        kernels from 92 ms to 25 ms in all; 608 tuning trials reached 20 ms."""
        knobs = {k.name: k for k in space.knobs}
        values = {
            "oc_bn": max([b for b in knobs["oc_bn"].values if b <= 2 * lanes] or knobs["oc_bn"].values[:1]),
            "layout": "nchw" if d.kh == d.kw == 1 else "nchwc",
            "ic_bn": max([b for b in knobs["ic_bn"].values if b <= lanes] or knobs["ic_bn"].values[:1]),
            "reduce_order": REDUCE_ORDERS[0],
            "unroll_kw": False,
            "tile_ow": fallback_columns(knobs["tile_ow"], target),
            "tile_oh": 1,
            "pad": "inline" if "inline" in knobs["pad"].values else knobs["pad"].values[0],
            "outer_order": OUTER_ORDERS[0],
            "parallel_depth": 3,
        }
        if self._winograd(d):  # Winograd where it pays (its own rule), else these direct values
            values.update(winograd.direct_values() if direct_only else
                          winograd.fallback_values(space, d.c, d.oc, (d.oh, d.ow), d.dilation, lanes, target))
        if (d.c % lanes or d.oc % lanes) and "root" in knobs["pad"].values and values.get("algorithm", winograd.DIRECT) == winograd.DIRECT:
            # channels in blocks of no whole vector: the padded input as a copy of its own. Alone
            # (2 threads, EPYC Zen 4, best of 5): HRNet's 18 -> 36 channels, 3x3 stride 2 on 56x56
            # 0.171 -> 0.138 ms, 26 channels 5x5 on 28x28 0.470 -> 0.267 ms; in the model
            # (`benchmarks/models.py --baseline`, 40 runs) 1.24x and 1.73x faster
            values["pad"] = "root"
        return space.from_values(values)


class _Grouped:
    name = "conv2d_grouped_llvm"

    def space(self, d: ConvDims, lanes: int) -> ConfigSpace:
        return ConfigSpace(self.name, (
            ChoiceKnob("tile_oc", divisors(d.oc, MAX_GROUPED_TILE_OC)),
            ReorderKnob("reduce_order", (("ic", "kh", "kw"), ("kh", "kw", "ic"))),
            ChoiceKnob("unroll_kw", (False, True) if d.kw > 1 else (False,)),
            *conv_knobs(d),
        ))

    def schedule(self, task: Task, d: ConvDims, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        lanes = vector_lanes(target, task.dtypes[0])
        ow_tile = config["tile_ow"][1]
        ow_vec = vector_width(ow_tile, lanes)
        check_register_tile(config["tile_oc"] * config["tile_oh"] * -(-ow_tile // ow_vec), config, target)
        tt = task_tensors(task)
        out = conv_ops.conv2d(tt.anchor[0], tt.anchor[1], tt.anchor[2] if len(tt.anchor) > 2 else None,
                              stride=d.stride, padding=d.pads, dilation=d.dilation, groups=d.groups,
                              epilogue=tt.epilogue)
        s = create_schedule(out)
        inline_epilogue(s, out)
        place_pad(s, config)
        anchor = next(st for st in s.stages if st.op.tag == conv_ops.CONV2D_TAG)
        acc = anchor if anchor.op is not out.op else s[s.cache_write(out, "local")]
        acc.set_scope("local")
        _tile_output(s, out, acc, config, config["tile_oc"])

        n, oc, oh, ow = acc.op.axes
        ic, kh, kw = acc.op.reduce_axes
        loops = {"ic": ic, "kh": kh, "kw": kw}
        owo, owv = acc.split(ow, ow_vec)
        _register_tile(acc, [n], loops, config, (oc, oh, owo), owv)
        return s, list(tt.args) + [out]


class Conv2dTemplate(CpuTemplate):
    """Conv on CPUs: the blocked variant for groups == 1, the grouped one otherwise."""

    name = "conv2d_llvm"

    def _variant(self, d: ConvDims) -> _Blocked | _Grouped:
        return _BLOCKED if d.groups == 1 else _GROUPED

    def space(self, task: Task, target: Target) -> ConfigSpace:
        d = conv_dims(task)
        return self._variant(d).space(d, vector_lanes(target, task.dtypes[0]))

    def fallback(self, task: Task, target: Target, direct_only: bool = False) -> Config | None:
        """The blocked variant's rule of thumb (`direct_only`: without Winograd's); depthwise and
        grouped convolutions keep the op library's schedule, which beat every simple rule tried
        on MobileNetV2's."""
        d = conv_dims(task)
        if self._variant(d) is not _BLOCKED:
            return None
        return _BLOCKED.fallback(d, self.space(task, target), vector_lanes(target, task.dtypes[0]), target, direct_only)

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        d = conv_dims(task)
        return self._variant(d).schedule(task, d, config, target)


_BLOCKED = _Blocked()
_GROUPED = _Grouped()
TEMPLATE = Conv2dTemplate()
