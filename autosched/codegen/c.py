"""C99 (GNU dialect) code generation for CPU targets.

Vectorized loops become GCC vector-extension code (one `vector_size` type per dtype and lane
count) rather than a hint the compiler may ignore: contiguous accesses are vector loads and
stores, loop-invariant values broadcast, other strides gathered lane by lane. A vectorized loop
whose body cannot be expressed that way (a guard that depends on the lane) falls back to a
scalar loop under `#pragma omp simd`. Unrolled loops carry `#pragma GCC unroll`, parallel loops
OpenMP. Local accumulators are plain arrays indexed by constants after unrolling, which GCC
promotes to registers.
"""
from __future__ import annotations

from typing import TypeGuard, TypeVar

from autosched.codegen import dot, threads, vmath
from autosched.codegen.cstyle import (
    BINARY_OPS,
    C_TYPES,
    COMPARISONS,
    DTYPE_BYTES,
    MATH,
    SHORT,
    CStyleRenderer,
    lane_zero,
    math_fmt,
    var_in_atoms,
)
from autosched.codegen.errors import CodegenError
from autosched.lower import arith
from autosched.lower.ir import (
    Allocate,
    Barrier,
    For,
    ForKind,
    IfThenElse,
    Let,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    walk_stmts,
)
from autosched.te.expr import (
    INT_DTYPES,
    BinOp,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    Load,
    Select,
    Var,
    children,
    free_vars,
    is_float,
    substitute,
    transform,
    walk,
)

#: dtype -> the signed integer dtype of its width: the lane type of its comparison masks
_MASK_DTYPE = {"float32": "int32", "float64": "int64", "int8": "int8", "int16": "int16", "int32": "int32",
               "int64": "int64", "uint8": "int8", "uint16": "int16", "uint32": "int32", "uint64": "int64"}
#: heap-allocate local buffers above this size: thread stacks are small
STACK_LIMIT_BYTES = 256 * 1024
VECTOR_LANES = (2, 4, 8, 16, 32, 64)


#: stores below which a parallel loop runs on the calling thread alone: waking the pool and
#: joining it costs about as much (a recurrent step's gate ops on 128 elements, a few hundred a
#: model)
SERIAL_WORK = 2048


def _work(s: Stmt) -> int:
    """The stores `s` executes: a loop's body times its extent, a sequence's sum, a branch's
    larger side."""
    if isinstance(s, For):
        return s.extent * _work(s.body)
    if isinstance(s, Seq):
        return sum(_work(x) for x in s.stmts)
    if isinstance(s, IfThenElse):
        return max(_work(s.then), _work(s.orelse) if s.orelse is not None else 0)
    if isinstance(s, (Let, Allocate)):
        return _work(s.body)
    return 1


def _conversion_steps(source: str, target: str) -> list[str]:
    """The dtypes a vector conversion between float32 and a narrower integer passes through,
    `target` last. gcc 12 converts lane by lane between float32 and 8-bit integers (and widens
    8-bit lanes 4x the same way): 48 scalar instructions per 16 lanes, where through int32 (and
    16-bit integers) it takes vcvttps2dq and vpmovdb, or vpmovsxbw, vpmovsxwd and vcvtdq2ps. A
    quantized model stores and reads its 8-bit activations so. (A float beyond the integer
    type's range converts to no defined value in C either way.)"""
    narrow = {"int8", "uint8", "int16", "uint16"}
    if source == "float32" and target in narrow:
        return ["int32", target]
    if target == "float32" and source in narrow:
        widened = ["int16"] if source == "int8" else ["uint16"] if source == "uint8" else []
        return widened + ["int32", target]
    return [target]


