"""GPU template for 2-D convolution, NCHW / OIHW, any stride, padding, dilation and groups
(depthwise included), with its fused epilogue.

Direct (the `algorithm` knob's "direct") or, for groups = 1 and groups of whole GEMM tiles
(`gemm_groups`), as an implicit GEMM (below). The direct convolution is tiled like the matmul
template: a block computes a tile of output channels × output rows × output columns, each
thread a register tile of `tile_c` channels × `tile_w` columns; the input channels run in steps
of `tile_ic`, each step staging the block's input window (padding computed on the fly) and
weight slice through shared memory, loaded by all the block's threads. Batch and channel blocks share blockIdx.z. The knobs:

- `threads_w`, `threads_h`, `threads_c`: the block's threads along columns, rows, channels;
- `tile_w`, `tile_c`: each thread's register tile;
- `tile_ic`: input channels per shared-memory step;
- `vec`: elements per thread per shared-copy load; `unroll_window`: unroll the kernel window;
- `double_buffer`: 1 keeps two alternating copies of each shared tile, one barrier per step instead
  of two; on sm_80 and later 2 or 3 fill them by a cp.async pipeline of that many stages;
- `algorithm` (where `gemm_groups`): "direct", or "implicit_gemm" (conv2d_gemm.py), which reads the
  same knobs as a GEMM tiling: `threads_c` × `tile_c` output channels by `threads_w` · `threads_h`
  threads × `tile_w` output pixels a block, K steps of `tile_ic` whole input-channel windows,
  `unroll_window` unrolling the K step. One knob set, so the tuner's model compares the two.
"""
from __future__ import annotations

from functools import partial

from autosched.ops.conv import CONV2D_TAG, conv2d
from autosched.ops.mma_gemm import MMA_GEMM_TAG
from autosched.ops.transform import PAD_TAG
from autosched.schedule import Schedule, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.cuda.common import (
    GpuTemplate,
    config_near,
    cooperative_copy,
    fallback_buffering,
    gpu_caps,
    local_accumulator,
    task_tensors,
    tile_threads,
    up_to,
)
from search_spaces.cuda.conv2d_gemm import IMPLICIT_GEMM_TAG, conv2d_implicit_gemm, gemm_groups, group_rows_fit
from search_spaces.cuda.gemm_mma import (
    FALLBACK_TILES,
    MmaTiles,
    mma_fallback,
    mma_knobs,
    mma_product,
    schedule_mma,
    tensor_cores,
)
from search_spaces.cuda.matmul import GemmTiles, buffering, schedule_gemm
from search_spaces.llvm.conv2d import ConvDims, conv_dims

THREADS = (1, 2, 4, 8, 16, 32)
TILES = (1, 2, 4)
TILE_IC = (1, 2, 4, 8, 16)
DIRECT, IMPLICIT_GEMM = "direct", "implicit_gemm"
FALLBACK_DIRECT: dict[str, int | str] = {"threads_w": 8, "threads_h": 4, "threads_c": 4, "tile_w": 2, "tile_c": 4, "tile_ic": 4, "vec": 1,
                   "unroll_window": 1, "double_buffer": 0, "algorithm": DIRECT}


def _on_tensor_cores(target: Target, d: ConvDims) -> bool:
    """On tensor cores (-precision=tf32, fp16, bf16) every convolution of the GEMM form (`gemm_groups`) is an
    implicit GEMM on tensor cores; narrow groups and depthwise ones stay direct (fp32: exact, and
    within any tolerance)."""
    return tensor_cores(target) and gemm_groups(d)


def _algorithms(d: ConvDims) -> tuple[str, ...]:
    return (DIRECT, IMPLICIT_GEMM) if gemm_groups(d) else (DIRECT,)


