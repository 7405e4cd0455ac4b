"""What every GPU back end (CUDA, its CPU emulation) needs from a lowered kernel.

Thread-bound loops are not loops on a GPU: every thread of every block runs the kernel body
with its loop variables fixed to its block and thread index, and two loops bound to the same
axis (a consumer's and the copy stage nested in it) name the same index. The launch geometry is
therefore the largest extent bound to each axis; a smaller loop is guarded. This module derives
that geometry and the shared-memory layout once, checks what would make the kernel wrong on
any GPU (nothing bound, global writes outside every bound loop, a barrier that only some
threads reach) and, given a device, what would stop it launching.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.codegen.cstyle import C_TYPES, DTYPE_BYTES, SHORT, CStyleRenderer
from autosched.codegen.errors import CodegenError
from autosched.lower.ir import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Let,
    PrimFunc,
    Stmt,
    Store,
    WarpMma,
    stmt_children,
)
from autosched.schedule import MMA_PRECISIONS
from autosched.target import GpuCapabilities
from autosched.te.expr import Call, Const, Expr, Load, Select, free_vars

BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
#: per-dimension limits common to every architecture since Volta
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
SHARED_ALIGN = 16  # bytes: every shared buffer may be read as float4
WARP = 32
#: te calls `name(value, width)` that combine `value` over the `width` aligned lanes of the warp
#: holding this thread, every lane getting the result (row_reduce's shuffle trees)
WARP_REDUCTIONS = {"warp_sum": "sum", "warp_max": "max", "warp_min": "min"}


class LimitError(CodegenError):
    """A schedule that is correct but cannot launch on the device (too many threads, too much
    shared memory, too many registers): rejected before any device time."""


@dataclass(frozen=True)
class LaunchGeometry:
    """How to launch one kernel: grid and block extents (x, y, z) and dynamic shared memory."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes}


@dataclass(frozen=True)
class GpuKernelPlan:
    """The geometry plus where each shared buffer lives in the block's shared memory."""

    geometry: LaunchGeometry
    shared_offsets: dict  # id(Buffer) -> byte offset


