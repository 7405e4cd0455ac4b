"""GPU template for 2-D convolution, NCHW / OIHW, any stride, padding, dilation and groups
(depthwise included), with its fused epilogue.

A direct convolution tiled like the matmul template: a block computes a tile of output channels
× output rows × output columns, each thread a register tile of `tile_c` channels × `tile_w`
columns; the input channels run in steps of `tile_ic`, each step staging the block's input
window (padding computed on the fly) and weight slice through shared memory, loaded by all the
block's threads. Batch and channel blocks share blockIdx.z. The knobs:

- `threads_w`, `threads_h`, `threads_c`: the block's threads along columns, rows, channels;
- `tile_w`, `tile_c`: each thread's register tile;
- `tile_ic`: input channels per shared-memory step;
- `vec`: elements per thread per shared-copy load; `unroll_window`: unroll the kernel window;
- `double_buffer`: two alternating copies of each shared tile, one barrier per step instead of two.
"""
from __future__ import annotations

from autosched.ops.conv import CONV2D_TAG, conv2d
from autosched.ops.transform import PAD_TAG
from autosched.schedule import Schedule, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from search_spaces.cuda.common import (
    GpuTemplate, config_near, cooperative_copy, gpu_caps, local_accumulator, task_tensors, tile_threads,
)
from search_spaces.cuda.matmul import _up_to
from search_spaces.llvm.conv2d import conv_dims

THREADS = (1, 2, 4, 8, 16, 32)
TILES = (1, 2, 4)
TILE_IC = (1, 2, 4, 8, 16)


class Conv2dTemplate(GpuTemplate):
    name = "conv2d_direct_cuda"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        gpu_caps(target)
        d = conv_dims(task)
        return ConfigSpace(self.name, (
            ChoiceKnob("threads_w", _up_to(THREADS, d.ow)),
            ChoiceKnob("threads_h", _up_to(THREADS, d.oh)),
            ChoiceKnob("threads_c", _up_to(THREADS, d.oc)),
            ChoiceKnob("tile_w", _up_to(TILES, d.ow)),
            ChoiceKnob("tile_c", _up_to(TILES, d.oc)),
            ChoiceKnob("tile_ic", _up_to(TILE_IC, d.c // d.groups)),
            ChoiceKnob("vec", (1, 2, 4)),
            ChoiceKnob("unroll_window", (1, 0)),
            ChoiceKnob("double_buffer", (0, 1)),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """8 × 4 × 4 threads (columns × rows × channels) of 2 × 4 outputs, 4 input channels a step."""
        return config_near(self.space(task, target), {"threads_w": 8, "threads_h": 4, "threads_c": 4, "tile_w": 2,
                                                       "tile_c": 4, "tile_ic": 4, "vec": 1, "unroll_window": 1,
                                                       "double_buffer": 0})

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        d = conv_dims(task)
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
            cooperative_copy(s, copy, acc, ico, threads, config["vec"], bool(config["double_buffer"]))
        return s, args + [out]


TEMPLATE = Conv2dTemplate()
