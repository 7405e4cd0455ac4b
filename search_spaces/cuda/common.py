"""What the GPU templates share: the template contract (the CPU templates' own, which is not
CPU-specific), the thread counts lowering will give a tiled axis, and the cooperative copy
that stages a tile through shared memory with every thread of the block.

The one invariant every GPU template keeps: loops that enclose a barrier are bound to exactly
the block's thread extents, so every thread reaches every barrier. A copy stage uses at most
those threads; the GPU code generation refuses (and the emulation reports) anything else.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from autosched.schedule import Schedule, Stage
from autosched.space import Config, ConfigSpace
from autosched.target import GPU_BLOCKS, GpuCapabilities, Target
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.llvm.common import CpuTemplate as GpuTemplate
from search_spaces.llvm.common import InvalidConfigError, inline_epilogue, task_tensors

T = TypeVar("T")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def gpu_caps(target: Target) -> GpuCapabilities:
    caps = target.capabilities
    if not isinstance(caps, GpuCapabilities):
        raise TemplateError(f"target {target} is not a GPU target")
    return caps


def up_to(options: tuple[int, ...], n: int) -> tuple[int, ...]:
    """The options not larger than the axis (at least the smallest): a knob never offers more
    threads or a longer tile than the axis has points."""
    return tuple(v for v in options if v == options[0] or v <= n)


def config_near(space: ConfigSpace, want: Mapping[str, int | str]) -> Config:
    """For each knob the wanted value where the space offers it, else the largest option not
    above it (else the smallest): a textbook fallback shrunk to what a small problem's space
    offers. Named options (an algorithm) are only ever taken as they are."""
    values = {}
    for name, v in want.items():
        options = space.knob(name).values
        values[name] = v if v in options else max((o for o in options if o <= v), default=min(options))
    return space.from_values(values)


def fallback_buffering(target: Target) -> int:
    """The fp32 fallbacks' `double_buffer`: a 3-stage cp.async pipeline where there is one (sm_80
    and later), else none. On an H200 it cut every fallback kernel of `benchmarks/gpu.py`: GEMM
    4096³ from 4.80 to 3.96 ms, BERT's FFN down from 0.138 to 0.078, ResNet's 512-channel 3×3
    from 0.371 to 0.206; double buffering without cp.async (1) was never timed on a GPU."""
    return 3 if gpu_caps(target).compute_capability >= (8, 0) else 0


#: blocks a fallback's grid should have: most SMs of an A100 (108) or H100 (132) busy
FALLBACK_BLOCKS = GPU_BLOCKS


def fill_grid(tiles: Sequence[T], block_of: Callable[[T], tuple[int, int]], m: int, n: int, batch: int) -> T:
    """The first of `tiles` (largest first) whose blocks (`block_of`: rows × columns) neither
    overhang the m × n problem by half a block nor leave the grid of `batch` problems under
    FALLBACK_BLOCKS blocks, else the last: a small or narrow GEMM (BERT's projections at sequence
    128, a late ResNet layer) gets more, smaller blocks instead of idle multiprocessors."""
    for tile in tiles:
        bm, bn = block_of(tile)
        if bm // 2 < m and bn // 2 < n and batch * -(-m // bm) * -(-n // bn) >= FALLBACK_BLOCKS:
            return tile
    return tiles[-1]


def local_accumulator(s: Schedule, out: Tensor, anchor_tag: str) -> Stage:
    """The anchor's stage in registers, its epilogue inlined into the output's store: a copy
    of it when the anchor is the output, else the anchor itself."""
    anchor = next(st for st in s.stages if st.op.tag == anchor_tag)
    inline_epilogue(s, out)
    if out.op is anchor.op:
        return s[s.cache_write(out, "local")]
    anchor.set_scope("local")
    return anchor


def tile_threads(extent: int, block: int, per_thread: int) -> int:
    """Threads along an axis of `extent` split into blocks of `block` and per-thread tiles of
    `per_thread`, as lowering clamps them when the block overhangs the axis."""
    b = min(block, extent)
    return -(-b // min(per_thread, b))


def cooperative_copy(s: Schedule, copy: Tensor, at: Stage, axis, threads: tuple[int, ...], vec: int,
                     double_buffer: bool = False, stages: int = 0) -> None:
    """Compute the shared-memory `copy` at `axis` of `at`, its elements spread over the block's
    `threads` (x first) `vec` contiguous elements at a time, then through a serial loop; with
    `double_buffer`, in two alternating copies; with `stages` (2 or more), by a cp.async pipeline
    of that depth."""
    st = s[copy]
    s.compute_at(st, at, axis)
    if double_buffer:
        st.double_buffered()
    if stages:
        st.pipelined(stages)
    fused = st.fuse(*st.op.axes)
    rest, lanes = st.split(fused, vec)
    total = 1
    for n in threads:
        total *= n
    rest, t = st.split(rest, total)
    for tag, n in zip(THREAD_AXES, threads[:-1]):
        t, inner = st.split(t, n)
        st.bind(inner, tag)
    st.bind(t, THREAD_AXES[len(threads) - 1])
    if vec > 1:
        st.vectorize(lanes)


__all__ = ["GpuTemplate", "InvalidConfigError", "config_near", "cooperative_copy", "gpu_caps", "local_accumulator",
           "task_tensors", "tile_threads"]
