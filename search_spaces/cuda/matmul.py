"""GPU template for MatMul and Gemm (batched, transposed, with fused epilogue).

The classic shared-memory tiling: each block computes a (threads_y · tile_m) × (threads_x ·
tile_n) tile of the output, each thread a tile_m × tile_n register tile of it; the reduction
runs in steps of `tile_k`, each step staging the block's slices of A and B through shared
memory (loaded by all the block's threads, `vec` elements at a time, between barriers). Batch
dimensions are fused onto blockIdx.z. The knobs:

- `threads_x`, `threads_y`: the block's shape (at most 1024 threads; 32 × 32);
- `tile_m`, `tile_n`: each thread's register tile (tile_n also the width of its vector stores);
- `tile_k`: the reduction step staged through shared memory (with the block tile, its size);
- `vec`: elements per thread per load of the shared copies (float2/float4 where aligned);
- `unroll_k`: unroll the reduction step's loop (more registers, no loop overhead);
- `double_buffer`: 1 keeps two alternating copies of each shared tile, one barrier per step
  instead of two; on sm_80 and later 2 or 3 fill the tiles by a cp.async pipeline of that many
  stages instead (`Stage.pipelined`: the copies of the next steps in flight while this one computes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.ops import matmul as mm
from autosched.ops.epilogue import apply_epilogue
from autosched.ops.mma_gemm import MMA_GEMM_TAG
from autosched.ops.transform import INJECTIVE_TAG
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import IterVar, Tensor
from search_spaces.cuda.common import (
    GpuTemplate,
    config_near,
    cooperative_copy,
    fallback_buffering,
    fill_grid,
    gpu_caps,
    local_accumulator,
    task_tensors,
    tile_threads,
    up_to,
)
from search_spaces.cuda.gemm_mma import MmaTiles, mma_fallback, mma_knobs, mma_product, schedule_mma, tensor_cores
from search_spaces.llvm.matmul import gemm_epilogue, matmul_dims, matmul_operands

THREADS = (1, 2, 4, 8, 16, 32)
TILES = (1, 2, 4, 8)
TILE_K = (4, 8, 16, 32)
VEC = (1, 2, 4)
#: the fallback's (threads_x, threads_y, tile_n, tile_m), largest blocks first: 64 × 64 tiles of 256
#: threads, 32 × 64 and 32 × 32 of 128 (4 warps, as the tensor-core fallback's smallest)
FALLBACK_THREADS = ((16, 16, 4, 4), (16, 8, 4, 4), (16, 8, 2, 4))


def _compute(task: Task, tiles: MmaTiles | None = None) -> tuple[list[Tensor], Tensor]:
    """The task's product and epilogue: plain, or with `tiles` in the tensor cores' layout."""
    tt = task_tensors(task)
    attrs = dict(task.attrs)
    gemm = task.op == "Gemm"
    trans_a, trans_b = gemm and bool(attrs.get("transA", 0)), gemm and bool(attrs.get("transB", 0))
    a, b = matmul_operands(task, tt)
    y = mm.matmul(a, b, trans_a, trans_b) if tiles is None else _mma_matmul(task, a, b, trans_a, trans_b, tiles)
    pre = gemm_epilogue(tt.anchor[2] if len(tt.anchor) > 2 else None, attrs.get("alpha", 1.0),
                        attrs.get("beta", 1.0)) if gemm else ()
    return list(tt.args), apply_epilogue(y, pre + tt.epilogue)


def _mma_matmul(task: Task, a: Tensor, b: Tensor, trans_a: bool, trans_b: bool, tiles: MmaTiles) -> Tensor:
    """A · B (batch dimensions broadcast as numpy's) on tensor cores (see `gemm_mma`)."""
    d = matmul_dims(task)

    def batch_of(t: Tensor, i: tuple) -> tuple:
        off = len(d.batch) - (t.ndim - 2)
        return tuple(0 if t.shape[k] == 1 else i[off + k] for k in range(t.ndim - 2))

    return mma_product(d.batch, (d.m, d.n, d.k),
                       lambda i, row, k: a[batch_of(a, i) + ((k, row) if trans_a else (row, k))],
                       lambda i, k, col: b[batch_of(b, i) + ((col, k) if trans_b else (k, col))],
                       (not trans_a, trans_b), tiles, "mma_matmul")


class MatmulTemplate(GpuTemplate):
    """The shared-memory tiling in fp32; under -precision=tf32, fp16 or bf16 the tensor-core tiling (`gemm_mma`)."""

    name = "matmul_tiled_cuda"
    mma_name = "matmul_mma_cuda"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        gpu_caps(target)
        d = matmul_dims(task)
        if tensor_cores(target):
            return ConfigSpace(self.mma_name, mma_knobs(d.m, d.n, d.k))
        return ConfigSpace(self.name, (
            ChoiceKnob("threads_x", up_to(THREADS, d.n)),
            ChoiceKnob("threads_y", up_to(THREADS, d.m)),
            ChoiceKnob("tile_n", up_to(TILES, d.n)),
            ChoiceKnob("tile_m", up_to(TILES, d.m)),
            ChoiceKnob("tile_k", up_to(TILE_K, d.k)),
            ChoiceKnob("vec", VEC),
            ChoiceKnob("unroll_k", (1, 0)),
            ChoiceKnob("double_buffer", (0, 1, 2, 3) if gpu_caps(target).compute_capability >= (8, 0) else (0, 1)),
        ))

    def fallback(self, task: Task, target: Target) -> Config:
        """16 × 16 threads of 4 × 4 outputs (64 × 64 block tiles), k steps of 8, float4 copies:
        the textbook SGEMM shape, with smaller blocks where a grid of 64 × 64 ones would leave
        multiprocessors idle (`fill_grid`), shrunk to what the space allows for a small problem;
        on sm_80 and later the tiles filled by a 3-stage cp.async pipeline (`fallback_buffering`).
        On tensor cores: 2 × 4 warps of 4 × 4 m16n8k8 tiles (128 × 128 block tiles), k steps of
        32 through a 3-stage cp.async pipeline, padded shared rows, 16-byte copies."""
        d = matmul_dims(task)
        if tensor_cores(target):
            return mma_fallback(self.space(task, target), d.m, d.n, math.prod(d.batch))
        # fewer rows than a 32 × 32 block's: threads_y is clamped to the rows, and smaller blocks would be fewer threads
        tx, ty, tn, tm = FALLBACK_THREADS[0] if d.m < 32 else \
            fill_grid(FALLBACK_THREADS, lambda t: (t[1] * t[3], t[0] * t[2]), d.m, d.n, math.prod(d.batch))
        return config_near(self.space(task, target), {"threads_x": tx, "threads_y": ty, "tile_n": tn, "tile_m": tm,
                                                       "tile_k": 8, "vec": 4, "unroll_k": 1,
                                                       "double_buffer": fallback_buffering(target)})

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        d = matmul_dims(task)
        if tensor_cores(target):
            tiles = MmaTiles.of(config, target)
            args, out = _compute(task, tiles)
            s = create_schedule(out)
            acc = local_accumulator(s, out, MMA_GEMM_TAG)
            *batch, i, j = s[out].op.axes
            schedule_mma(s, out, acc, (batch, i, j), tiles)
            return s, args + [out]
        args, out = _compute(task)
        s = create_schedule(out)
        acc = local_accumulator(s, out, mm.MATMUL_TAG)
        *batch, i, j = s[out].op.axes
        schedule_gemm(s, out, acc, (batch, i, j), (d.m, d.n), GemmTiles.of(config))
        return s, args + [out]


@dataclass(frozen=True)
class GemmTiles:
    """How one GEMM is tiled over the GPU: the matmul template's knobs, which the implicit-GEMM
    convolution maps its own knobs onto (one tiling, two templates)."""

    threads_x: int
    threads_y: int
    tile_n: int
    tile_m: int
    tile_k: int
    vec: int
    unroll_k: bool
    double_buffer: bool
    stages: int = 0  # a cp.async pipeline of that many stages (2 or 3), else 0

    @classmethod
    def of(cls, config: Config) -> GemmTiles:
        return cls(config["threads_x"], config["threads_y"], config["tile_n"], config["tile_m"], config["tile_k"],
                   config["vec"], bool(config["unroll_k"]), *buffering(config))


def buffering(config: Config) -> tuple[bool, int]:
    """(double buffered, cp.async pipeline depth or 0) from the `double_buffer` knob: 1 is double
    buffering, 2 and 3 a pipeline of that depth (the MatMul's and Conv's knob alike)."""
    value = config["double_buffer"]
    return value == 1, value if value >= 2 else 0


def schedule_gemm(s: Schedule, out: Tensor, acc: Stage, axes: tuple[list[IterVar], IterVar, IterVar],
                  sizes: tuple[int, int], tiles: GemmTiles) -> None:
    """Tile the output's (batch axes, i, j) = `axes` (extents `sizes` of i and j) into blocks and
    per-thread register tiles, with the register accumulator `acc` (axes batch…, i, j; one
    reduction axis) computed per thread and its two operands staged through shared memory one
    k step at a time. Operand views (injective stages) are inlined into those copies, so their
    index arithmetic (a transpose, an im2col gather) runs once per staged element."""
    shared = [s.cache_read(t, "shared", [acc]) for t in acc.op.inputs()[:2]]
    for st in s.stages:
        if st.op.tag == INJECTIVE_TAG and st.op is not out.op:
            s.compute_inline(st)
    m, n = sizes
    tx, ty, tn, tm = tiles.threads_x, tiles.threads_y, tiles.tile_n, tiles.tile_m
    o = s[out]
    batch, i, j = axes
    bi, ii = o.split(i, ty * tm)
    bj, jj = o.split(j, tx * tn)
    thy, ri = o.split(ii, tm)
    thx, rj = o.split(jj, tn)
    outer = [o.fuse(*batch)] if batch else []
    o.reorder(*outer, bi, bj, thy, thx, ri, rj)
    for axis, tag in zip(outer, ("blockIdx.z",)):
        o.bind(axis, tag)
    for axis, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (thy, "threadIdx.y"), (thx, "threadIdx.x")):
        o.bind(axis, tag)
    o.unroll(ri)
    (o.vectorize if tn in (2, 4) else o.unroll)(rj)
    s.compute_at(acc, o, thx)

    *acc_batch, ci, cj = acc.op.axes
    ko, ki = acc.split(acc.op.reduce_axes[0], tiles.tile_k)
    acc.reorder(*acc_batch, ko, ki, ci, cj)
    if tiles.unroll_k:
        acc.unroll(ki)
    acc.unroll(ci)
    acc.unroll(cj)
    threads = (tile_threads(n, tx * tn, tn), tile_threads(m, ty * tm, tm))
    for copy in shared:
        cooperative_copy(s, copy, acc, ko, threads, tiles.vec, tiles.double_buffer, tiles.stages)


TEMPLATE = MatmulTemplate()