def plan_kernel(func: PrimFunc) -> GpuKernelPlan:
    """Geometry and shared layout of `func`, or a CodegenError naming the kernel and the problem."""
    extents: dict[str, int] = {}
    offsets: dict[int, int] = {}
    total = 0
    for s in _walk(func.body):
        if isinstance(s, For) and s.kind is ForKind.PARALLEL:
            raise CodegenError(f"{func.name}: loop {s.var.name} is parallel (a CPU annotation); "
                               "bind it to blockIdx/threadIdx for a GPU")
        if isinstance(s, For) and s.kind is ForKind.THREAD and s.thread != "vthread":
            extents[s.thread] = max(extents.get(s.thread, 1), s.extent)
        if isinstance(s, Allocate) and s.buffer.scope == "shared" and id(s.buffer) not in offsets:
            offsets[id(s.buffer)] = total
            total += -(-s.buffer.size * DTYPE_BYTES[s.buffer.dtype] // SHARED_ALIGN) * SHARED_ALIGN
    if not any(a in extents for a in BLOCK_AXES + THREAD_AXES):
        raise CodegenError(f"{func.name}: the schedule binds no loop to blockIdx/threadIdx; "
                           "a GPU kernel would run the whole computation in one thread")
    bx, by, bz = (extents.get(a, 1) for a in BLOCK_AXES)  # x, y, z: LaunchGeometry's 3-tuples
    tx, ty, tz = (extents.get(a, 1) for a in THREAD_AXES)
    geometry = LaunchGeometry((bx, by, bz), (tx, ty, tz), total)
    _check_structure(func, geometry)
    if geometry.threads_per_block % WARP and any(isinstance(s, WarpMma) for s in _walk(func.body)):
        raise CodegenError(f"{func.name}: a warp-level mma needs whole warps, but a block has "
                           f"{geometry.threads_per_block} threads")
    for axis, n, most in zip(THREAD_AXES + BLOCK_AXES, geometry.block + geometry.grid, MAX_BLOCK_DIMS + MAX_GRID_DIMS):
        if n > most:
            raise LimitError(f"{func.name}: {n} along {axis} exceeds the limit of {most}")
    if geometry.threads_per_block > MAX_BLOCK_DIMS[0]:
        raise LimitError(f"{func.name}: {geometry.threads_per_block} threads per block {geometry.block} "
                         f"exceed the limit of {MAX_BLOCK_DIMS[0]}")
    return GpuKernelPlan(geometry, offsets)


def check_limits(name: str, geometry: LaunchGeometry, caps: GpuCapabilities, registers: int | None = None) -> None:
    """Raise LimitError when `geometry` (and, after nvcc, `registers` per thread) cannot launch
    on `caps`' architecture."""
    if geometry.threads_per_block > caps.max_threads_per_block:
        raise LimitError(f"{name}: {geometry.threads_per_block} threads per block exceed {caps.arch}'s "
                         f"{caps.max_threads_per_block}")
    if geometry.shared_bytes > caps.max_shared_memory_per_block_optin:
        raise LimitError(f"{name}: {geometry.shared_bytes} bytes of shared memory exceed {caps.arch}'s "
                         f"{caps.max_shared_memory_per_block_optin} per block")
    if registers is not None:
        if registers > caps.max_registers_per_thread:
            raise LimitError(f"{name}: {registers} registers per thread exceed {caps.max_registers_per_thread}")
        if registers * geometry.threads_per_block > caps.registers_per_sm:
            raise LimitError(f"{name}: {registers} registers × {geometry.threads_per_block} threads exceed the "
                             f"{caps.registers_per_sm} registers of one {caps.arch} multiprocessor")


#: registers are allocated per warp in units of this many
REGISTER_ALLOCATION_UNIT = 256
#: shared memory the system reserves per resident block (sm_80 and later)
RESERVED_SHARED_PER_BLOCK = 1024


def occupancy(geometry: LaunchGeometry, caps: GpuCapabilities, registers: int, static_shared_bytes: int = 0) -> float:
    """Resident warps of one multiprocessor over the most it can hold, for blocks of `geometry`
    whose threads use `registers` each (ptxas's count): the smallest of what threads, registers,
    shared memory and the block limit allow, as NVIDIA's occupancy calculator computes it."""
    warps = -(-geometry.threads_per_block // caps.warp_size)
    per_warp = -(-max(registers, 1) * caps.warp_size // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    shared = geometry.shared_bytes + static_shared_bytes
    reserved = RESERVED_SHARED_PER_BLOCK if caps.compute_capability >= (8, 0) else 0
    blocks = min(caps.max_blocks_per_sm, caps.max_warps_per_sm // warps, caps.registers_per_sm // (per_warp * warps),
                 caps.shared_memory_per_sm // (shared + reserved) if shared else caps.max_blocks_per_sm)
    return blocks * warps / caps.max_warps_per_sm


def _walk(s: Stmt):
    yield s
    for c in stmt_children(s):
        yield from _walk(c)


def _check_structure(func: PrimFunc, geometry: LaunchGeometry) -> None:
    """Global writes inside some bound loop; barriers reached by every thread of a block."""
    launch = dict(zip(BLOCK_AXES + THREAD_AXES, geometry.grid + geometry.block))

    def visit(s: Stmt, bound: bool, divergent: set, why: str) -> None:
        if isinstance(s, Store) and s.buffer.scope == "global" and not bound:
            raise CodegenError(f"{func.name}: buffer {s.buffer.name} is written outside every "
                               "blockIdx/threadIdx loop: every thread would write all of it")
        if isinstance(s, Barrier) and why:
            raise CodegenError(f"{func.name}: a barrier (__syncthreads) under thread-divergent control flow "
                               f"({why}): threads that skip it would deadlock the block")
        if isinstance(s, WarpMma) and why:
            raise CodegenError(f"{func.name}: a warp-level mma under thread-divergent control flow ({why}): "
                               "every lane of a warp must run it")
        if isinstance(s, For) and s.kind is ForKind.THREAD and s.thread in THREAD_AXES:
            guard = f"{s.var.name} < {s.extent} of {launch[s.thread]} threads along {s.thread}"
            visit(s.body, True, divergent | {s.var}, why or (guard if s.extent < launch[s.thread] else ""))
            return
        if isinstance(s, For):
            visit(s.body, bound or s.kind is ForKind.THREAD, divergent, why)
            return
        if isinstance(s, Let):
            dep = divergent | ({s.var} if free_vars(s.value) & divergent else set())
            visit(s.body, bound, dep, why)
            return
        if isinstance(s, IfThenElse):
            cond_why = why or (f"if {s.cond!r}" if free_vars(s.cond) & divergent else "")
            for c in stmt_children(s):
                visit(c, bound, divergent, cond_why)
            return
        for c in stmt_children(s):
            visit(c, bound, divergent, why)

    visit(func.body, False, set(), "")


class GpuRenderer(CStyleRenderer):
    """C-style statements and expressions with GPU semantics for thread loops, shared buffers
    and barriers; subclasses say how an index, a shared buffer and a barrier are spelt."""

    #: thread axis -> C expression of this thread's index along it
    INDEX: dict[str, str] = {}
    #: a `unsigned char*` expression: the start of this block's shared memory
    SHARED_BASE = "autosched_smem"
    #: the line before a loop to unroll (empty: leave it to the compiler)
    UNROLL_PRAGMA = "#pragma unroll"

    def _begin(self, func: PrimFunc) -> GpuKernelPlan:
        """Reset per-kernel state (names, ranges) and plan the kernel."""
        self._reset()
        self._warp_sites = 0
        self._plan = plan_kernel(func)
        return self._plan

    def _for(self, s: For, d: int) -> str:
        pad, v = "  " * d, self._name(s.var)
        self._ranges[s.var] = (0, s.extent - 1)
        if s.kind is ForKind.THREAD and s.thread != "vthread":
            g = self._plan.geometry
            launch = dict(zip(BLOCK_AXES + THREAD_AXES, g.grid + g.block))[s.thread]
            head = f"{pad}{{\n{pad}  const int32_t {v} = {self.INDEX[s.thread]};\n"
            if s.extent < launch:
                return (head + f"{pad}  if ({v} < {s.extent}) {{\n{self._stmt(s.body, d + 2)}{pad}  }}\n{pad}}}\n")
            return head + self._stmt(s.body, d + 1) + f"{pad}}}\n"
        return self._loop(s, d)

    def _loop(self, s: For, d: int) -> str:
        """A plain loop; unrolled, vectorized and vthread loops as fully unrolled ones."""
        pad, v = "  " * d, self._name(s.var)
        head = f"{pad}{self.UNROLL_PRAGMA}\n" if s.kind in (ForKind.UNROLL, ForKind.VECTORIZE, ForKind.THREAD) and self.UNROLL_PRAGMA else ""
        return (f"{head}{pad}for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{\n"
                f"{self._stmt(s.body, d + 1)}{pad}}}\n")

    def _stmt(self, s: Stmt, d: int) -> str:
        if isinstance(s, Barrier):
            return "  " * d + self._barrier() + "\n"
        if isinstance(s, AsyncCopy):
            return self._async_copy(s, d)
        if isinstance(s, AsyncCommit):
            return "  " * d + self._async_commit() + "\n"
        if isinstance(s, AsyncWait):
            return "  " * d + self._async_wait(s.pending) + "\n"
        if isinstance(s, WarpMma):
            if s.shape != "m16n8k8" or s.precision not in MMA_PRECISIONS:
                raise CodegenError(f"no {s.shape} mma with {s.precision} inputs in the GPU back ends")
            return "  " * d + self._mma(s) + "\n"
        return super()._stmt(s, d)

    def _async_copy(self, s: AsyncCopy, d: int) -> str:
        """An asynchronous copy of one element (cp.async), or a plain store where its value is not a
        global load (a synchronous store is visible after the same wait and barrier)."""
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def _async_commit(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def _async_wait(self, pending: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no asynchronous copies")

    def _mma(self, s: WarpMma) -> str:
        """One lane's call of the warp-level m16n8k8 mma (TF32, FP16 or BF16 inputs): accumulator
        elements, then A and B in the precision's fragment order (`lower.tensor_core`)."""
        raise NotImplementedError(f"{type(self).__name__} has no warp-level mma")

    def _allocate(self, s: Allocate, d: int) -> str:
        pad, b = "  " * d, s.buffer
        t, name = self._type(b), self._name(b)
        if b.scope == "shared":
            off = self._plan.shared_offsets[id(b)]
            return f"{pad}{t}* {name} = ({t}*)({self.SHARED_BASE} + {off});\n" + self._stmt(s.body, d)
        if b.scope == "local":
            return f"{pad}{t} {name}[{b.size}];\n" + self._stmt(s.body, d)
        raise CodegenError(f"buffer {b.name}: a GPU kernel cannot allocate global memory inside itself; "
                           "compute the stage at a loop of its consumer (compute_at) or inline it")

    def _barrier(self) -> str:
        """How the back end synchronizes a block's threads: `__syncthreads()` on a GPU, a switch
        to the next thread in the CPU emulation. Each GPU renderer defines it."""
        raise NotImplementedError(f"{type(self).__name__} does not say how its threads synchronize")

    def _shuffle_xor(self, value: str, lane_mask: str, width: str, ctype: str) -> str:
        """C of `value` (of type `ctype`) as lane `lane ^ lane_mask` of this thread's `width`-lane
        group holds it: `__shfl_xor_sync` on a GPU, a lockstep exchange in the CPU emulation."""
        raise NotImplementedError(f"{type(self).__name__} does not say how lanes of a warp exchange values")

    def _expr(self, e: Expr) -> str:
        if isinstance(e, Call) and e.name in WARP_REDUCTIONS:  # args past the width: bounds inference's alone
            self._warp_sites += 1
            return (f"{self._warp_reduction(e.name, e.dtype)}({self._expr(e.args[0])}, {self._expr(e.args[1])}, "
                    f"{self._warp_sites})")
        return super()._expr(e)

    def _warp_reduction(self, name: str, dtype: str) -> str:
        """The helper computing `name` (warp_sum, warp_max, warp_min) of a `dtype` value over the
        lanes of a group by log2(width) butterfly exchanges: every lane ends with the result.
        `site` numbers the call in its kernel (the emulation tells shuffles apart by it)."""
        fn = f"autosched_{name}_{SHORT[dtype]}"
        if fn not in self._helpers:
            t = C_TYPES[dtype]
            combined = {"warp_sum": "v + o", "warp_max": "v > o ? v : o", "warp_min": "v < o ? v : o"}[name]
            self._helpers[fn] = (f"{self.INLINE} {t} {fn}({t} v, int32_t width, int32_t site) {{\n"
                                 f"  (void)site;\n"
                                 f"  for (int32_t m = width >> 1; m > 0; m >>= 1) {{\n"
                                 f"    const {t} o = {self._shuffle_xor('v', 'm', 'width', t)};\n"
                                 f"    v = {combined};\n  }}\n  return v;\n}}")
        return fn

    def _type(self, b: Buffer) -> str:
        if b.dtype == "float16":
            raise CodegenError(f"buffer {b.name}: float16 is not supported by the GPU back ends yet")
        return C_TYPES[b.dtype]


def copy_source(s: AsyncCopy) -> tuple[Load, Expr | None] | None:
    """The global load an asynchronous copy reads and the condition under which it reads it (zeros
    where false), or None when its value is anything else."""
    v = s.value
    if isinstance(v, Load) and v.source.scope == "global":
        return v, None
    if (isinstance(v, Select) and isinstance(v.t, Load) and v.t.source.scope == "global"
            and isinstance(v.f, Const) and v.f.value == 0):
        return v.t, v.cond
    return None


__all__ = ["copy_source", "LaunchGeometry", "GpuKernelPlan", "LimitError", "plan_kernel", "check_limits", "occupancy", "GpuRenderer"]
