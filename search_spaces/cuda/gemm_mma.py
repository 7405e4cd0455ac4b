"""The tensor-core GEMM tiling that the matmul and implicit-GEMM convolution templates use under
`-precision=tf32`, `fp16` or `bf16` (sm_80 and later): the operands stay fp32 in memory and are
rounded to the precision's inputs as each mma reads them, accumulating in fp32.

A block of `warps_m` × `warps_n` warps computes a (warps_m · mma_m · 16) × (warps_n · mma_n · 8)
tile of the output; each warp mma_m × mma_n m16n8k8 tiles of it with `mma.sync`, its lanes
holding the accumulators in the instruction's own layout (`autosched.ops.mma_gemm`). The
reduction runs in steps of `tile_k`; both operands' tiles of a step are staged through shared
memory by asynchronous copies (`cp.async`) issued `stages` - 1 steps ahead into `stages` rotating
buffers, so the copies of later steps overlap this step's mma instructions, with one barrier a
step. The knobs:

- `warps_m`, `warps_n`: the block's warps (32 threads each) along rows and columns;
- `mma_m`, `mma_n`: m16n8k8 tiles per warp along rows and columns (its register tile, up to
  64 × 64: a warp then reads 32 fragment registers a k8 step for 32 mma instead of 24 for 16);
- `tile_k`: the reduction step staged through shared memory (a multiple of the mma's 8);
- `stages`: the copy pipeline's depth (2–4 buffers of each operand tile);
- `pad`: 1 pads each shared row (4 floats where k is innermost, else 8) so the lanes' fragment
  reads fall on 32 different banks, 0 keeps rows dense (conflicting reads);
- `vec`: 4 copies 16 bytes a `cp.async` where the operand's rows allow (aligned, contiguous),
  1 copies 4 bytes a `cp.async`;
- `raster`: block rasterization for L2 reuse: consecutive blocks walk down `raster` block rows
  of one block column before the next column (blocks running together share B's columns and
  `raster` rows of A); 1 is row-major order.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autosched.ops.mma_gemm import mma_gemm
from autosched.ops.transform import INJECTIVE_TAG
from autosched.schedule import MMA_PRECISIONS, MmaTile, Schedule, Stage
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.te import IterVar, Load, Tensor
from autosched.te.expr import walk
from search_spaces.cuda.common import InvalidConfigError, config_near, fill_grid, gpu_caps

WARPS = (1, 2, 4)
MMA_M = (1, 2, 4)
MMA_N = (1, 2, 4, 8)
TILE_K = (8, 16, 32)
STAGES = (2, 3, 4)
RASTER = (1, 4, 8)
FALLBACK = {"warps_m": 2, "warps_n": 2, "mma_m": 4, "mma_n": 8, "tile_k": 32, "stages": 3, "pad": 1, "vec": 4,
            "raster": 8}
MMA_TILE = (16, 8, 8)  # m16n8k8
#: registers a thread holds beside its accumulators (fragments, addresses, the pipeline's indices),
#: read off nvcc's --resource-usage: 98 registers for 64 accumulators, 168 for 128
OTHER_REGISTERS = 40
REGISTER_FILE = 65536  # 32-bit registers of a multiprocessor, sm_80 and later


#: the fallback's (warps_m, warps_n, mma_m, mma_n), largest first: 128 × 128 block tiles of 4
#: warps of 64 × 64 down to 32 × 32 tiles of 4 warps (a warp keeps at least a 16 × 16 register
#: tile). On an H200 the 4096³ tf32 GEMM took 0.947 ms in 4 warps of 64 × 64 and 1.040 in 8 of
#: 64 × 32 (the previous first choice), 128 × 256 blocks of 8 warps of 64 × 64 0.997.
FALLBACK_TILES = ((2, 2, 4, 8), (2, 2, 4, 4), (2, 2, 2, 4), (2, 2, 2, 2), (2, 2, 1, 2))


def mma_fallback(space: ConfigSpace, m: int, n: int, batch: int) -> Config:
    """FALLBACK with the first tiles of FALLBACK_TILES that fill the grid (`fill_grid`)."""
    wm, wn, mm, mn = fill_grid(FALLBACK_TILES, lambda t: (t[0] * t[2] * MMA_TILE[0], t[1] * t[3] * MMA_TILE[1]),
                               m, n, batch)
    return config_near(space, {**FALLBACK, "warps_m": wm, "warps_n": wn, "mma_m": mm, "mma_n": mn})


def tensor_cores(target: Target) -> bool:
    """Whether the target's matmuls and convolutions run on tensor cores (-precision=tf32, fp16, bf16)."""
    gpu_caps(target)
    return target.precision in MMA_PRECISIONS


