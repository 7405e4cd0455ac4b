"""A static model of a CUDA kernel's time, for ranking candidates where no GPU can time them.

The CPU emulation proves a kernel right, but how long it takes on a CPU says nothing about a
GPU (a grid's threads run one after another there). What a GPU does with a kernel can still be
bounded from what the compilers produced, as a performance engineer reads a kernel before
profiling it:

- work and traffic from the lowered loop nest: floating-point operations, bytes loaded from and
  stored to global and shared memory, each access counted once per iteration of every loop around
  it (thread and block loops included; guarded accesses counted as if taken), except unrolled
  loops its index does not depend on: nvcc loads such a value once into a register and reuses
  it (the register tile of a matmul reads each shared element once per k step, not once per FMA);
- tensor-core work: each warp-collective mma (`WarpMma`, m16n8k8 and the like) does 2·m·n·k
  FLOPs at the architecture's dense tensor rate (FP16 and BF16 inputs twice TF32's), and is one
  instruction per lane to issue;
- the instruction mix from the SASS (`autosched.codegen.sass`): instructions issued per
  arithmetic instruction, so address arithmetic, scalar loads and barriers cost issue slots;
- lanes: a warp issues for 32 lanes, so blocks of fewer threads waste issue slots, FP32 pipes
  and shared-memory bandwidth, and fetch whole 32-byte L2 sectors for fewer words;
- bank conflicts: each shared-memory access is evaluated for the 32 lanes of a block's first
  warp (its index with the thread loops at their lanes' values, other loops at 0), and costs as
  many wavefronts as the most distinct words one of the 32 banks must serve (per phase of 8
  lanes for 16-byte accesses, 16 for 8-byte ones): an unpadded tile whose rows are a multiple
  of 32 words apart serves a column in one bank, 4 to 8 times slower;
- registers from ptxas (`--resource-usage`), hence occupancy, which decides how much latency the
  multiprocessor can hide; spilled registers add local-memory traffic;
- a reference device of the architecture (SMs, clock, FP32 lanes, DRAM and L2 bandwidth): the
  kernel takes at least as long as its busiest unit (issue, FP32 pipes, shared memory, L2, DRAM),
  divided by the share of that peak its resident warps (occupancy, or the grid where it has
  fewer blocks than the GPU has room for) and its last partial wave of blocks allow.

Against an H200's times (benchmarks/gpu.py --parts correlation, 80 sampled fp32 configs each),
the lanes term took the Spearman correlation from 0.60 to 0.83 on the 1024³ MatMul and from
-0.04 to 0.62 on ResNet-18's 256-channel convolution: blocks of 1-16 threads ran 10-50× slower
than the model without it said (0.80 and 0.52 measured again, timed from CUDA graphs). On 48
tensor-core (tf32) configs of each, that model ranked at 0.15 and 0.28: unpadded tiles ran 1.7×
slower in the median and it did not see why. With bank conflicts counted, the same timings rank
at 0.67 and 0.40, and the fp32 ones at 0.81 and 0.51, the MatMul's pick now the fastest config.

The estimate is in seconds on the reference device but it is a model, never a measurement: it is
stored only under the emulated target's fingerprint (`Target.emulated`), ranks candidates within
an emulated tune, and stands in for GPU records in a build only where none exist.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from autosched.codegen.cstyle import DTYPE_BYTES
from autosched.codegen.gpu import LaunchGeometry, occupancy
from autosched.codegen.nvcc import ResourceUsage
from autosched.codegen.sass import SassProfile
from autosched.lower.ir import Allocate, For, ForKind, IfThenElse, Let, PrimFunc, Seq, Stmt, Store, WarpMma
from autosched.target import GpuCapabilities
from autosched.te.expr import BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Var, free_vars, walk


@dataclass(frozen=True)
class ReferenceDevice:
    """The figures of one GPU of an architecture that the model divides work by."""

    name: str
    sms: int
    clock_ghz: float
    fp32_lanes_per_sm: int  # FP32 FMA lanes: 64 on sm_70/75/80, 128 on sm_86 and later
    dram_gb_s: float
    l2_gb_s: float
    tf32_tflops: float  # dense TF32 tensor-core rate (0: no TF32 tensor cores); FP16 and BF16 run at twice it
    shared_bytes_per_clock: int = 128  # per SM: 32 banks of 4 bytes

    @property
    def fp32_flops(self) -> float:
        return self.sms * self.fp32_lanes_per_sm * 2 * self.clock_ghz * 1e9


#: compute capability -> a common GPU of it (vendor data sheets; boost clocks)
REFERENCE_DEVICES = {
    (7, 0): ReferenceDevice("Tesla V100", 80, 1.53, 64, 900, 2500, 0),
    (7, 5): ReferenceDevice("Tesla T4", 40, 1.59, 64, 320, 1200, 0),
    (8, 0): ReferenceDevice("A100 80GB", 108, 1.41, 64, 2039, 5500, 156),
    (8, 6): ReferenceDevice("RTX 3090", 82, 1.70, 128, 936, 2500, 35.6),
    (8, 9): ReferenceDevice("RTX 4090", 128, 2.52, 128, 1008, 5000, 82.6),
    (9, 0): ReferenceDevice("H100 SXM", 132, 1.83, 128, 3350, 10000, 495),
    (10, 0): ReferenceDevice("B200", 148, 1.90, 128, 8000, 20000, 1100),
    (12, 0): ReferenceDevice("RTX 5090", 170, 2.41, 128, 1792, 7000, 105),
}
WARP_SCHEDULERS_PER_SM = 4
#: resident warps per scheduler that hide arithmetic and shared-memory latency with some
#: instruction-level parallelism; fewer leave issue slots idle in proportion
WARPS_TO_HIDE_LATENCY = 4
LAUNCH_SECONDS = 2e-6
#: SASS opcodes that do a kernel's floating-point work (the rest is overhead to issue)
ARITHMETIC = ("FFMA", "FADD", "FMUL", "FMNMX", "MUFU", "HMMA", "FSETP", "FSEL")


def reference_device(caps: GpuCapabilities) -> ReferenceDevice:
    """The reference GPU of `caps`' architecture (the newest older entry for a newer one)."""
    return REFERENCE_DEVICES[max(cc for cc in REFERENCE_DEVICES if cc <= caps.compute_capability)]


