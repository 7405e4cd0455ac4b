"""CPU template for ConvNCHWc: the convolutions layout planning put in channel blocks.

The task's layout is fixed by the graph (input in blocks of `in_block`, or plain; output in
blocks of `out_block`), so no knob packs or unpacks activations: what is tuned is the register
tile and the loops around it.

- dense (groups == 1, or groups of whole blocks, whose reduction runs over their own input
  blocks only): each register tile is tile_oc blocks of output channels × tile_oh rows
  × tile_ow columns, one vector per (block, pixel); each reduction step broadcasts one input
  element against tile_oc vectors of weights. Knobs: the tile, the reduction order (input
  channel blocks, window, channels within a block), kw unrolled or not, the order of the tile
  loops and how many fuse into the parallel loop, padding at root or inline. On 3×3 stride-1
  tasks with a blocked input, `algorithm` also offers Winograd (`conv2d_winograd`).
- depthwise: a vector of channels times the vector of their filters' taps, per pixel of a
  tile_oh × tile_ow tile, the window unrolled or not; the stride never touches the vector.

Both refuse a register tile beyond `max_accumulators` of the target (see `common`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from autosched.graph.layout import blocked_groups, plain_shape
from autosched.lower.lower import CACHE_LINE_BYTES, MAX_PREFETCH_LINES
from autosched.ops import conv_nchwc
from autosched.ops.epilogue import apply_epilogue
from autosched.ops.util import parallel_copy
from autosched.opset.conv import EXACT_SUMS_ATTR
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace, Knob, ReorderKnob
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
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
from search_spaces.llvm.conv2d import (
    OUTER_ORDERS,
    REDUCE_ORDERS,
    conv_knobs,
    fallback_columns,
    fewest_column_tiles,
    place_pad,
    split_columns,
)

MAX_TILE_OC = 4
WINDOW_UNROLL = ("none", "kw", "kh_kw")


@dataclass(frozen=True)
class BlockedConvDims:
    c: int
    oc: int
    kh: int
    kw: int
    oh: int
    ow: int
    in_block: int
    out_block: int
    groups: int  # 1, the channels (depthwise), groups of whole blocks or several per block (`blocked_groups`)
    depthwise: bool
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int]
    crop: tuple[int, int, int, int] = (0, 0, 0, 0)  # the input's edges it does not read (`input_window`)
    exact_sums: bool = False  # integer operands (`EXACT_SUMS_ATTR`): no Winograd


def blocked_conv_dims(task: Task) -> BlockedConvDims:
    if task.op != "ConvNCHWc":
        raise TemplateError(f"the conv2d_nchwc template does not handle op {task.op}")
    attrs = dict(task.attrs)
    in_block, out_block = attrs["in_block"], attrs["out_block"]
    c = plain_shape(task.shapes[0], in_block)[1]
    oc, _, kh, kw = task.shapes[1]
    _, _, oh, ow, _ = task.out_shapes[0]
    groups = attrs.get("group", 1)
    return BlockedConvDims(c, oc, kh, kw, oh, ow, in_block, out_block, groups,
                           blocked_groups(c, oc, groups, in_block, out_block) == "depthwise",
                           tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("pads", (0, 0, 0, 0))),
                           tuple(attrs.get("dilations", (1, 1))), tuple(attrs.get("crop", (0, 0, 0, 0))),
                           bool(attrs.get(EXACT_SUMS_ATTR)))


class Conv2dNCHWcTemplate(CpuTemplate):
    name = "conv2d_nchwc_layout_llvm"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        d = blocked_conv_dims(task)
        if d.depthwise:
            return ConfigSpace(self.name + "_depthwise", (
                ChoiceKnob("unroll_window", WINDOW_UNROLL if d.kw > 1 else ("none",)),
                *conv_knobs(d),
            ))
        one_by_one = d.kh == d.kw == 1
        return ConfigSpace(self.name, (
            ChoiceKnob("tile_oc", divisors(d.oc // d.out_block, MAX_TILE_OC * _blocks_per_vector(d, task, target))),
            ChoiceKnob("ic_bn", (d.in_block,) if d.in_block else divisors(d.c, 64)),
            ReorderKnob("reduce_order", REDUCE_ORDERS[:1] if one_by_one else REDUCE_ORDERS),
            ChoiceKnob("unroll_kw", (False, True) if d.kw > 1 else (False,)),
            *conv_knobs(d),
            *(winograd.winograd_knobs((d.oh, d.ow), d.dilation) if _winograd(d) else ()),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """Dense: two blocks of output channels (two vectors) by as many columns as leave
        registers (`_sixteen_register_tile` on 16), one row (one block by two rows where a row
        tiles in at most 4 columns on 16: `_short_row_tile`), rows or blocks outermost by which
        operand is smaller (`_fallback_outer_order`), all tile loops parallel where the output
        is one row of a 1x1 convolution (the blocks alone may be fewer than the cores), else
        the outer three, padding at root: inline, every load of
        the hot loop carries the four bounds checks (ResNet-18's 3×3 layers ran 30% slower that
        way, 1 thread), where the copy costs one pass over the input, except in grouped layers
        of few channels a group (`_pad_inline`). Depthwise: one block by up to 8 columns, the
        window unrolled, padding inline: there the copy costs as much as the convolution
        (MobileNetV2's depthwise layers, 1 thread: 0.45-0.59 ms inline, 1.4-1.6 ms with the copy
        at root)."""
        d = blocked_conv_dims(task)
        space = self.space(task, target)
        knobs = {k.name: k for k in space.knobs}
        tile_oc = 1 if d.depthwise else _fallback_tile_oc(knobs["tile_oc"].values, _blocks_per_vector(d, task, target))
        tile_ow = fallback_columns(knobs["tile_ow"], target, tile_oc)
        if not d.depthwise:
            tile_oc, tile_ow = _sixteen_register_tile(d, tile_oc, tile_ow, knobs["tile_ow"], target)
        values = {
            "tile_ow": tile_ow,
            "tile_oh": 1,
            "pad": knobs["pad"].values[-1 if _pad_inline(d) else 0],  # ("root", "inline") or ("none",)
            "outer_order": _fallback_outer_order(d, task, tile_oc),
            "parallel_depth": 4 if _one_row_pointwise(d) else 3,
        }
        if d.depthwise:
            values["unroll_window"] = knobs["unroll_window"].values[-1]
        else:
            values.update({
                "tile_oc": tile_oc,
                "ic_bn": max(b for b in knobs["ic_bn"].values if b <= d.out_block or b == d.in_block),
                "reduce_order": REDUCE_ORDERS[0],
                "unroll_kw": False,
            })
            values.update(_short_row_tile(d, knobs, values, target))
            values.update(_window_tile(d, knobs, task, target))
            values.update(_plain_input_tile(d, knobs, values, target))
            values.update(_lanes_tile(d, knobs, target))
            values.update(_strided_groups_tile(d, knobs, target))
            values.update(_dividing_row_tile(d, knobs, values, task, target))
            if _winograd(d):
                values.update(winograd.blocked_fallback_values(d.c, d.oc, (d.oh, d.ow), d.dilation,
                                                               d.in_block, d.out_block,
                                                               vector_lanes(target, task.dtypes[0]),
                                                               cpu_capabilities(target)))
        return space.from_values(values)

    def canonical(self, task: Task, config: Config, target: Target) -> Config:
        """The config of `config`'s kernel that tuners measure: a Winograd config reads only
        `winograd.BLOCKED_KNOBS`, the others at the fallback's values; a direct one with the
        Winograd knobs at `winograd.direct_values`. The spaces are a product of both algorithms'
        knobs, so without it each Winograd kernel of a ResNet-18 3x3 layer stands for thousands
        of configs and each direct one for 16, and a tune times the same kernel again."""
        if "algorithm" not in {k.name for k in config.space.knobs}:
            return config
        given = {k.name: config[k.name] for k in config.space.knobs}
        if winograd.algorithm(config) == winograd.DIRECT:
            values = {**given, **{k: v for k, v in winograd.direct_values().items() if k != "algorithm"}}
        else:
            reference = _fallback_values(self, task, target)
            values = {k: v if k in winograd.BLOCKED_KNOBS else reference[k] for k, v in given.items()}
        return config if values == given else config.space.from_values(values)

    def register_tile(self, task: Task, config: Config, target: Target) -> int | None:
        """The direct kernel's tile (output-channel blocks × rows × columns); None for Winograd,
        whose direct knobs do not apply."""
        if winograd.algorithm(config) != winograd.DIRECT:
            return None
        return _direct_tile(blocked_conv_dims(task), config)

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        d = blocked_conv_dims(task)
        if winograd.algorithm(config) != winograd.DIRECT:  # the direct knobs do not apply
            tt = task_tensors(task)
            bias = (conv_nchwc.blocked_bias(tt.anchor[2], d.out_block),) if len(tt.anchor) > 2 else ()
            return winograd.schedule_winograd_blocked(tt, config, target, vector_lanes(target, task.dtypes[0]),
                                                      d.pads, d.dilation, d.out_block, bias)
        tile_oc = 1 if d.depthwise else config["tile_oc"]
        check_register_tile(_direct_tile(d, config), config, target)
        tt = task_tensors(task)
        x, w = tt.anchor[0], tt.anchor[1]
        y = conv_nchwc.conv2d_blocked(x, w, d.stride, d.pads, d.dilation, in_block=d.in_block,
                                      out_block=d.out_block, groups=d.groups, crop=d.crop)
        pre = (conv_nchwc.blocked_bias(tt.anchor[2], d.out_block),) if len(tt.anchor) > 2 else ()
        out = apply_epilogue(y, pre + tuple(tt.epilogue))
        s = create_schedule(out)
        inline_epilogue(s, out)
        place_pad(s, config)
        for st in s.stages:
            if st.op.tag == conv_nchwc.PACK_TAG:
                parallel_copy(st)
        acc = s[y] if y.op is not out.op else s[s.cache_write(out, "local")]
        acc.set_scope("local")
        _tile_blocked_output(s, out, acc, config, tile_oc)
        n, occ, oh, ow, ocb = acc.op.axes
        if d.depthwise:
            kh, kw = acc.op.reduce_axes
            acc.reorder(n, kh, kw, occ, oh, ow, ocb)
            for axis in {"kw": (kw,), "kh_kw": (kh, kw)}.get(config["unroll_window"], ()):
                acc.unroll(axis)
        else:
            if d.in_block:
                ico, kh, kw, ici = acc.op.reduce_axes
            else:
                ic, kh, kw = acc.op.reduce_axes
                ico, ici = acc.split(ic, config["ic_bn"])
            loops = {"ico": ico, "ici": ici, "kh": kh, "kw": kw}
            spatial = (oh, ow, occ) if _spills(tile_oc, config, target) else (occ, oh, ow)
            acc.reorder(n, *[loops[a] for a in config["reduce_order"]], *spatial, ocb)
            if config["unroll_kw"]:
                acc.unroll(kw)
            if _prefetched(d, config, task.dtypes[0]):
                acc.prefetch(x, ico, acc.op.axes[3], config["tile_ow"][1])
        for axis in (occ, oh, ow):
            acc.unroll(axis)
        acc.vectorize(ocb)
        return s, list(tt.args) + [out]


#: multiply-adds per input element up to which the fallback pads inline (`_pad_inline`)
INLINE_PAD_MACS = 36


@functools.lru_cache(maxsize=256)
def _fallback_values(template: Conv2dNCHWcTemplate, task: Task, target: Target) -> dict[str, object]:
    """The fallback config's knob values (`Conv2dNCHWcTemplate.canonical` asks for every proposal)."""
    config = template.fallback(task, target)
    return {k.name: config[k.name] for k in config.space.knobs}