class CRenderer(CStyleRenderer):
    """Renders PrimFuncs as a self-contained C translation unit for a CPU: vector-extension
    loops (with vmath's vector exp/erf/sigmoid and vector min/max), OpenMP parallel loops, heap
    temporaries and a timing entry point per kernel."""

    def render(self, func: PrimFunc) -> str:
        """A translation unit for one kernel, with its timing entry point (what tuning builds)."""
        return self.render_module([func], timers=True)

    def render_module(self, funcs: list[PrimFunc], timers: bool = False, tail: str = "") -> str:
        """One translation unit holding several kernels (what a whole-model build links).

        `tail` is appended C that may call the kernels (the model's graph executor).
        """
        self._helpers: dict[str, str] = {}
        self._workspace_bytes = 0  # the module's workspace: the most any kernel holds at once
        self._workspace_top = 0  # the bytes held by the allocations enclosing the one rendered
        self._in_parallel = 0
        bodies = [self._function(f, timers) for f in funcs]
        head = ["#define _GNU_SOURCE", "#include <math.h>", "#include <stdint.h>", "#include <stdlib.h>",
                "#include <time.h>", threads.runtime_source()]
        return "\n".join(head + list(self._helpers.values()) + self._workspace_decls() + [""] + bodies + [
            "void autosched_set_num_threads(int32_t n) { omp_set_num_threads(n); }", "", tail])

    def _function(self, func: PrimFunc, timer: bool) -> str:
        self._reset()
        self._check(func)
        sig = self.signature(func)
        body = self._stmt(func.body, 1)
        lines = ["/* Returns 0, or 1 when a temporary buffer could not be allocated. */", sig + " {",
                 "  int32_t status = 0;", body.rstrip("\n"), "  return status;", "}", ""]
        if timer:
            lines.append(self._timing_entry(func))
        return "\n".join(lines)

    # --- checks -------------------------------------------------------------------------------
    def _check(self, func: PrimFunc) -> None:
        for s in walk_stmts(func.body):
            if isinstance(s, For) and s.kind is ForKind.THREAD:
                raise CodegenError(f"{func.name}: loop {s.var.name} is bound to {s.thread}; "
                                   "the C back end has no GPU threads (use target cuda)")
            if isinstance(s, Allocate) and s.buffer.scope == "shared":
                raise CodegenError(f"{func.name}: buffer {s.buffer.name} is in shared memory; "
                                   "the C back end has none (use target cuda)")
            if isinstance(s, Barrier):
                raise CodegenError(f"{func.name}: barriers need GPU threads; the C back end has none")

    # --- statements -------------------------------------------------------------------------------
    def _stmt(self, s: Stmt, d: int) -> str:
        if isinstance(s, Prefetch):  # for reading, into every cache level (gcc's defaults)
            return f"{'  ' * d}__builtin_prefetch(&{self._name(s.buffer)}[{self._expr(s.index)}]);\n"
        return super()._stmt(s, d)

    def _allocate(self, s: Allocate, d: int) -> str:
        pad, b = "  " * d, s.buffer
        t, name = C_TYPES[b.dtype], self._name(b)
        nbytes = b.size * DTYPE_BYTES[b.dtype]
        if b.scope == "local" and nbytes <= STACK_LIMIT_BYTES:
            return f"{pad}{t} {name}[{b.size}] __attribute__((aligned(64)));\n" + self._stmt(s.body, d)
        rounded = max(64, -(-nbytes // 64) * 64)
        if self._in_parallel:  # one buffer per thread: allocated and freed by each
            return (f"{pad}{{\n{pad}  {t}* restrict {name} = ({t}*)aligned_alloc(64, {rounded});\n"
                    f"{pad}  if ({name} == NULL) {{ status = 1; }} else {{\n"
                    f"{self._stmt(s.body, d + 2)}{pad}  free({name});\n{pad}  }}\n{pad}}}\n")
        offset = self._workspace_top
        self._workspace_top += rounded
        self._workspace_bytes = max(self._workspace_bytes, self._workspace_top)
        body = self._stmt(s.body, d + 2)
        self._workspace_top = offset
        return (f"{pad}{{\n{pad}  char* {name}_ws = autosched_workspace();\n"
                f"{pad}  {t}* restrict {name} = ({t}*)({name}_ws + {offset});\n"
                f"{pad}  if ({name}_ws == NULL) {{ status = 1; }} else {{\n{body}{pad}  }}\n{pad}}}\n")

    def _workspace_decls(self) -> list[str]:
        """One workspace for the heap temporaries of all the module's kernels outside parallel
        loops: allocated at the first call that needs it, kept until the library is unloaded (a
        destructor frees it). A kernel's temporaries lie in it one after another, nested ones
        above the ones that enclose them; the next kernel reuses the same bytes.

        Why: allocated and freed on every call, a temporary above malloc's trim threshold is
        handed back to the system at each free and page-faulted in again at the next call.
        BERT's attention (two 384 KB packed operands) timed 0.210 ms for its QKᵀ product in the
        model's profile, 0.136 ms with glibc's trimming off, and the kernels after it slowed down
        too (softmax 0.101 against 0.054 ms). One workspace rather than one per temporary: a
        kernel's temporaries land where the previous kernel's were, in cache, and a model holds
        the most one kernel needs at once (ResNet-18: 4.5 MB) rather than all of them (19.8 MB). The cost is that a
        kernel is not re-entrant, which a model's calls already are not (they share one arena).
        """
        if self._workspace_bytes == 0:
            return []
        return ["static char* autosched_workspace_bytes = NULL;",
                "static char* autosched_workspace(void) {",
                "  if (autosched_workspace_bytes == NULL)",
                f"    autosched_workspace_bytes = (char*)aligned_alloc(64, {self._workspace_bytes});",
                "  return autosched_workspace_bytes;",
                "}",
                "__attribute__((destructor)) static void autosched_workspace_free(void) "
                "{ free(autosched_workspace_bytes); }"]

    def _for(self, s: For, d: int) -> str:
        pad = "  " * d
        v = self._name(s.var)
        self._ranges[s.var] = (0, s.extent - 1)
        if s.kind is ForKind.VECTORIZE:
            vec = self._vector_loop(s, d) or self._versioned_vector_loop(s, d)
            if vec is not None:
                return vec
        parallel = f"{pad}#pragma omp parallel for\n" if s.extent * _work(s.body) >= SERIAL_WORK else ""
        head = {ForKind.PARALLEL: parallel, ForKind.UNROLL: f"{pad}#pragma GCC unroll {s.extent}\n",
                ForKind.VECTORIZE: f"{pad}#pragma omp simd\n"}.get(s.kind, "")
        threaded = s.kind is ForKind.PARALLEL and bool(parallel)
        extent: Expr = Const(s.extent, s.var.dtype)
        body_stmt = s.body
        if s.kind in (ForKind.SERIAL, ForKind.VECTORIZE) and isinstance(body_stmt, IfThenElse) \
                and body_stmt.orelse is None:
            bounds, rest = _upper_bounds(body_stmt.cond, s.var)
            for b in bounds:
                extent = arith.simplify(BinOp("min", extent, b), self._ranges)
            if bounds:
                body_stmt = body_stmt.then if rest is None else IfThenElse(rest, body_stmt.then, None)
        self._in_parallel += threaded
        body = self._stmt(body_stmt, d + 1)
        self._in_parallel -= threaded
        return f"{head}{pad}for (int32_t {v} = 0; {v} < {self._expr(extent)}; ++{v}) {{\n{body}{pad}}}\n"

    # --- vectorized loops -----------------------------------------------------------------------
    def _versioned_vector_loop(self, s: For, d: int) -> str | None:
        """Vector code for the lanes' common case, a scalar loop for the rest.

        A guard (the edge tile of a split that does not divide) or a select (padding, concatenation)
        whose condition depends on the lane blocks plain vector code. When each such condition is
        a conjunction of inequalities linear in the lane, it holds for every lane exactly when it
        holds for the first and the last: then the guard is dropped and each select takes its
        true branch, in vector code; other iterations run the scalar loop.
        """
        body, conds = s.body, []
        if isinstance(body, IfThenElse) and body.orelse is None:
            conds.append(body.cond)
            body = body.then
        if not isinstance(body, Store):
            return None
        selects = [x for x in walk(body.value) if isinstance(x, Select) and s.var in free_vars(x.cond)]
        conds += [x.cond for x in selects]
        if not conds or not all(_linear_guard(c, s.var) for c in conds):
            return None
        fast = Store(body.buffer, body.index, transform(body.value, lambda x: x.t if isinstance(x, Select) and
                                                        s.var in free_vars(x.cond) else None))
        vec = self._vector_loop(For(s.var, s.extent, ForKind.VECTORIZE, fast), d + 1)
        if vec is None:
            return None
        ends = [arith.simplify(substitute(c, {s.var: Const(k, s.var.dtype)}), self._ranges)
                for c in conds for k in (0, s.extent - 1)]
        test = " && ".join(self._expr(e) for e in ends if not (isinstance(e, Const) and e.value)) or "1"
        self._ranges[s.var] = (0, s.extent - 1)
        scalar = self._for(For(s.var, s.extent, ForKind.SERIAL, s.body), d + 1)
        pad = "  " * d
        return (f"{pad}if ({test}) {{\n{vec}{pad}}} else {{\n"
                f"{pad}  #pragma omp simd\n{scalar}{pad}}}\n")

    def _vector_loop(self, s: For, d: int) -> str | None:
        stores = list(_flatten_stores(s.body, s.var))
        if s.extent not in VECTOR_LANES or stores is None or any(x is None for x in stores):
            return None
        out = []
        for cond, st in stores:
            dt = st.buffer.dtype
            if s.extent * DTYPE_BYTES[dt] > 256:
                return None
            idx = arith.linear(st.index)
            if var_in_atoms(idx, s.var):
                return None
            c = idx.coeff(s.var)
            base = self._expr(arith.simplify(lane_zero(st.index, s.var)))
            val = self._vexpr(st.value, s.var, s.extent)
            if val is None:
                return None
            code, is_vec = val
            vt = self._vtype(dt, s.extent)
            name = self._name(st.buffer)
            if c == 1:
                if not is_vec:
                    code = self._splat(code, dt, s.extent)
                line = f"*({vt}*)&{name}[{base}] = {code};"
            elif c != 0 and is_vec:
                lanes = " ".join(f"{name}[{base} + {c * k}] = _v[{k}];" for k in range(s.extent))
                line = f"{{ {vt} _v = {code}; {lanes} }}"
            else:
                return None
            out.append(f"if ({self._expr(cond)}) {line}" if cond is not None else line)
        pad = "  " * d
        self._ranges.pop(s.var, None)
        return f"{pad}/* {s.var.name}: {s.extent} lanes */\n" + "".join(f"{pad}{x}\n" for x in out)

    def _vtype(self, dtype: str, lanes: int) -> str:
        name = f"{SHORT[dtype]}x{lanes}"
        if name not in self._helpers:
            self._helpers[name] = (f"typedef {C_TYPES[dtype]} {name} __attribute__((vector_size({lanes * DTYPE_BYTES[dtype]}), "
                                   f"aligned({DTYPE_BYTES[dtype]})));")
        return name

    def _lanewise(self, key: str, vt: str, n_args: int, lanes: int, scalar_fmt: str, ret: str | None = None) -> str:
        """A helper applying a scalar C expression lane by lane (GCC vectorizes the loop)."""
        fn = f"{key}_{vt}"
        if fn not in self._helpers:
            rt = ret or vt
            params = ", ".join(f"{vt} a{k}" for k in range(n_args))
            expr = scalar_fmt.format(*[f"a{k}[l]" for k in range(n_args)])
            self._helpers[fn] = (f"{self.INLINE} {rt} {fn}({params}) {{ {rt} r; "
                                 f"for (int l = 0; l < {lanes}; ++l) r[l] = {expr}; return r; }}")
        return fn

    def _vexpr(self, e: Expr, v: Var, lanes: int) -> tuple[str, bool] | None:
        """C for `e` over all lanes of `v`: (code, is_vector), or None when not vectorizable."""
        if v not in free_vars(e):
            return (self._expr(e), False)
        vt = self._vtype(e.dtype, lanes)
        if e is v:  # the lane index itself (a mask comparing it: a chunk's lanes already counted)
            return ("((" + vt + "){" + ", ".join(str(k) for k in range(lanes)) + "})", True)
        if isinstance(e, Load):
            idx = arith.linear(e.indices[0])
            if var_in_atoms(idx, v):
                return self._permuted_load(e, v, lanes, vt)
            c, name = idx.coeff(v), self._name(e.source)
            base = self._expr(arith.simplify(lane_zero(e.indices[0], v)))
            if c == 1:
                return (f"(*({vt}*)&{name}[{base}])", True)
            return ("((" + vt + "){" + ", ".join(f"{name}[{base} + {c * k}]" for k in range(lanes)) + "})", True)
        if isinstance(e, Select):
            return self._vselect(e, v, lanes, vt)
        if isinstance(e, (BinOp, Call)) and e.dtype == "int32" and any(_is_dot4(x) for x in (e, *children(e))):
            return self._vdot(e, v, lanes, vt)
        kids = [self._vexpr(k, v, lanes) for k in children(e)]
        if not _all_present(kids):
            return None
        bc = [code if is_vec else self._splat(code, e.dtype if not isinstance(e, Cast) else e.value.dtype, lanes)
              for code, is_vec in kids]
        if isinstance(e, BinOp) and e.op in ("add", "sub", "mul", "div"):
            # C broadcasts a scalar operand itself, but not a _Float16 one where FP16 is not native
            a, b = bc if e.dtype == "float16" else (code for code, _ in kids)
            return (f"({a} {BINARY_OPS[e.op]} {b})", True)
        if isinstance(e, BinOp) and e.op in ("min", "max") and e.dtype in _MASK_DTYPE:
            mt = self._vtype(_MASK_DTYPE[e.dtype], lanes)
            fn = f"{e.op}_{vt}"
            self._helpers.setdefault(fn, vmath.minmax(e.op, vt, mt, e.dtype, lanes * DTYPE_BYTES[e.dtype]))
            return (f"{fn}({bc[0]}, {bc[1]})", True)
        if isinstance(e, BinOp) and e.op in ("min", "max"):
            fn = self._lanewise(e.op, vt, 2, lanes, "({0} " + ("<" if e.op == "min" else ">") + " {1} ? {0} : {1})")
            return (f"{fn}({bc[0]}, {bc[1]})", True)
        if isinstance(e, Call) and e.dtype == "float32" and e.name in vmath.FUNCTIONS:
            self._vtype("int32", lanes)
            for name, code in vmath.helpers(e.name, lanes):
                self._helpers.setdefault(name, code)
            return (f"{vmath.helper_name(e.name, vt)}({bc[0]})", True)
        if isinstance(e, Call) and is_float(e.dtype) and e.name in MATH:
            fmt = math_fmt(e.name, e.dtype)
            fn = self._lanewise(e.name, vt, len(bc), lanes, fmt)
            return (f"{fn}({', '.join(bc)})", True)
        if isinstance(e, Cast) and e.value.dtype in SHORT:
            code = bc[0]
            for step in _conversion_steps(e.value.dtype, e.dtype):
                code = f"__builtin_convertvector({code}, {self._vtype(step, lanes)})"
            return (code, True)
        return None

    def _vdot(self, e: BinOp | Call, v: Var, lanes: int, vt: str) -> tuple[str, bool] | None:
        """`acc + dot4(a, b)` (or dot4 alone) over all lanes: one vpdpbusd where the target has it."""
        acc: Expr
        product: Expr
        if isinstance(e, Call):
            acc, product = Const(0, "int32"), e
        elif e.op == "add":
            acc, product = (e.a, e.b) if _is_dot4(e.b) else (e.b, e.a)
        else:
            return None
        if not isinstance(product, Call) or not _is_dot4(product):
            return None
        parts = [self._vexpr(x, v, lanes) for x in (acc, *product.args)]
        if not _all_present(parts):
            return None
        ut = self._vtype("uint32", lanes)
        codes = [code if is_vec else self._splat(code, x.dtype, lanes) for (code, is_vec), x in zip(parts, (acc, *product.args))]
        self._helpers.setdefault(dot.SCALAR_NAME, dot.SCALAR)
        self._helpers.setdefault(dot.accumulate_name(vt), dot.accumulate(vt, ut, lanes, self.INLINE))
        return (f"{dot.accumulate_name(vt)}({', '.join(codes)})", True)

    def _permuted_load(self, e: Load, v: Var, lanes: int, vt: str) -> tuple[str, bool] | None:
        """A load whose lanes read elements of one aligned block of `lanes` in a fixed pattern:
        one vector load of the block and a shuffle, instead of a gather lane by lane. A
        convolution whose groups are narrower than the vector (ResNeXt's 4 channels per group
        in blocks of 16) reads lane l's input at l // 4 * 4 + j: the shuffle repeats element j
        of each group across the group's lanes. The block is the one holding lane 0's element,
        which the loop reads anyway, so the wider load stays in bounds when the buffer is whole
        blocks. The lanes' offsets from lane 0 must be constants, and the in-block remainder of
        lane 0's index, as far as its bounds are known, must keep every lane in the block."""
        mask_dtype = _MASK_DTYPE.get(e.dtype)
        if mask_dtype is None or e.source.size % lanes:
            return None
        index = e.indices[0]
        zero = arith.linear(lane_zero(index, v))
        offsets = []
        for k in range(lanes):
            d = arith.linear(substitute(index, {v: Const(k, v.dtype)})).plus(zero, -1)
            if not d.is_const():
                return None
            offsets.append(d.const)
        block, rest = zero.split_by(lanes)
        bound = arith.int_bound(rest.to_expr(), self._ranges)
        if bound is None or bound[0] + min(offsets) < 0 or bound[1] + max(offsets) >= lanes:
            return None
        start = self._expr(arith.simplify(block.scaled(lanes).to_expr()))
        mt = self._vtype(mask_dtype, lanes)
        mask = "(" + mt + "){" + ", ".join(str(o) for o in offsets) + "}"
        if bound[0] != bound[1]:
            mask = f"({mask} + ({C_TYPES[mask_dtype]})({self._expr(arith.simplify(rest.to_expr()))}))"
        elif bound[0]:
            mask = "(" + mt + "){" + ", ".join(str(o + bound[0]) for o in offsets) + "}"
        return (f"__builtin_shuffle(*({vt}*)&{self._name(e.source)}[{start}], {mask})", True)

    def _splat(self, code: str, dtype: str, lanes: int) -> str:
        """A scalar in every lane of a vector of `dtype`. A _Float16 scalar goes through a float
        vector: without native FP16 arithmetic (AVX2, Zen 4) gcc computes it in float and
        refuses to narrow that into a _Float16 vector."""
        vt = self._vtype(dtype, lanes)
        if dtype == "float16":
            return f"__builtin_convertvector((({self._vtype('float32', lanes)}){{0}} + (float)({code})), {vt})"
        return f"(({vt}){{0}} + ({code}))"

    def _vselect(self, e: Select, v: Var, lanes: int, vt: str) -> tuple[str, bool] | None:
        branches = [self._vexpr(x, v, lanes) for x in (e.t, e.f)]
        if not _all_present(branches):
            return None
        t, f = [code if is_vec else self._splat(code, e.dtype, lanes) for code, is_vec in branches]
        if v not in free_vars(e.cond):
            # one condition for all lanes: a C conditional evaluates only the taken branch, whose
            # loads may be out of bounds when it is not taken (padding, concatenation)
            return (f"({self._expr(e.cond)} ? {t} : {f})", True)
        # a per-lane condition evaluates both branches in every lane: only when no load can fault
        if not isinstance(e.cond, Cmp) or not self._loads_in_bounds(e):
            return None
        operands = [self._vexpr(x, v, lanes) for x in (e.cond.a, e.cond.b)]
        if not _all_present(operands):
            return None
        ct = self._vtype(e.cond.a.dtype, lanes)
        x, y = [code if is_vec else self._splat(code, e.cond.a.dtype, lanes) for code, is_vec in operands]
        fn = f"sel_{e.cond.op}_{SHORT[e.cond.a.dtype]}_{vt}"
        if fn not in self._helpers:
            self._helpers[fn] = (f"{self.INLINE} {vt} {fn}({ct} x, {ct} y, {vt} t, {vt} f) {{ {vt} r; "
                                 f"for (int l = 0; l < {lanes}; ++l) "
                                 f"r[l] = x[l] {COMPARISONS[e.cond.op]} y[l] ? t[l] : f[l]; return r; }}")
        return (f"{fn}({x}, {y}, {t}, {f})", True)

    def _loads_in_bounds(self, e: Expr) -> bool:
        for x in walk(e):
            if isinstance(x, Load):
                b = arith.int_bound(x.indices[0], self._ranges)
                if b is None or b[0] < 0 or b[1] >= x.source.size:
                    return False
        return True


def _is_dot4(e: Expr) -> bool:
    return isinstance(e, Call) and e.name == "dot4"


def _linear_guard(cond: Expr, v: Var) -> bool:
    """Whether `cond` is a conjunction of inequalities linear in `v` (so convex along it)."""
    if isinstance(cond, BinOp) and cond.op == "and":
        return _linear_guard(cond.a, v) and _linear_guard(cond.b, v)
    if isinstance(cond, Cmp) and cond.op in ("lt", "le", "gt", "ge"):
        return not any(var_in_atoms(arith.linear(x), v) for x in (cond.a, cond.b) if x.dtype in INT_DTYPES) \
            and all(x.dtype in INT_DTYPES for x in (cond.a, cond.b))
    return v not in free_vars(cond)


def _upper_bounds(cond: Expr, v: Var) -> tuple[list[Expr], Expr | None]:
    """The bounds B of the conjuncts of `cond` that read v < B (v with coefficient 1, as the
    edge tile of a split that does not divide: outer·f + v < extent), and the conjunction of the
    others (None if none). A loop over v then stops at the bound instead of testing every
    iteration: a 16-lane tail of 3 lanes runs 3 iterations, not 16 (a layout conversion of 19
    columns took half the time)."""
    if isinstance(cond, BinOp) and cond.op == "and":
        (ba, ra), (bb, rb) = _upper_bounds(cond.a, v), _upper_bounds(cond.b, v)
        rest = rb if ra is None else ra if rb is None else BinOp("and", ra, rb)
        return ba + bb, rest
    if isinstance(cond, Cmp) and cond.op in ("lt", "le", "gt", "ge") and all(
            x.dtype in INT_DTYPES for x in (cond.a, cond.b)):
        small, big = (cond.a, cond.b) if cond.op in ("lt", "le") else (cond.b, cond.a)
        gap = arith.linear(small).plus(arith.linear(big), -1)  # v + rest < 0 (≤ 0 for le, ge)
        if gap.coeff(v) == 1:
            others = gap.plus(arith.linear(v), -1)
            if not var_in_atoms(others, v):
                bound = others.scaled(-1)
                if cond.op in ("le", "ge"):
                    bound.const += 1
                return [bound.to_expr()], None
    return [], cond


def _flatten_stores(s: Stmt, v: Var):
    """(condition or None, Store) pairs of a vector loop body; None marks a shape we cannot vectorize."""
    if isinstance(s, Store):
        yield (None, s)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _flatten_stores(x, v)
    elif isinstance(s, IfThenElse) and s.orelse is None and isinstance(s.then, Store) and v not in free_vars(s.cond):
        yield (s.cond, s.then)
    else:
        yield None


T = TypeVar("T")


def _all_present(parts: list[T | None]) -> TypeGuard[list[T]]:
    """Whether every part vectorized (None marks one that did not), so the caller may unpack them."""
    return all(p is not None for p in parts)


__all__ = ["CRenderer"]
