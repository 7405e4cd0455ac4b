"""CUDA C code generation: one `extern "C" __global__` kernel per lowered function.

Thread-bound loops become the block and thread indices (see `gpu.py` for the launch geometry
and the checks), shared buffers are carved out of the block's dynamic shared memory (so a
kernel may use an architecture's opt-in maximum), local buffers are per-thread arrays that
nvcc keeps in registers once unrolled loops index them by constants, barriers are
`__syncthreads()`. A vectorized loop of 2 or 4 float32 lanes whose store (and any load) is
contiguous and provably 16- or 8-byte aligned becomes one float4/float2 access; otherwise it is
an unrolled scalar loop, which is always correct.

Asynchronous copies are `cp.async` (LDGSTS): 16 bytes (`.cg`) for a 4-lane vectorized copy whose
source and destination are contiguous and 16-byte aligned and whose zero-fill condition is the
same for all lanes, else 4 bytes (`.ca`) an element; zero-filling copies pass a source size of 0.
A warp-level mma is `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` with its inputs rounded
by `cvt.rna.tf32.f32` (A's four read by one `ldmatrix.x4` where `WarpMma.a_rows` says it may), or with .f16/.bf16 inputs packed in pairs by `cvt.rn.f16x2.f32` /
`cvt.rn.bf16x2.f32` (round to nearest even), as inline PTX (sm_80 and later).
"""
from __future__ import annotations

from autosched.codegen.cstyle import lane_zero, param_decls, var_in_atoms
from autosched.codegen.gpu import GpuRenderer, LaunchGeometry, copy_source, plan_kernel
from autosched.lower import arith
from autosched.lower.ir import Allocate, AsyncCopy, For, ForKind, IfThenElse, PrimFunc, Store, WarpMma
from autosched.te.expr import BinOp, Const, Expr, Load, Var, free_vars, substitute, transform, walk

_LANES = "xyzw"
#: this thread's lane in its warp (threads are numbered x fastest, then y, then z)
LANE = ("static __device__ __forceinline__ unsigned autosched_lane(void) {\n"
        "  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;\n}")
#: device functions the asynchronous copies and the mma call, by name
_PTX = {
    "as_cp_async_4": """static __device__ __forceinline__ void as_cp_async_4(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\\n"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}""",
    "as_cp_async_16": """static __device__ __forceinline__ void as_cp_async_16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}""",
    "as_mma_m16n8k8_tf32": """static __device__ __forceinline__ uint32_t as_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\\n" : "=r"(r) : "f"(x));
  return r;
}
static __device__ __forceinline__ void as_mma_m16n8k8_tf32(float& d0, float& d1, float& d2, float& d3, float a0,
                                                           float a1, float a2, float a3, float b0, float b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(as_tf32(a0)), "r"(as_tf32(a1)), "r"(as_tf32(a2)), "r"(as_tf32(a3)), "r"(as_tf32(b0)),
                 "r"(as_tf32(b1)));
}""",
    "as_ldmatrix_x4": """static __device__ __forceinline__ void as_ldmatrix_x4(const float* row, float& r0, float& r1, float& r2,
                                                      float& r3) {
  uint32_t a, b, c, d;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n"
               : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"((unsigned)__cvta_generic_to_shared(row)) : "memory");
  r0 = __uint_as_float(a); r1 = __uint_as_float(b); r2 = __uint_as_float(c); r3 = __uint_as_float(d);
}""",
    **{f"as_mma_m16n8k8_{p}": f"""static __device__ __forceinline__ uint32_t as_{p}x2(float lo, float hi) {{
  uint32_t r;
  asm("cvt.rn.{ptx}x2.f32 %0, %1, %2;\\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}}
static __device__ __forceinline__ void as_mma_m16n8k8_{p}(float& d0, float& d1, float& d2, float& d3, float a0,
                                                          float a1, float a2, float a3, float b0, float b1) {{
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5}}, {{%6}}, "
               "{{%0, %1, %2, %3}};\\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(as_{p}x2(a0, a1)), "r"(as_{p}x2(a2, a3)), "r"(as_{p}x2(b0, b1)));
}}""" for p, ptx in (("fp16", "f16"), ("bf16", "bf16"))},
}