def _direct_tile(d: BlockedConvDims, config: Config) -> int:
    """The direct kernel's register tile in vectors: output-channel blocks × rows × columns."""
    return (1 if d.depthwise else config["tile_oc"]) * config["tile_oh"] * config["tile_ow"][1]


def _pad_inline(d: BlockedConvDims) -> bool:
    """Whether the fallback pads in the hot loop's loads rather than in a copy at root: where the
    convolution does at most `INLINE_PAD_MACS` multiply-adds per input element (taps x output
    channels per group / stride²), the copy's one pass over the input is as much work as the
    bounds checks it saves. Depthwise layers do 9; grouped layers of 8 channels a group 72 at
    stride 1 and 18 at stride 2, where the copy cost most (in isolation, 2 threads: ResNeXt's
    56 -> 28 layer of 32 groups 0.84 -> 0.49 ms, RegNet's 28 -> 14 one of 26 groups 0.19 -> 0.08);
    dense ones 9 x their output channels and more. Several groups a block ("lanes") keep the
    copy: their hot loop loads whole blocks of it and shuffles the groups' channels into place."""
    if d.depthwise:
        return True
    per_input = d.kh * d.kw * (d.oc // d.groups) / (d.stride[0] * d.stride[1])
    kind = blocked_groups(d.c, d.oc, d.groups, d.in_block, d.out_block)
    return kind == "grouped" and per_input <= INLINE_PAD_MACS


def _blocks_per_vector(d: BlockedConvDims, task: Task, target: Target) -> int:
    """How many blocks of output channels make one vector register in a dense convolution: 2
    for blocks of 8 channels (which layout planning gives channel counts that 16 does not
    divide) on AVX-512, else 1. Narrow blocks get a register tile of as many more blocks, so
    that each broadcast input meets as many channels. Grouped ones keep 1: there each block
    reads its own group's input, and ResNeXt's 3x3 layers with 4 blocks of 4 (AVX-512) by 2
    columns ran 1.2-1.5x slower than with 2 blocks by 8 columns."""
    if d.groups != 1:
        return 1
    return max(1, vector_lanes(target, task.dtypes[0]) // d.out_block)


def _fallback_tile_oc(values: tuple[int, ...], per_vector: int) -> int:
    """Two vectors' worth of output channels (two blocks, four narrow ones), else the nearest
    count the blocks divide into: SqueezeNet's classifier, 1000 channels in 125 blocks of 8
    on AVX-512, ran 1 block x 7 columns at 68 GFLOP/s (Xeon, 2 threads), 5 blocks x 5 columns
    at 113 (`autosched bench --kernels`). MobileNetV2's 24-channel layers (3 blocks of 8) ran
    the same with 3 blocks as with 1. A tie goes to the larger count: each broadcast input then
    meets more weight vectors, and the classifier padded to 63 blocks of 16 (`pad_channels`)
    ran its 1 block x 7 columns at 135 GFLOP/s, 3 blocks at 208 (tuned best, 96 trials); 1 or
    3 blocks of MobileNetV2's 144- and 24-channel layers (AVX-512 and AVX2) measured the same
    in the model."""
    want = 2 * per_vector
    return min(values, key=lambda v: (abs(v - want), -v))


def _sixteen_register_tile(d: BlockedConvDims, tile_oc: int, tile_ow: tuple[int, int], knob: Knob,
                           target: Target) -> tuple[int, tuple[int, int]]:
    """On 16 vector registers, the tile takes as many columns as leave two registers besides
    its accumulators: 7 for two blocks, 14 for one. Where 32 registers hold the generic tile's
    8 columns, nothing changes. EPYC Zen 3, 2 threads; alone: a scan of the tile and order; in
    the model: both builds loaded, profiled alternately kernel by kernel.
    - Two blocks: one column beyond what the generic rule leaves room for (14 accumulators,
      two weight vectors and the broadcast are 17), so `_spills` puts the blocks innermost;
      gcc then keeps 13 accumulators in registers and one on the stack, a load and a store per
      reduction step (read in `objdump -d`, -mcpu=haswell). Rows of 28 and 56 get 2 x 7, where
      the generic rule gave 2 x 4: 8 accumulators, 2 weight loads and 4 broadcasts per 8 FMAs.
      ResNeXt's 1x1 256 -> 512 on 28x28 alone ran 3.1 ms in 2 x 4, 2.5 in 2 x 7 (rows
      outermost in both: 2.3 and 2.0). On a row of 7 the generic rule gave 2 x 1, two
      accumulators for the FMA latency to stall on: ResNet-18's 3x3 512 -> 512 on 7x7 ran
      7.6-10.4 ms so, 3.4 ms in 1 x 7, and 2 x 7 takes 0.78-0.85 of 1 x 7's time in the model.
    - One block (a channel count of a prime number of blocks, 5 or 13: `_fallback_tile_oc`):
      the generic rule gave 1 x 4. RegNet's 104-channel 1x1 layers alone: 48 -> 104 on 56x56
      0.46 ms in 1 x 4, 0.24 in 1 x 14; 104 -> 104 on 28x28 0.26-0.28 against 0.13-0.17. In
      the model 0.60-0.65 of the 1 x 4 tile's time, and so were the 40-channel projections of
      MobileNetV3- and EfficientNet-style blocks.
    - A plain input (a model's first layer, 3 channels, stride 2) takes one block by 14
      columns. Alone, MobileNetV2's 3 -> 32 ran 0.50 ms in the generic 2 x 4, 0.36 in 1 x 14;
      ResNet-18's 7x7 3 -> 64 3.9 against 2.6; SqueezeNet's 3 -> 64 0.49-0.50 against 0.46.
      Not 2 x 7: 0.66-0.86, 3.2 and 0.57 ms.
    - Two blocks on a row that tiles in 5 or 6 columns take those (`FITTING_COLUMNS`): 12
      accumulators, the two weight vectors and the broadcast fit the 16 registers, where 2 x 7
      leaves one weight vector in memory, read by each of its 7 FMAs (15 loads a reduction
      step against 8; `objdump -d`, znver3). EPYC Zen 3, 2 threads, alone, medians of 3:
      1x1 512 -> 512 on 42x42 (both exact) 169 -> 192 GFLOP/s, 3x3 256 -> 256 on 42x42 131 ->
      171; on shifted rows (33, 38, 129 wide: DeepLab's output stride 8, SSD) 1x1 layers 129 ->
      174-182 and 3x3 ones 119-125 -> 169-170. Rows of 7, 14, 28 and 56 tile in 4 columns at
      most below 7, and 2 x 4's 8 accumulators ran slower than 2 x 7 (above): they keep 7.
    Still the fewest column tiles, and of those the narrowest: a row of 17 keeps 3 tiles of 6
    rather than 3 of 7 (a DCGAN's transposed-convolution phase ran 1.17-1.34x slower
    recomputing 4 columns)."""
    registers = cpu_capabilities(target).vector_registers
    if registers > 16:
        return tile_oc, tile_ow
    tile_oc = tile_oc if d.in_block else 1
    if tile_oc == 2:
        fitting = fewest_column_tiles(knob, max(FITTING_COLUMNS))
        if fitting[1] in FITTING_COLUMNS:
            return tile_oc, fitting
    return tile_oc, fewest_column_tiles(knob, (registers - 2) // tile_oc)


#: columns of a two-block tile whose weights stay in registers on 16 (`_sixteen_register_tile`)
FITTING_COLUMNS = (5, 6)


#: columns up to which a two-block tile on 16 vector registers gives way to one block by two
#: rows (`_short_row_tile`)
SHORT_ROW_COLUMNS = 4


def _short_row_tile(d: BlockedConvDims, knobs: dict, values: dict, target: Target) -> dict[str, object]:
    """On 16 vector registers, a dense convolution of a blocked input whose rows tile in at most
    `SHORT_ROW_COLUMNS` columns (maps 4 or 8 wide) takes one block by two rows instead of two
    blocks by one: the same accumulators, but each weight vector loaded meets 8 pixels instead
    of 4, and these small maps' many-channel convolutions stream their weights. EPYC Zen 3, 1
    thread, alone, medians of 3-5 (two timings of one config differed by up to 1.3x there, the
    ranges below): a DCGAN's 4x4 transposed-convolution phase (512 -> 256, 2x2 taps on 4x4)
    0.36-0.37 -> 0.195-0.207 ms; a 3x3 512 -> 512 on 4x4 1.44-1.60 -> 1.04; a 3x3 stride-2 256
    -> 512 onto 8x8 (two tiles of 4 a row) 2.53-3.30 -> 2.16. Two blocks by two rows (16
    accumulators) ran 1.1-1.35x slower than one by two. In the DCGAN generator (two untuned
    builds profiled alternately, kernel by kernel, 10 rounds) the four phases took 0.86-0.89
    of their time on 1 thread, where their weights come from L3, 0.79-0.84 on 2; all kernels
    0.96 and 0.93."""
    if (cpu_capabilities(target).vector_registers > 16 or not d.in_block or d.groups != 1
            or values["tile_oc"] != 2 or values["tile_ow"][1] > SHORT_ROW_COLUMNS
            or 2 not in knobs["tile_oh"].values):
        return {}
    return {"tile_oc": 1, "tile_oh": 2}


def _one_row_pointwise(d: BlockedConvDims) -> bool:
    """A dense 1x1 convolution of one output row (`flatten_pointwise`'s, a 1-D one's): its only
    tiles are blocks and columns."""
    return d.oh == 1 and d.kh == d.kw == 1 and d.groups == 1


#: bytes of weights a tile of output blocks may keep in L1 with the blocks outermost
#: (`_fallback_outer_order`): the 32 KiB L1 data cache of the cores measured (Zen 3)
L1_WEIGHT_BYTES = 32 << 10


def _fallback_outer_order(d: BlockedConvDims, task: Task, tile_oc: int) -> tuple[str, str, str]:
    """Rows outermost where a dense convolution's input takes more bytes than its weights, else
    the blocks of output channels. Each thread's share of the outer loops re-reads the operand
    the outer loop does not index: with the blocks outermost, the whole input once per block
    tile; with rows outermost, the weights once per row. Streaming the smaller one keeps it in
    L2. ResNeXt's 1x1 layers (0.8-3.2 MiB of input, 128-512 KiB of weights) on an EPYC Zen 3
    (512 KiB of L2 a core), 2 threads: up to 2x faster in the model, with the 7-column tile of
    `_sixteen_register_tile` (both builds loaded side by side, profiled alternately
    kernel by kernel). ResNet-18's deep layers, whose weights dwarf a 7x7 or 14x14 input, keep
    the blocks outermost. Depthwise and grouped convolutions read only their own channels'
    input, so neither order re-reads more: they keep the blocks outermost (rows first ran no
    faster on RegNet's grouped and MobileNetV2's depthwise layers).

    A 1x1 convolution of one row (`_one_row_pointwise`) has no rows to put outermost: the
    choice is between its blocks, each thread keeping a block tile's weights and streaming the
    input (a few pixels from each of C/b planes), and its columns, each keeping a column tile's
    input in L1 and streaming the weights, which lie contiguous. The columns go outermost where
    the input has more channels than the output, or the block tile's weights pass
    `L1_WEIGHT_BYTES`. EPYC Zen 3, 2 threads, alone, 2 x 6 tiles, medians of 3-5, GFLOP/s
    blocks/columns outermost: 1024 -> 256 on 14x14 132/179, 576 -> 96 116/169-175, 192 -> 32
    163/182, 2048 -> 512 on 7x7 137/144-161, 1024 -> 1024 on 14x14 139/176-184; 160 -> 960
    164-170/143-155, 32 -> 192 167/152-160, 512 -> 2048 174-177/153-173, 512 -> 512 on 28x28
    184-188/172-175; 64 -> 256, 256 -> 64 and 256 -> 1024 within 3%."""
    if d.depthwise or d.groups != 1:
        return OUTER_ORDERS[0]
    if _one_row_pointwise(d):
        weights = tile_oc * d.out_block * d.c * np.dtype(task.dtypes[0]).itemsize
        return OUTER_ORDERS[2] if d.c > d.oc or weights > L1_WEIGHT_BYTES else OUTER_ORDERS[0]
    return OUTER_ORDERS[1] if np.prod(task.shapes[0]) > np.prod(task.shapes[1]) else OUTER_ORDERS[0]


#: accumulators of `_window_tile`'s register tile: the 32 registers less the weight vector, the
#: broadcast input and two to spare
WINDOW_ACCUMULATORS = 28


def _window_tile(d: BlockedConvDims, knobs: dict, task: Task, target: Target) -> dict[str, object]:
    """The direct fallback's register tile for dense convolutions with a window (kw > 1) of a
    blocked input on AVX-512 cores (32 vector registers), one vector per block (else nothing:
    the generic tile). The tile takes as many accumulators, blocks of output channels times
    output pixels, as `WINDOW_ACCUMULATORS` allows; of those, the most pixels, of the squarest
    shape; and kw is unrolled. Each weight vector loaded then meets up to 28 pixels instead of 7-8: the generic
    tile's 2 blocks x 7-8 columns streamed its weight panel (2 blocks x all input channels x
    the window: 72-144 KiB, beyond L1) once per 7-8 columns. Pixels count as the row's columns
    per tile, not the tile's width: where the width does not divide the row, the last tile
    (shifted back) recomputes columns of the one before, so of widths that make as many tiles
    the narrowest is taken. A 33-wide row had taken 2 tiles of 28 (23 columns computed twice):
    DCGAN's 64 -> 16 phase onto 33x33 0.065-0.068 -> 0.044-0.046 ms in 2 x 17 (EPYC Zen 5, 1
    thread, alone). Blocks count with pixels where the pixels alone leave accumulators idle:
    DeepLab's 12x9 regions ran 0.135 ms in one block by 4 rows by 2 x 7 columns, 0.093 by 2 x 5,
    0.076 in 2 blocks by 4 rows by 3 x 3; a 1-D convolution's 400-wide rows 0.236 in one block
    by 15 x 27, 0.215 in 2 blocks by 29 x 14; DCGAN's 128 -> 256 phase onto 17x17 0.29-0.31 in
    one block by 17 columns, 0.287 in 4 blocks by 3 x 6. ResNet-18's tiles, of 28 accumulators
    either way, keep the most pixels.

    Intel (Xeon, Sapphire Rapids class, 2 threads; in ResNet-18, rest of the build untuned,
    median of 3 interleaved builds): the 3x3 stride-2 layers 56->28 ran 0.529 -> 0.452 ms (1
    block x 4 rows x 7 columns) and 28->14 0.493 -> 0.421 (1 x 2 x 14); 14->7, 4 blocks x 7
    columns, 0.512 -> 0.452 alone. Unrolling kw alone gave 0.486 and 0.434; the 28-pixel tile
    without it ran 0.697 and 0.659, slower than the generic one. AMD (EPYC Zen 4, 2 threads):
    two untuned builds, this tile and the generic one, loaded side by side and profiled
    alternately kernel by kernel (12 rounds of 10 runs, median ratio): ResNet-18's stride-2 3x3
    layers 0.90, 0.90, 0.94, its 7x7 layers 0.96-0.97, the others 0.97-1.01, all kernels 0.977;
    a dilated (2) 3x3 layer 0.97 and a 5x5 stride-2 one 0.96; a VGG-style model's five layers
    and a U-Net decoder's 0.97-1.04, all kernels 1.00 of the generic tile's time."""
    caps = cpu_capabilities(target)
    if (caps.vector_registers < 32 or d.groups != 1 or not d.in_block or d.kw < 2
            or d.out_block != vector_lanes(target, task.dtypes[0])):
        return {}
    budget = WINDOW_ACCUMULATORS
    tiles = [(oc, oh, ow) for oh in knobs["tile_oh"].values for ow in knobs["tile_ow"].values
             for oc in knobs["tile_oc"].values if oc * oh * ow[1] <= budget or (oc == 1 and oh * ow[1] <= budget)]

    def useful(t: tuple) -> tuple:
        oc, oh, ow = t
        pixels = oh * d.ow / ow[0]  # the row's columns per tile
        return (oc * pixels, pixels, -abs(oh - ow[1]), ow[1])

    tile_oc, tile_oh, tile_ow = max(tiles, key=useful)
    return {"tile_oc": tile_oc, "tile_oh": tile_oh, "tile_ow": tile_ow, "unroll_kw": True}


#: the narrowest column tile `_dividing_row_tile` takes (the generic tile's 8 columns)
MIN_DIVIDING_COLUMNS = 8


def _dividing_row_tile(d: BlockedConvDims, knobs: dict, values: dict, task: Task, target: Target) -> dict[str, object]:
    """On 32 vector registers, a dense convolution of a blocked input whose tile so far does not
    divide its rows (the last tile, shifted back, recomputes columns) takes one block by the
    widest divisor of the row from `MIN_DIVIDING_COLUMNS` to `WINDOW_ACCUMULATORS` columns (the
    whole row up to 28): every pixel computed once, one weight vector per reduction step against
    as many broadcasts; layers with a window only where the whole row fits (`_window_tile` chose
    its tiles of wider rows by measurement), and only blocks of one whole vector. EPYC Zen 4,
    2 threads, alone, untuned config against this one, two interleaved rounds each: 1x1 1024 -> 1024 on 19x19 (2 blocks x 3 tiles of 7) 3.71-3.78 ->
    3.39-3.46 ms, 768 -> 192 on 17x17 (2 x 3 x 6) 0.400-0.403 -> 0.369-0.371, 512 -> 256 on 13x13
    (2 x 2 x 7) 0.208 -> 0.191, 512 -> 256 on 38x38 (2 x 5 x 8) 1.76-1.90 -> 1.68-1.72 (2 x 19),
    256 -> 256 on 33x33 (2 x 5 x 7) 0.678-0.680 -> 0.632-0.634 (3 x 11), 3x3 stride 2 288 -> 384
    onto 17x17 (3 blocks x 2 x 9) 2.63-2.66 -> 2.49-2.51, SqueezeNet's classifier padded to 1008
    channels on 13x13 (3 blocks x 2 x 7) 0.82-0.85 -> 0.78-0.79. Rows the tile divides (7, 14)
    ran the same either way (1x1 1024 -> 256 on 14x14, 2048 -> 512 on 7x7, 3x3 stride 2 onto 14x14)."""
    width = d.ow
    # a window's tile (`_window_tile`) was measured on rows wider than 28: only 1x1 layers split them
    widest = WINDOW_ACCUMULATORS if d.kh == d.kw == 1 or width <= WINDOW_ACCUMULATORS else 0
    columns = [w for w in range(MIN_DIVIDING_COLUMNS, widest + 1)
               if width % w == 0 and (width // w, w) in knobs["tile_ow"].values]
    if (cpu_capabilities(target).vector_registers < 32 or d.groups != 1 or not d.in_block
            or d.out_block != vector_lanes(target, task.dtypes[0])
            or width % values["tile_ow"][1] == 0 or not columns
            or 1 not in knobs["tile_oc"].values or 1 not in knobs["tile_oh"].values):
        return {}
    return {"tile_oc": 1, "tile_oh": 1, "tile_ow": (width // max(columns), max(columns))}


#: the most columns of `_lanes_tile`'s register tile
LANES_TILE_COLUMNS = 14


#: multiply-adds per input element (taps x output channels / stride²) up to which
#: `_plain_input_tile` unrolls the window and keeps the generic tile
PLAIN_UNROLL_MACS = 72
#: input channels up to which a plain input is a model's image (`_plain_input_tile`)
PLAIN_INPUT_CHANNELS = 4
#: the cores `_plain_input_tile` was measured on (gcc's names), with 32 vector registers
PLAIN_INPUT_CORES = frozenset({"znver5"})
#: the cores (32 vector registers) where its layers of few multiply-adds unroll kw with inline padding
PLAIN_UNROLL_CORES = frozenset({"znver4", "znver5"})
#: columns of `_plain_input_tile`'s one-block tile with kw unrolled, on 16 vector registers
PLAIN_UNROLL_COLUMNS = 8


def _plain_input_tile(d: BlockedConvDims, knobs: dict, values: dict, target: Target) -> dict[str, object]:
    """The direct fallback for a dense convolution of a plain input of a few channels (a model's
    first layer) on Zen 5 cores with AVX-512, and on 16 vector registers (below): padding in the loads, with kw unrolled where the layer does few
    multiply-adds per input element, else one row of as many columns as `WINDOW_ACCUMULATORS`
    holds for the blocks of the generic tile, kw rolled. The copy at root is a pass over the
    whole image for 3 input channels, and cost these layers most. EPYC Zen 5 (AVX-512), 2
    threads, in isolation (min of 3 rounds, ratios to the generic tile with the copy at root,
    over a grid of 32 tiles with inline padding): MobileNetV2's 3 -> 32, 3x3 stride 2 (72 per
    input element) 0.55 with kw unrolled, 1.13 in 2 x 14; SqueezeNet's unpadded 3 -> 64, 3x3
    stride 2 (144) 0.96 in 2 x 14; a VGG-style 3x3 stride 1, 3 -> 64 (576) 0.91 in 2 x 14, 0.92
    unrolled; ResNet-18's 7x7 stride 2, 3 -> 64 (784) 0.93 in 2 x 14, 1.06 unrolled; inline
    padding with the generic tile alone 1.24-1.26 on the last two. On Zen 4 cores (AVX-512 in
    256-bit halves) only the first holds (`PLAIN_UNROLL_CORES`): MobileNetV2's 3 -> 32 with kw
    unrolled and inline padding took 0.67-0.97 (median 0.87) of the generic tile's time in the
    model in six alternations (`model_check.kernel_seconds`, 10 rounds, EPYC Zen 4, 2 threads);
    torchvision's MobileNetV3-L 3 -> 16 0.69, MNASNet 0.72, EfficientNet-B0 0.85; ResNet-18's
    7x7 in 2 x 14 1.05. Elsewhere the generic tile stays: on an EPYC Zen 3 (AVX2, blocks of 8,
    2 threads) the same four layers ran inline and unrolled at 0.97, 1.49, 1.42 and 1.56 of the
    generic tile's time, the best of 1-2 blocks by 4-14 columns at 0.80, 0.98, 1.20 and 1.35.

    On 16 vector registers, the layers of few multiply-adds per input element pad in the loads
    too, with kw unrolled, in one block by `PLAIN_UNROLL_COLUMNS` columns: 14 (the 1 x 14 of
    `_sixteen_register_tile`) left no register for the unrolled window's inputs. EPYC Zen 3,
    alone, medians of 3, 1 / 2 threads: MobileNetV2's 3 -> 32 0.436 -> 0.372 ms / 0.223 ->
    0.188, a MobileNetV3-style 3 -> 16 (36 per input element) 0.289 -> 0.188 / 0.159 -> 0.102;
    1 x 7 within 5% of 1 x 8, 1 x 14 unrolled no faster than rolled. ResNet-18's 7x7 (784) kept
    its tile: every inline-padded one of 1-2 blocks by 7-14 columns ran 1.4-2.0x slower."""
    caps = cpu_capabilities(target)
    if d.in_block or d.groups != 1 or d.kw < 2 or d.c > PLAIN_INPUT_CHANNELS:
        return {}
    pad = {"pad": knobs["pad"].values[-1]}  # ("root", "inline") or ("none",)
    few = d.kh * d.kw * d.oc / (d.stride[0] * d.stride[1]) <= PLAIN_UNROLL_MACS
    if caps.vector_registers <= 16:
        return {**pad, "unroll_kw": True, "tile_oc": 1, "tile_oh": 1,
                "tile_ow": fewest_column_tiles(knobs["tile_ow"], PLAIN_UNROLL_COLUMNS)} if few else {}
    if caps.vector_registers < 32:
        return {}
    if few:
        return {**pad, "unroll_kw": True} if caps.core in PLAIN_UNROLL_CORES else {}
    if caps.core not in PLAIN_INPUT_CORES:
        return {}
    columns = WINDOW_ACCUMULATORS // values["tile_oc"]
    widths = [w for w in knobs["tile_ow"].values if w[1] <= columns]
    return {**pad, "tile_oh": 1, "tile_ow": max(widths, key=lambda w: (w[1], -w[0]))}


def _lanes_tile(d: BlockedConvDims, knobs: dict, target: Target) -> dict[str, object]:
    """The direct fallback's tile for convolutions with several groups per block (`blocked_groups`
    "lanes"): one block by one row of up to 14 columns (12 in 16 vector registers), the channels of a group outermost in the
    reduction and kw unrolled, so that the shuffled input of one column serves the window's
    columns it meets. On a Xeon (2 threads, 48 tiles and orders each, `LocalRunner`), ResNeXt's
    3x3 layers ran 1.36x (4 channels per group, 56x56), 1.54x (8, 28x28) and 1.09x (8, stride
    2 from 56x56) faster than with the generic tile (2 blocks x 7-8 columns, the window
    outermost, kw rolled), and within 3% of the best of the 48 tiles."""
    if blocked_groups(d.c, d.oc, d.groups, d.in_block, d.out_block) != "lanes":
        return {}
    vectors = -(-d.out_block // vector_lanes(target, "float32"))  # per block
    columns = min(LANES_TILE_COLUMNS, (cpu_capabilities(target).vector_registers - 4) // vectors)
    widths = [w for w in knobs["tile_ow"].values if w[1] <= columns]
    tile = {"tile_oc": 1, "tile_oh": 1, "tile_ow": min(widths, key=lambda w: (w[0], -w[1]))}
    return tile if d.kh == d.kw == 1 else {**tile, "reduce_order": REDUCE_ORDERS[1], "unroll_kw": True}


#: output blocks and columns of the fallback's tile for stride-2 convolutions of whole-block
#: groups on 32 vector registers (`_strided_groups_tile`)
STRIDED_GROUPS_TILE = (4, 7)


def _strided_groups_tile(d: BlockedConvDims, knobs: dict, target: Target) -> dict[str, object]:
    """The direct fallback's tile for stride-2 convolutions whose groups are whole blocks
    (`blocked_groups` "grouped") of at least four blocks a group (RegNet's downsampling 3x3
    layers, 64 channels a group):
    four output blocks by up to 7 columns, padding inline, on 32 vector registers. The padded
    copy is a pass over an input four times the output's size, and each bounds-checked load
    of the inline padding then serves four blocks' FMAs. Alone, in a cold cache (the model's
    state: `RunnerOptions(caches="cold")`), EPYC Zen 4, 2 threads, 2 rounds each: 112 -> 56,
    2 groups, 2.50-2.58 ms with the generic 2 x 7 tile padded at root, 2.14-2.23 so; 56 -> 28,
    3 groups, 0.91 -> 0.83; 28 -> 14, 8 groups, 0.64-0.73 -> 0.55-0.64. Neither change alone
    gains (inline padding with 2 blocks: 2.70; 4 blocks from the copy: 2.46-2.49), and the
    stride-1 layers of the same groups run alike either way (0.57-0.84 ms both), so they keep
    the generic tile, and so do groups of fewer than four blocks (one block a group, 256 -> 256
    at 28 -> 14: 0.079-0.087 ms in four blocks, 0.076-0.082 in two, both inline)."""
    blocks, columns = STRIDED_GROUPS_TILE
    if (blocked_groups(d.c, d.oc, d.groups, d.in_block, d.out_block) != "grouped" or d.stride != (2, 2)
            or d.oc // d.groups < blocks * d.out_block or blocks not in knobs["tile_oc"].values
            or cpu_capabilities(target).vector_registers < 32):
        return {}
    return {"tile_oc": blocks, "tile_ow": fewest_column_tiles(knobs["tile_ow"], columns),
            "pad": knobs["pad"].values[-1]}


def _spills(tile_oc: int, config: Config, target: Target) -> bool:
    """Whether a register tile with its output blocks outermost spills on `target`: gcc then keeps
    every pixel's broadcast input live across the blocks (tile_oh x tile_ow registers beside the
    accumulators and a weight vector). With the blocks innermost instead, each broadcast meets
    the tile_oc weight vectors at once and dies: a 2 x 6 tile that spilled 3 accumulators on
    AVX2 and ran a 1x1 256->256 conv at 56x56 at 60 GFLOP/s ran it at 110-115. Tiles that fit
    keep the blocks outermost, which ran ResNet-18's untuned 2 x 4 tiles 3-6% faster."""
    pixels = config["tile_oh"] * config["tile_ow"][1]
    return tile_oc > 1 and tile_oc * pixels + pixels + 1 > cpu_capabilities(target).vector_registers


#: input blocks (planes) and bytes from which a 1x1 convolution prefetches (`_prefetched`); one
#: row's input from one core's L2 on (Zen 3's)
PREFETCH_MIN_BLOCKS = 16
PREFETCH_MIN_BYTES = 1 << 20
PREFETCH_MIN_ROW_BYTES = 512 << 10


def _prefetched(d: BlockedConvDims, config: Config, dtype: str) -> bool:
    """Whether each step of the input blocks prefetches the next tile's pixels: for 1x1
    stride-1 convolutions of a blocked input, one row of pixels per tile, with many blocks and
    an input beyond the L2 caches. There each input block is a plane of its own, and a tile
    reads all of them at once: 32 streams for 256 channels, more than the hardware prefetchers
    follow, and the first pass over a tile's input waited on memory. On Zen 3 (2 cores, same-run
    A/B against the build without, kernel by kernel) ResNeXt's 1x1 layers at 56x56 and 28x28
    with 32-64 blocks ran 4-12% faster; MobileNetV2's with 2-12 blocks or inputs in L2 ran 3-5%
    slower, and so did stride 2 (twice the lines for the same work). One row per tile keeps
    the lines to fetch few (a run of `tile_ow` pixels in each plane).

    An image as one row (`flatten_pointwise`) has its whole input streamed once per block tile
    by each thread, and prefetches from one core's L2 on (`PREFETCH_MIN_ROW_BYTES`): EPYC Zen 3,
    256 -> 512 on 28x28 (800 KiB of input, blocks outermost) 75 -> 94-95 GFLOP/s on 1 thread,
    137-144 -> 146-172 on 2; 128 -> 512, 144 -> 32 on 28x28 and the 14x14 and 7x7 layers of
    ResNeXt and MobileNetV2 (columns outermost, or inputs in L2) within 2%."""
    if not (d.in_block and d.kh == d.kw == 1 and d.stride == (1, 1) and config["tile_oh"] == 1):
        return False
    itemsize = np.dtype(dtype).itemsize
    blocks, plane = d.c // d.in_block, d.oh * d.ow * d.in_block * itemsize
    min_bytes = PREFETCH_MIN_ROW_BYTES if d.oh == 1 else PREFETCH_MIN_BYTES
    if blocks < PREFETCH_MIN_BLOCKS or blocks * plane < min_bytes:
        return False
    return config["tile_ow"][1] * d.in_block * itemsize // CACHE_LINE_BYTES + 2 <= MAX_PREFETCH_LINES


def _winograd(d: BlockedConvDims) -> bool:
    """Winograd needs the input in blocks too (`conv2d_winograd_nchwc`), and all of it, and sums
    that may be rounded."""
    return bool(d.in_block) and not any(d.crop) and not d.exact_sums and winograd.eligible((d.kh, d.kw), d.stride, d.dilation, d.groups)


def _tile_blocked_output(s: Schedule, out: Tensor, acc: Stage, config: Config, tile_oc: int) -> None:
    """Tiles of the blocked output (tile_oc blocks × tile_oh rows × tile_ow columns × the block),
    outer tile loops in the configured order with the first `parallel_depth` fused and parallel;
    the accumulator is computed per tile."""
    o = s[out]
    n, ocb, oh, ow, b = o.op.axes
    oco, oci = o.split(ocb, tile_oc)
    oho, ohi = o.split(oh, config["tile_oh"])
    owo, owi = split_columns(o, ow, config["tile_ow"][1])
    tiles = {"oc": oco, "oh": oho, "ow": owo}
    outer = [n] + [tiles[a] for a in config["outer_order"]]
    o.reorder(*outer, oci, ohi, owi, b)
    depth = config["parallel_depth"]
    o.parallel(o.fuse(*outer[:depth]))
    o.vectorize(b)
    s.compute_at(acc, o, o.leaf_axes[len(outer) - depth])


TEMPLATE = Conv2dNCHWcTemplate()