@dataclass
class Traffic:
    """What one launch of a kernel does, summed over all its threads."""

    flops: float = 0.0  # scalar floating-point operations
    mma_flops: float = 0.0  # on tensor cores
    mma_lane_ops: float = 0.0  # mma instructions, counted once per lane that issues them
    mma_precision: str = "tf32"  # their inputs
    global_load_bytes: float = 0.0
    global_store_bytes: float = 0.0
    shared_bytes: float = 0.0  # loaded and stored
    shared_wavefront_bytes: float = 0.0  # the same, each access weighted by its bank-conflict degree
    global_buffer_bytes: float = 0.0  # the distinct global buffers: what DRAM must move at least


#: loops nvcc unrolls: a load invariant in them is made once and kept in a register
_UNROLLED = (ForKind.UNROLL, ForKind.VECTORIZE)
WARP = 32
BANKS = 32
_INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
            "floormod": np.mod, "min": np.minimum, "max": np.maximum}
_CMP_OPS = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}


class Lanes:
    """The values integer expressions take in the 32 lanes of a block's first warp: thread loops
    at their lanes' indices, every other loop at 0 (the pattern of addresses a warp touches
    repeats across iterations, offset alike in every lane)."""

    def __init__(self, block: tuple[int, int, int]) -> None:
        lane = np.arange(WARP)
        bx, by, _ = block
        self.threads = {"threadIdx.x": lane % bx, "threadIdx.y": (lane // bx) % by, "threadIdx.z": lane // (bx * by)}
        self.env = {}

    env: dict[Var, np.ndarray | int | None]

    def value(self, e: Expr) -> np.ndarray | int | None:
        """`e` in each lane, or None where it is not an integer expression this can evaluate."""
        if isinstance(e, Const):
            return int(e.value) if not isinstance(e.value, float) or float(e.value).is_integer() else None
        if isinstance(e, Var):
            return self.env.get(e, 0)  # None: a Let this cannot evaluate
        if isinstance(e, Cast):
            return self.value(e.value)
        if isinstance(e, BinOp) and e.op in _INT_OPS:
            a, b = self.value(e.a), self.value(e.b)
            if a is None or b is None or (e.op in ("floordiv", "floormod") and np.any(np.asarray(b) == 0)):
                return None
            return _INT_OPS[e.op](a, b)
        if isinstance(e, Cmp):
            a, b = self.value(e.a), self.value(e.b)
            return None if a is None or b is None else _CMP_OPS[e.op](a, b).astype(np.int64)
        if isinstance(e, Select):
            c, a, b = self.value(e.cond), self.value(e.t), self.value(e.f)
            return None if c is None or a is None or b is None else np.where(np.asarray(c) != 0, a, b)
        return None

    def wavefronts(self, index: Expr, width: int) -> float:
        """Wavefronts a warp's access of `width` consecutive words a lane at `index` costs, per
        the ideal (1 for conflict-free; the bank-conflict degree otherwise)."""
        words = self.value(index)
        if words is None:
            return 1.0
        words = np.broadcast_to(np.asarray(words, dtype=np.int64), (WARP,))
        per_phase = max(1, WARP // width)  # 16-byte accesses are served 8 lanes at a time
        total = 0
        for start in range(0, WARP, per_phase):
            lane_words = (words[start:start + per_phase, None] + np.arange(width)[None, :]).ravel()
            distinct = np.unique(lane_words)
            total += int(np.bincount(distinct % BANKS, minlength=BANKS).max())
        return total / math.ceil(WARP / per_phase)


def _shared_access(index: Expr, nbytes: float, t: Traffic, unrolled: tuple[For, ...], lanes: Lanes | None) -> None:
    """Count a shared-memory access, and its wavefronts: a vectorized loop over its index is one
    access of that many words a lane."""
    t.shared_bytes += nbytes
    if lanes is None:
        t.shared_wavefront_bytes += nbytes
        return
    used = free_vars(index)
    width = next((f.extent for f in reversed(unrolled) if f.kind is ForKind.VECTORIZE and f.var in used), 1)
    t.shared_wavefront_bytes += nbytes * lanes.wavefronts(index, width if width in (2, 4) else 1)


def _expr_counts(e: Expr, times: float, t: Traffic, unrolled: tuple[For, ...] = (), lanes: Lanes | None = None) -> None:
    for x in walk(e):
        if isinstance(x, BinOp) and x.dtype.startswith("float") and x.op in ("add", "sub", "mul", "div", "min", "max"):
            t.flops += times
        elif isinstance(x, Call) and x.dtype.startswith("float"):
            t.flops += times
        elif isinstance(x, Load):
            used = free_vars(x.indices[0])
            reused = math.prod(f.extent for f in unrolled if f.var not in used)
            nbytes = times / reused * DTYPE_BYTES.get(x.dtype, 4)
            if x.source.scope == "global":
                t.global_load_bytes += nbytes
            elif x.source.scope == "shared":
                _shared_access(x.indices[0], nbytes, t, unrolled, lanes)


def _visit(s: Stmt, times: float, t: Traffic, bound: dict[str, int], unrolled: tuple[For, ...] = (),
           lanes: Lanes | None = None) -> None:
    if isinstance(s, Store):
        _expr_counts(s.value, times, t, unrolled, lanes)
        _expr_counts(s.index, times, t, unrolled, lanes)
        nbytes = times * DTYPE_BYTES.get(s.buffer.dtype, 4)
        if s.buffer.scope == "global":
            t.global_store_bytes += nbytes
        elif s.buffer.scope == "shared":
            _shared_access(s.index, nbytes, t, unrolled, lanes)
    elif isinstance(s, For):
        if lanes is not None and s.kind is ForKind.THREAD and s.thread in lanes.threads:
            lanes.env[s.var] = lanes.threads[s.thread]
        if s.kind is ForKind.THREAD and s.thread in bound:
            # the same index as the enclosing loop of that axis: only the threads below the extent run it
            _visit(s.body, times * s.extent / bound[s.thread], t, {**bound, s.thread: s.extent}, unrolled, lanes)
        else:
            inner = {**bound, s.thread: s.extent} if s.kind is ForKind.THREAD and s.thread != "vthread" else bound
            _visit(s.body, times * s.extent, t, inner, unrolled + ((s,) if s.kind in _UNROLLED else ()), lanes)
    elif isinstance(s, WarpMma):  # `times` counts lanes: a warp's 32 issue it together
        m, n, k = (int(v) for v in re.findall(r"\d+", s.shape))  # "m16n8k8"
        t.mma_flops += times * 2 * m * n * k / 32
        t.mma_lane_ops += times
        t.mma_precision = s.precision
        for x in (*s.a, *s.b):
            _expr_counts(x, times, t, unrolled, lanes)
    elif isinstance(s, Let):
        _expr_counts(s.value, times, t, unrolled, lanes)
        if lanes is not None:
            lanes.env[s.var] = lanes.value(s.value)
        _visit(s.body, times, t, bound, unrolled, lanes)
    elif isinstance(s, IfThenElse):
        _expr_counts(s.cond, times, t, unrolled, lanes)
        _visit(s.then, times, t, bound, unrolled, lanes)
        if s.orelse is not None:
            _visit(s.orelse, times, t, bound, unrolled, lanes)
    elif isinstance(s, Allocate):
        _visit(s.body, times, t, bound, unrolled, lanes)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _visit(x, times, t, bound, unrolled, lanes)


def kernel_traffic(func: PrimFunc, block: tuple[int, int, int] | None = None) -> Traffic:
    """Work and memory traffic of one launch of `func`, from its loop nest; with the launch's
    `block`, shared-memory accesses weighted by their bank conflicts too."""
    t = Traffic()
    _visit(func.body, 1.0, t, {}, (), Lanes(block) if block is not None else None)
    t.global_buffer_bytes = float(sum(b.size * DTYPE_BYTES.get(b.dtype, 4) for b in func.params))
    return t


@dataclass(frozen=True)
class StaticEstimate:
    """The model's figures for one kernel: `seconds` and the bound that sets it."""

    seconds: float
    bound: str  # "issue", "fp32", "tensor", "shared", "l2", "dram"
    occupancy: float
    flops: float
    global_bytes: float
    instructions_per_flop: float

    def to_json(self) -> dict:
        return asdict(self)


def estimate(func: PrimFunc, geometry: LaunchGeometry, caps: GpuCapabilities, usage: ResourceUsage | None = None,
             sass: SassProfile | None = None) -> StaticEstimate:
    """The static model's time of one launch of `func` on `caps`' reference device. Without
    ptxas's `usage`, occupancy counts threads and shared memory only (32 registers a thread);
    without `sass`, a kernel is taken to issue two instructions per floating-point operation."""
    device = reference_device(caps)
    t = kernel_traffic(func, tuple(geometry.block))  # type: ignore[arg-type]
    registers = usage.registers if usage is not None else 32
    occ = occupancy(geometry, caps, registers, usage.static_shared_bytes if usage is not None else 0)
    if occ <= 0:  # cannot launch: the builders reject it before any model is asked
        raise ValueError(f"{func.name}: no block of {geometry.threads_per_block} threads fits one multiprocessor")
    # arithmetic instructions a thread issues: an FFMA does two FLOPs, an mma one per lane
    arithmetic = t.flops / (2 if sass is None or sass.count("FFMA") else 1) + t.mma_lane_ops
    if sass is not None and any(sass.count(op) for op in ARITHMETIC):
        per_arithmetic = sass.total / sum(sass.count(op) for op in ARITHMETIC)
    else:  # two instructions a FLOP
        per_arithmetic = 4.0
    thread_instructions = max(arithmetic, 1.0) * per_arithmetic
    clock = device.clock_ghz * 1e9
    spill_bytes = (usage.spill_loads + usage.spill_stores) if usage is not None else 0
    threads = geometry.threads_per_block * math.prod(geometry.grid)
    # a warp issues for 32 lanes whatever its block fills: blocks of a few threads waste the rest
    # of the issue slot, the FP32 pipes and the shared-memory port, and fetch whole 32-byte L2
    # sectors for fewer than eight 4-byte words
    warps_per_block = -(-geometry.threads_per_block // caps.warp_size)
    lanes = geometry.threads_per_block / (warps_per_block * caps.warp_size)
    sectors = max(1.0, 8 / (lanes * caps.warp_size))
    l2_bytes = (t.global_load_bytes + t.global_store_bytes + spill_bytes * threads) * sectors
    bounds = {
        "issue": thread_instructions / (caps.warp_size * lanes) / (device.sms * WARP_SCHEDULERS_PER_SM * clock),
        "fp32": t.flops / lanes / device.fp32_flops,
        "tensor": t.mma_flops / (device.tf32_tflops * 1e12 * (1 if t.mma_precision == "tf32" else 2))
                  if t.mma_flops and device.tf32_tflops else 0.0,
        "shared": t.shared_wavefront_bytes / lanes / (device.sms * device.shared_bytes_per_clock * clock),
        "l2": l2_bytes / (device.l2_gb_s * 1e9),
        "dram": min(t.global_buffer_bytes, l2_bytes) / (device.dram_gb_s * 1e9),
    }
    bound = max(bounds, key=lambda k: bounds[k])
    blocks = math.prod(geometry.grid)
    # warps an SM holds at once: as occupancy allows, or fewer where the grid has too few blocks
    resident_warps = min(occ * caps.max_warps_per_sm, math.ceil(blocks / device.sms) * warps_per_block)
    hiding = min(1.0, resident_warps / WARPS_TO_HIDE_LATENCY / WARP_SCHEDULERS_PER_SM)
    waves = blocks / device.sms  # blocks per SM, on average; the busiest SM runs the ceiling of it
    balance = waves / math.ceil(waves)
    seconds = bounds[bound] / (hiding * balance) + LAUNCH_SECONDS
    flops = t.flops + t.mma_flops
    return StaticEstimate(seconds, bound, occ, flops, t.global_load_bytes + t.global_store_bytes,
                          thread_instructions / max(flops, 1.0))


__all__ = ["REFERENCE_DEVICES", "ReferenceDevice", "StaticEstimate", "Traffic", "estimate", "kernel_traffic",
           "reference_device"]