class CudaRenderer(GpuRenderer):
    """Renders lowered functions as a CUDA translation unit (for nvcc -cubin)."""

    INLINE = "static __device__ __forceinline__"
    INDEX = {axis: f"(int32_t){axis}" for axis in
             ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")}

    def render(self, func: PrimFunc) -> str:
        return self.render_module([func])

    def render_module(self, funcs: list[PrimFunc], timers: bool = False, tail: str = "") -> str:
        """Every kernel of `funcs` in one .cu source; `timers` has no meaning on a GPU (events time it)."""
        self._helpers: dict[str, str] = {}
        bodies = [self._function(f) for f in funcs]
        head = ["#include <stdint.h>", "#include <math.h>", LANE, ""]
        return "\n".join(head + list(self._helpers.values()) + [""] + bodies + [tail])

    def geometry(self, func: PrimFunc) -> LaunchGeometry:
        """How the host launches the rendered kernel."""
        return plan_kernel(func).geometry

    def _function(self, func: PrimFunc, timer: bool = False) -> str:
        plan = self._begin(func)
        self._hoisted: dict[int, list[str]] = {}  # id of a WarpMma -> the registers its A was loaded into
        self._ldmatrix_sites = 0
        g = plan.geometry
        params = ", ".join(param_decls(func, [self._name(b) for b in func.params], "__restrict__"))
        lines = [f"/* grid {g.grid}, block {g.block}, {g.shared_bytes} bytes of dynamic shared memory */",
                 f'extern "C" __global__ void __launch_bounds__({g.threads_per_block}) {self.symbol(func)}({params}) {{']
        if g.shared_bytes:
            lines.append(f"  extern __shared__ __align__(16) unsigned char {self.SHARED_BASE}[];")
        lines += [self._stmt(func.body, 1).rstrip("\n"), "}", ""]
        return "\n".join(lines)

    def _barrier(self) -> str:
        return "__syncthreads();"

    def _shuffle_xor(self, value: str, lane_mask: str, width: str, ctype: str) -> str:
        # the lanes of this thread's group: all 32, or `width` aligned ones of a partial warp
        return (f"__shfl_xor_sync({width} >= 32 ? 0xffffffffu : ((1u << {width}) - 1u) << (autosched_lane() & "
                f"~(unsigned)({width} - 1)), {value}, {lane_mask})")

    def _allocate(self, s: Allocate, d: int) -> str:
        if s.buffer.scope == "local":  # aligned so a float4 access to it is legal
            pad = "  " * d
            return (f"{pad}__align__(16) {self._type(s.buffer)} {self._name(s.buffer)}[{s.buffer.size}];\n"
                    + self._stmt(s.body, d))
        return super()._allocate(s, d)

    def _loop(self, s: For, d: int) -> str:
        if s.kind is ForKind.VECTORIZE:
            vec = self._vector_copy(s, d) or self._vector(s, d)
            if vec is not None:
                return vec
        mma = s.body
        if (s.kind is ForKind.UNROLL and isinstance(mma, WarpMma) and mma.a_rows is not None
                and isinstance(mma.a[0], Load) and s.var not in free_vars(mma.a_rows)):
            # the mma tiles along n share A's registers: one ldmatrix before their loop (an asm
            # volatile in it would run once per tile, since nvcc may not merge volatile asm)
            names = [f"_a{self._ldmatrix_sites}_{i}" for i in range(4)]
            self._ldmatrix_sites += 1
            self._hoisted[id(mma)] = names
            row = f"&{self._name(mma.a[0].source)}[{self._expr(mma.a_rows)}]"
            return (f"{'  ' * d}float {', '.join(names)};\n"
                    f"{'  ' * d}{self._ptx('as_ldmatrix_x4')}({row}, {', '.join(names)});\n" + super()._loop(s, d))
        return super()._loop(s, d)

    # --- cp.async and mma.sync ---------------------------------------------------------------
    def _ptx(self, name: str) -> str:
        self._helpers.setdefault(name, _PTX[name])
        return name

    def _async_copy(self, s: AsyncCopy, d: int) -> str:
        src = copy_source(s)
        if src is None:
            return f"{'  ' * d}{self._name(s.buffer)}[{self._expr(s.index)}] = {self._expr(s.value)};\n"
        load, cond = src
        dst, base = f"&{self._name(s.buffer)}[{self._expr(s.index)}]", self._name(load.source)
        at = f"&{base}[{self._expr(load.indices[0])}]"
        if cond is None:
            return f"{'  ' * d}{self._ptx('as_cp_async_4')}({dst}, {at}, 4);\n"
        c = self._expr(cond)
        return f"{'  ' * d}{self._ptx('as_cp_async_4')}({dst}, {c} ? {at} : {base}, {c} ? 4 : 0);\n"

    def _async_commit(self) -> str:
        return 'asm volatile("cp.async.commit_group;\\n" ::: "memory");'

    def _async_wait(self, pending: int) -> str:
        return f'asm volatile("cp.async.wait_group {pending};\\n" ::: "memory");'

    def _mma(self, s: WarpMma) -> str:
        acc = self._name(s.acc)
        operands = [self._expr(x) for x in s.a + s.b]
        pairs: list[str] = []
        if id(s) in self._hoisted:
            operands[:4] = self._hoisted[id(s)]
        elif s.a_rows is not None and isinstance(s.a[0], Load):  # A's four registers by one ldmatrix.x4
            row = f"&{self._name(s.a[0].source)}[{self._expr(s.a_rows)}]"
            pairs.append(f"float _a0, _a1, _a2, _a3; {self._ptx('as_ldmatrix_x4')}({row}, _a0, _a1, _a2, _a3);")
            operands[:4] = ["_a0", "_a1", "_a2", "_a3"]
        elif s.precision != "tf32":  # a register's pair of k: one 8-byte shared load where adjacent and aligned
            for first in range(0, len(operands), 2):
                base = self._pair_base(*(s.a + s.b)[first:first + 2])
                if base is not None:
                    name = f"_p{len(pairs)}"
                    pairs.append(f"const float2 {name} = *(const float2*)&{base};")
                    operands[first:first + 2] = [f"{name}.x", f"{name}.y"]
        call = f"{self._ptx(f'as_mma_m16n8k8_{s.precision}')}({', '.join([f'{acc}[{self._expr(i)}]' for i in s.c] + operands)});"
        return f"{{ {' '.join(pairs)} {call} }}" if pairs else call

    def _pair_base(self, lo: Expr, hi: Expr) -> str | None:
        """`&buffer[index]` of `lo` when `hi` is the next element of the same float32 buffer and
        `lo`'s index is even (the buffers start 16-byte aligned), else None."""
        if not (isinstance(lo, Load) and isinstance(hi, Load) and lo.source is hi.source and lo.dtype == "float32"):
            return None
        step = arith.linear(arith.simplify(BinOp("sub", hi.indices[0], lo.indices[0]), self._ranges))
        first = arith.linear(arith.simplify(lo.indices[0], self._ranges))
        if step.terms or step.const != 1 or first.const % 2 or any(
                c * arith.known_divisor(a) % 2 for c, a in first.terms.values()):
            return None
        return f"{self._name(lo.source)}[{self._expr(lo.indices[0])}]"

    def _vector_copy(self, s: For, d: int) -> str | None:
        """One 16-byte cp.async for 4 lanes of contiguous, aligned float32 with one zero-fill
        condition, or None."""
        v, body, guard = s.var, s.body, None
        if isinstance(body, IfThenElse) and body.orelse is None and v not in free_vars(body.cond):
            guard, body = body.cond, body.then
        if s.extent != 4 or not isinstance(body, AsyncCopy) or body.buffer.dtype != "float32":
            return None
        src = copy_source(body)
        if src is None or (src[1] is not None and v in free_vars(src[1])):
            return None
        load, cond = src
        dst_base = self._contiguous_base(body.index, v, 4)
        src_base = self._contiguous_base(load.indices[0], v, 4)
        if dst_base is None or src_base is None:
            return None
        pad, base = "  " * d, self._name(load.source)
        dst, at = f"&{self._name(body.buffer)}[{self._expr(dst_base)}]", f"&{base}[{self._expr(src_base)}]"
        if cond is None:
            code = f"{pad}{self._ptx('as_cp_async_16')}({dst}, {at}, 16);  /* {v.name}: 4 lanes */\n"
        else:
            c = self._expr(cond)
            code = f"{pad}{self._ptx('as_cp_async_16')}({dst}, {c} ? {at} : {base}, {c} ? 16 : 0);  /* {v.name}: 4 lanes */\n"
        self._ranges.pop(v, None)
        return code if guard is None else f"{pad}if ({self._expr(guard)})\n{code}"

    # --- float2 / float4 ---------------------------------------------------------------------
    def _vector(self, s: For, d: int) -> str | None:
        """One vector store (and vector loads) for a contiguous, aligned float32 loop, or None."""
        v, lanes, body, cond = s.var, s.extent, s.body, None
        if isinstance(body, IfThenElse) and body.orelse is None and v not in free_vars(body.cond):
            cond, body = body.cond, body.then
        if (lanes not in (2, 4) or not isinstance(body, Store) or isinstance(body, AsyncCopy)
                or body.buffer.dtype != "float32"):  # an AsyncCopy stays asynchronous, lane by lane
            return None
        base = self._contiguous_base(body.index, v, lanes)
        if base is None:
            return None
        vt = f"float{lanes}"
        loads: dict = {}  # key of a vector load -> (placeholder name, base)
        for x in walk(body.value):
            if isinstance(x, Load) and v in free_vars(x) and x.key() not in loads and x.dtype == "float32":
                lb = self._contiguous_base(x.indices[0], v, lanes)
                if lb is not None:
                    loads[x.key()] = (f"_vl{len(loads)}", lb, x.source)
        holders: dict = {}
        pad = "  " * d
        out = [f"{pad}{{ /* {v.name}: {lanes} lanes, {vt} */\n"]
        for name, lb, src in loads.values():
            out.append(f"{pad}  const {vt} {name} = *(const {vt}*)&{self._name(src)}[{self._expr(lb)}];\n")
        out.append(f"{pad}  {vt} _vs;\n")
        for k in range(lanes):
            for key, (name, _, _) in loads.items():
                holders[key] = Var(f"{name}_{k}", "float32")
                self._names[id(holders[key])] = f"{name}.{_LANES[k]}"
            lane = transform(body.value, lambda x: holders.get(x.key()) if isinstance(x, Load) else None)
            lane = arith.simplify(substitute(lane, {v: Const(k, v.dtype)}), self._ranges)
            out.append(f"{pad}  _vs.{_LANES[k]} = {self._expr(lane)};\n")
        out.append(f"{pad}  *({vt}*)&{self._name(body.buffer)}[{self._expr(base)}] = _vs;\n{pad}}}\n")
        self._ranges.pop(v, None)
        code = "".join(out)
        if cond is not None:
            code = f"{pad}if ({self._expr(cond)})\n{code}"
        return code

    def _contiguous_base(self, index: Expr, v: Var, lanes: int) -> Expr | None:
        """The index of lane 0 when lanes are consecutive and lane 0 is a multiple of `lanes`."""
        lin = arith.linear(index, {**self._ranges, v: (0, lanes - 1)})
        if var_in_atoms(lin, v) or lin.coeff(v) != 1:
            return None
        base = arith.simplify(lane_zero(lin.to_expr(), v), self._ranges)
        aligned = arith.linear(base)
        if aligned.const % lanes or any(c * arith.known_divisor(a) % lanes for c, a in aligned.terms.values()):
            return None
        return base


__all__ = ["CudaRenderer"]