def _fits(options: tuple[int, ...], n: int, unit: int) -> tuple[int, ...]:
    """The options whose `unit`-sized tiles are not all beyond an axis of `n` (at least the smallest)."""
    return tuple(v for v in options if v == options[0] or (v // 2) * unit < n)


def mma_knobs(m: int, n: int, k: int) -> tuple[ChoiceKnob, ...]:
    """The knobs of a tensor-core GEMM of m × n × k (see the module's docstring)."""
    return (
        ChoiceKnob("warps_m", _fits(WARPS, m, MMA_TILE[0])),
        ChoiceKnob("warps_n", _fits(WARPS, n, MMA_TILE[1])),
        ChoiceKnob("mma_m", _fits(MMA_M, m, MMA_TILE[0])),
        ChoiceKnob("mma_n", _fits(MMA_N, n, MMA_TILE[1])),
        ChoiceKnob("tile_k", _fits(TILE_K, k, 1)),
        ChoiceKnob("stages", STAGES),
        ChoiceKnob("pad", (1, 0)),
        ChoiceKnob("vec", (4, 1)),
        ChoiceKnob("raster", RASTER if m > 4 * MMA_TILE[0] else (1,)),
    )


@dataclass(frozen=True)
class MmaTiles:
    """One tensor-core GEMM tiling: the knobs above."""

    warps_m: int
    warps_n: int
    mma_m: int
    mma_n: int
    tile_k: int
    stages: int
    pad: bool
    vec: int
    raster: int
    precision: str  # the mma's inputs: tf32, fp16 or bf16

    @classmethod
    def of(cls, config: Config, target: Target) -> MmaTiles:
        return cls(config["warps_m"], config["warps_n"], config["mma_m"], config["mma_n"], config["tile_k"],
                   config["stages"], bool(config["pad"]), config["vec"], config["raster"], target.precision)

    def check_registers(self) -> None:
        """Refuse a block whose threads' accumulators cannot all live in the register file: nvcc
        would cap each thread's registers at the file's share (`__launch_bounds__`) and spill."""
        per_thread = self.mma_m * self.mma_n * 4 + OTHER_REGISTERS
        threads = 32 * self.warps_m * self.warps_n
        if per_thread * threads > REGISTER_FILE:
            raise InvalidConfigError(f"{self.warps_m} × {self.warps_n} warps of {self.mma_m} × {self.mma_n} mma tiles "
                                     f"need about {per_thread} registers in each of {threads} threads, more than a "
                                     f"multiprocessor's {REGISTER_FILE}: they would spill")

    @property
    def block(self) -> tuple[int, int, int]:
        """(rows, columns, k) of a block's tile."""
        return self.warps_m * self.mma_m * MMA_TILE[0], self.warps_n * self.mma_n * MMA_TILE[1], self.tile_k

    def padding(self, m: int) -> tuple[int, int, int]:
        """What the operands are padded to a multiple of: a block's tile, its rows times the
        raster group (the last group's surplus blocks compute zeros), and the k step."""
        bm, bn, bk = self.block
        return bm * min(self.raster, -(-m // bm)), bn, bk


def mma_product(batch: tuple[int, ...], dims: tuple[int, int, int], a_at: Callable, b_at: Callable,
                k_inner: tuple[bool, bool], tiles: MmaTiles, name: str) -> Tensor:
    """The (batch…, m, n) product in the fragment layout, padded to `tiles`' block (see `mma_gemm`)."""
    return mma_gemm(batch, dims, a_at, b_at, k_inner, tiles.padding(dims[0]), name)


def schedule_mma(s: Schedule, out: Tensor, acc: Stage, axes: tuple[list[IterVar], IterVar, IterVar],
                 tiles: MmaTiles) -> None:
    """Tile the output's (batch axes, i, j) = `axes` into blocks, warps and m16n8k8 tiles, with the
    fragment-layout accumulator `acc` (axes batch…, row / 8, row % 8, column / 8, column % 8 / 2,
    column % 2; one reduction axis) computed per lane by tensor cores, its operands staged
    through shared memory by a `tiles.stages`-deep cp.async pipeline."""
    tiles.check_registers()
    operands = acc.op.inputs()[:2]
    k_inner = [_k_innermost(acc, t) for t in operands]
    shared = [s.cache_read(t, "shared", [acc]) for t in operands]
    for st in s.stages:
        if st.op.tag == INJECTIVE_TAG and st.op is not out.op:
            s.compute_inline(st)
    bm, bn, _ = tiles.block
    o = s[out]
    batch, i, j = axes
    bi, ii = o.split(i, bm, whole=True)  # a block's every warp runs every mma: surplus rows are guarded
    wm, iw = o.split(ii, tiles.mma_m * 16)
    mi, i16 = o.split(iw, 16)
    rh, g = o.split(i16, 8)
    bj, jj = o.split(j, bn, whole=True)
    wn, jw = o.split(jj, tiles.mma_n * 8)
    nj, j8 = o.split(jw, 8)
    t, c = o.split(j8, 2)
    outer = [o.fuse(*batch)] if batch else []
    if outer:
        o.bind(outer[0], "blockIdx.z")
    if tiles.raster > 1:  # block id = (group · block columns + column) · raster + row in the group
        group, row = o.split(bi, tiles.raster)
        o.reorder(*outer, group, bj, row, wm, wn, g, t, mi, rh, nj, c)
        o.bind(o.fuse(group, bj, row), "blockIdx.x")
    else:
        o.reorder(*outer, bi, bj, wm, wn, g, t, mi, rh, nj, c)
        o.bind(bi, "blockIdx.y")
        o.bind(bj, "blockIdx.x")
    o.bind(o.fuse(wm, wn), "threadIdx.y")
    lane = o.fuse(g, t)
    o.bind(lane, "threadIdx.x")
    for axis in (mi, rh, nj):
        o.unroll(axis)
    o.vectorize(c)
    s.compute_at(acc, o, lane)

    *acc_batch, rows, lane_row, cols, lane_col, pair = acc.op.axes
    mi_a, rh_a = acc.split(rows, 2)
    ko, kin = acc.split(acc.op.reduce_axes[0], tiles.tile_k)
    kk, k8 = acc.split(kin, 8)
    acc.reorder(*acc_batch, ko, kk, mi_a, cols, lane_row, lane_col, k8, rh_a, pair)
    for axis in (kk, mi_a, cols):
        acc.unroll(axis)
    acc.tensorize(MmaTile(k8, rh_a, pair, g, t, precision=tiles.precision))
    for copy, inner in zip(shared, k_inner):
        _async_copy(s, copy, acc, ko, tiles, inner)


def _k_innermost(acc: Stage, t: Tensor) -> bool:
    """Whether `acc` reads operand `t` with the reduction axis as its innermost index."""
    r = acc.op.reduce_axes[0].var
    return any(x.source is t and x.indices[-1] is r for x in walk(acc.op.body) if isinstance(x, Load))


def _async_copy(s: Schedule, copy: Tensor, acc: Stage, ko: IterVar, tiles: MmaTiles, k_inner: bool) -> None:
    """The shared tile `copy` filled at `ko` by the block's warps through the cp.async pipeline,
    `vec` elements of a row a copy, rows padded against bank conflicts when `tiles.pad`."""
    st = s[copy]
    s.compute_at(st, acc, ko)
    st.pipelined(tiles.stages)
    *outer, last = st.op.axes
    if tiles.pad:  # k innermost: lanes read 8 rows × 4 columns; else 4 rows × 8 columns
        st.pad_storage(4 if k_inner else 8)
    lo, lanes = st.split(last, tiles.vec)
    rest, tid = st.split(st.fuse(*outer, lo), 32 * tiles.warps_m * tiles.warps_n)
    warp, lane = st.split(tid, 32)
    st.bind(warp, "threadIdx.y")
    st.bind(lane, "threadIdx.x")
    if tiles.vec > 1:
        st.vectorize(lanes)


__all__ = ["FALLBACK", "FALLBACK_TILES", "MmaTiles", "mma_fallback", "mma_knobs", "mma_product", "schedule_mma", "tensor_cores"]