def _gemm_tiles(config: Config, d: ConvDims) -> GemmTiles:
    """The GEMM tiling the conv knobs stand for (see the module's docstring)."""
    double_buffer, stages = buffering(config)
    return GemmTiles(threads_x=config["threads_w"] * config["threads_h"], threads_y=config["threads_c"],
                     tile_n=config["tile_w"], tile_m=config["tile_c"], tile_k=config["tile_ic"] * d.kh * d.kw,
                     vec=config["vec"], unroll_k=bool(config["unroll_window"]), double_buffer=double_buffer,
                     stages=stages)


class Conv2dTemplate(GpuTemplate):
    name = "conv2d_cuda"
    mma_name = "conv2d_mma_cuda"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        gpu_caps(target)
        d = conv_dims(task)
        if _on_tensor_cores(target, d):
            return ConfigSpace(self.mma_name, mma_knobs(d.oc // d.groups, d.oh * d.ow, d.c // d.groups * d.kh * d.kw))
        return ConfigSpace(self.name, (
            ChoiceKnob("threads_w", up_to(THREADS, d.ow)),
            ChoiceKnob("threads_h", up_to(THREADS, d.oh)),
            ChoiceKnob("threads_c", up_to(THREADS, d.oc)),
            ChoiceKnob("tile_w", up_to(TILES, d.ow)),
            ChoiceKnob("tile_c", up_to(TILES, d.oc)),
            ChoiceKnob("tile_ic", up_to(TILE_IC, d.c // d.groups)),
            ChoiceKnob("vec", (1, 2, 4)),
            ChoiceKnob("unroll_window", (1, 0)),
            ChoiceKnob("double_buffer", (0, 1, 2, 3) if gpu_caps(target).compute_capability >= (8, 0) else (0, 1)),
            ChoiceKnob("algorithm", _algorithms(d)),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """8 × 4 × 4 threads (columns × rows × channels) of 2 × 4 outputs, 4 input channels a step;
        direct, except 1×1 kernels: those have no window for the direct tiles to share, and as
        an implicit GEMM they are a plain GEMM (256 threads, 64 channels × 64 pixels a block).
        On sm_80 and later the tiles are filled by a 3-stage cp.async pipeline (`fallback_buffering`)."""
        space = self.space(task, target)
        d = conv_dims(task)
        if _on_tensor_cores(target, d):
            config = mma_fallback(space, d.oc // d.groups, d.oh * d.ow, d.n * d.groups)
            values = {k.name: config[k.name] for k in space.knobs}
            # groups: the first of these whose padded rows stay within a group (32 always do)
            for tiles in ((), *((w_m, w_n, m_m, m_n, 1) for w_m, w_n, m_m, m_n in FALLBACK_TILES)):
                config = config_near(space, {**values, **dict(zip(("warps_m", "warps_n", "mma_m", "mma_n", "raster"),
                                                                    tiles))})
                if group_rows_fit(d, MmaTiles.of(config, target).padding(d.oc // d.groups)[0]):
                    break
            return config
        direct = {**FALLBACK_DIRECT, "double_buffer": fallback_buffering(target)}
        if IMPLICIT_GEMM in space.knob("algorithm").values and d.kh * d.kw == 1:
            config = config_near(space, {**direct, "algorithm": IMPLICIT_GEMM, "threads_h": 2,
                                         "threads_c": 16, "tile_w": 4, "tile_ic": 8})
            if group_rows_fit(d, config["threads_c"] * config["tile_c"]):
                return config
        return config_near(space, direct)

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        d = conv_dims(task)
        if _on_tensor_cores(target, d):
            return _implicit_gemm(task, d, MmaTiles.of(config, target))
        if config["algorithm"] == IMPLICIT_GEMM:
            return _implicit_gemm(task, d, _gemm_tiles(config, d))
        tt = task_tensors(task)
        out = conv2d(tt.anchor[0], tt.anchor[1], tt.anchor[2] if len(tt.anchor) > 2 else None, d.stride, d.pads,
                     d.dilation, d.groups, tt.epilogue)
        args = list(tt.args)
        s = create_schedule(out)
        acc = local_accumulator(s, out, CONV2D_TAG)
        data, weight = acc.op.inputs()[:2] if acc.op.inputs()[1].ndim == 4 else acc.op.inputs()[1::-1]
        shared = [s.cache_read(t, "shared", [acc]) for t in (data, weight)]
        for st in s.stages:
            if st.op.tag == PAD_TAG:
                s.compute_inline(st)  # the shared copy reads zeros where the window overhangs

        tw, th, tc = config["threads_w"], config["threads_h"], config["threads_c"]
        rw, rc = config["tile_w"], config["tile_c"]
        o = s[out]
        n, oc, oh, ow = o.op.axes
        boc, ioc = o.split(oc, tc * rc)
        thc, ric = o.split(ioc, rc)
        boh, thh = o.split(oh, th)
        bow, iow = o.split(ow, tw * rw)
        thw, riw = o.split(iow, rw)
        o.reorder(n, boc, boh, bow, thc, thh, thw, ric, riw)
        o.bind(o.fuse(n, boc), "blockIdx.z")
        o.bind(boh, "blockIdx.y")
        o.bind(bow, "blockIdx.x")
        o.bind(o.fuse(thc, thh), "threadIdx.y")
        o.bind(thw, "threadIdx.x")
        o.unroll(ric)
        o.unroll(riw)
        s.compute_at(acc, o, thw)

        an, aoc, aoh, aow = acc.op.axes
        ic, kh, kw = acc.op.reduce_axes
        ico, ici = acc.split(ic, config["tile_ic"])
        acc.reorder(an, aoh, ico, ici, kh, kw, aoc, aow)
        if config["unroll_window"]:
            acc.unroll(kh)
            acc.unroll(kw)
        acc.unroll(aoc)
        acc.unroll(aow)
        threads = (tile_threads(d.ow, tw * rw, rw), tile_threads(d.oc, tc * rc, rc) * tile_threads(d.oh, th, 1))
        for copy in shared:
            cooperative_copy(s, copy, acc, ico, threads, config["vec"], *buffering(config))
        return s, args + [out]


def _implicit_gemm(task: Task, d: ConvDims, tiles: GemmTiles | MmaTiles) -> tuple[Schedule, list[Tensor]]:
    """The convolution as an implicit GEMM: the shared-memory tiling, or with MmaTiles on tensor cores."""
    rows = tiles.padding(d.oc // d.groups)[0] if isinstance(tiles, MmaTiles) else tiles.threads_y * tiles.tile_m
    if not group_rows_fit(d, rows):
        raise TemplateError(f"blocks of {rows} rows straddle the {d.oc // d.groups} output channels of a group")
    tt = task_tensors(task)
    product = partial(mma_product, tiles=tiles, name="implicit_gemm") if isinstance(tiles, MmaTiles) else None
    out = conv2d_implicit_gemm(tt.anchor[0], tt.anchor[1], tt.anchor[2] if len(tt.anchor) > 2 else None, d,
                               tt.epilogue, product)
    s = create_schedule(out)
    acc = local_accumulator(s, out, IMPLICIT_GEMM_TAG if product is None else MMA_GEMM_TAG)
    for st in s.stages:
        if st.op.tag == PAD_TAG:
            s.compute_inline(st)  # the im2col gather reads zeros where the window overhangs
    n, oc, oh, ow = s[out].op.axes
    batch = [n]
    if d.groups > 1:  # a group's channels are the GEMM's rows, its index a batch axis
        group, oc = s[out].split(oc, d.oc // d.groups)
        batch.append(group)
    if isinstance(tiles, MmaTiles):
        schedule_mma(s, out, acc, (batch, oc, s[out].fuse(oh, ow)), tiles)
    else:
        schedule_gemm(s, out, acc, (batch, oc, s[out].fuse(oh, ow)), (d.oc // d.groups, d.oh * d.ow), tiles)
    return s, list(tt.args) + [out]


TEMPLATE = Conv2dTemplate()
