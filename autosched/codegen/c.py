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

import math

from autosched.codegen import vmath
from autosched.codegen.errors import CodegenError
from autosched.lower import arith
from autosched.lower.ir import Allocate, Barrier, For, IfThenElse, Let, PrimFunc, Seq, Stmt, Store, walk_stmts
import numpy as np

from autosched.te.expr import (
    INT_DTYPES, BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Var, children, is_float, substitute, transform,
    walk,
)

C_TYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "bool": "uint8_t",
           **{d: f"{d}_t" for d in INT_DTYPES}}
DTYPE_BYTES = {d: np.dtype(d).itemsize for d in C_TYPES}
SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bool": "b8",
         **{d: d[0] + d.lstrip("uint") for d in INT_DTYPES}}
_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&&", "or": "||"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
#: intrinsic -> C for float32 (libm "f" functions); float64 drops the suffix
_MATH = {"exp": "expf({})", "log": "logf({})", "tanh": "tanhf({})", "erf": "erff({})", "sqrt": "sqrtf({})",
         "rsqrt": "(1.0f / sqrtf({}))", "sigmoid": "(1.0f / (1.0f + expf(-({}))))", "abs": "fabsf({})",
         "floor": "floorf({})", "ceil": "ceilf({})", "round": "nearbyintf({})", "neg": "(-({}))",
         "not": "(!({}))", "pow": "powf({}, {})"}
#: dtype -> the signed integer dtype of its width: the lane type of its comparison masks
_MASK_DTYPE = {"float32": "int32", "float64": "int64", "int8": "int8", "int16": "int16", "int32": "int32",
               "int64": "int64", "uint8": "int8", "uint16": "int16", "uint32": "int32", "uint64": "int64"}
#: heap-allocate local buffers above this size: thread stacks are small
STACK_LIMIT_BYTES = 256 * 1024
VECTOR_LANES = (2, 4, 8, 16, 32, 64)


class CRenderer:
    """Renders one PrimFunc as a self-contained C translation unit."""

    capabilities = {"threads": False, "shared_memory": False}
    #: storage and linkage of generated helper functions (a GPU back end adds its device qualifier)
    INLINE = "static inline"
    #: vector exp/erf/sigmoid from autosched.codegen.vmath rather than libm lane by lane, and
    #: min/max as vector compare-and-blend: GCC vector-extension code, for CPU renderers only
    VECTOR_MATH = True

    @staticmethod
    def symbol(func: PrimFunc) -> str:
        """The exported name of the rendered function."""
        return _ident(func.name)

    def render(self, func: PrimFunc) -> str:
        """A translation unit for one kernel, with its timing entry point (what tuning builds)."""
        return self.render_module([func], timers=True)

    def render_module(self, funcs: list[PrimFunc], timers: bool = False, tail: str = "") -> str:
        """One translation unit holding several kernels (what a whole-model build links).

        `tail` is appended C that may call the kernels (the model's graph executor).
        """
        self._helpers: dict[str, str] = {}
        bodies = [self._function(f, timers) for f in funcs]
        head = ["#include <math.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <time.h>",
                "#include <omp.h>", ""]
        return "\n".join(head + list(self._helpers.values()) + [""] + bodies + [
            "void autosched_set_num_threads(int32_t n) { omp_set_num_threads(n); }", "", tail])

    def signature(self, func: PrimFunc, param_names: list[str] | None = None) -> str:
        """The C prototype of a rendered kernel."""
        names = param_names or [self._name(b) for b in func.params]
        return f"int32_t {self.symbol(func)}({', '.join(_param_decls(func, names))})"

    def _function(self, func: PrimFunc, timer: bool) -> str:
        self._names: dict[int, str] = {}
        self._used: set[str] = set()
        self._ranges: dict = {}
        self._check(func)
        sig = self.signature(func)
        body = self._stmt(func.body, 1)
        lines = ["/* Returns 0, or 1 when a temporary buffer could not be allocated. */", sig + " {",
                 "  int32_t status = 0;", body.rstrip("\n"), "  return status;", "}", ""]
        if timer:
            lines.append(_timer(self.symbol(func), _param_decls(func, [f"p{k}" for k in range(len(func.params))])))
        return "\n".join(lines)

    # --- checks -------------------------------------------------------------------------------
    def _check(self, func: PrimFunc) -> None:
        for s in walk_stmts(func.body):
            if isinstance(s, For) and s.kind == "thread":
                raise CodegenError(f"{func.name}: loop {s.var.name} is bound to {s.thread}; "
                                   "the C back end has no GPU threads (use target cuda)")
            if isinstance(s, Allocate) and s.buffer.scope == "shared":
                raise CodegenError(f"{func.name}: buffer {s.buffer.name} is in shared memory; "
                                   "the C back end has none (use target cuda)")
            if isinstance(s, Barrier):
                raise CodegenError(f"{func.name}: barriers need GPU threads; the C back end has none")

    # --- names ----------------------------------------------------------------------------------
    def _name(self, obj) -> str:
        n = self._names.get(id(obj))
        if n is None:
            base = _ident(obj.name)
            n, k = base, 1
            while n in self._used:
                n, k = f"{base}_{k}", k + 1
            self._used.add(n)
            self._names[id(obj)] = n
        return n

    # --- statements -------------------------------------------------------------------------------
    def _stmt(self, s: Stmt, d: int) -> str:
        pad = "  " * d
        if isinstance(s, Seq):
            return "".join(self._stmt(x, d) for x in s.stmts)
        if isinstance(s, For):
            return self._for(s, d)
        if isinstance(s, Store):
            return f"{pad}{self._name(s.buffer)}[{self._expr(s.index)}] = {self._expr(s.value)};\n"
        if isinstance(s, IfThenElse):
            out = f"{pad}if ({self._expr(s.cond)}) {{\n{self._stmt(s.then, d + 1)}{pad}}}"
            if s.orelse is not None:
                out += f" else {{\n{self._stmt(s.orelse, d + 1)}{pad}}}"
            return out + "\n"
        if isinstance(s, Let):
            b = arith.int_bound(s.value, self._ranges)
            if b is not None:
                self._ranges[s.var] = b
            return f"{pad}const {C_TYPES[s.var.dtype]} {self._name(s.var)} = {self._expr(s.value)};\n" + self._stmt(s.body, d)
        if isinstance(s, Allocate):
            return self._allocate(s, d)
        raise CodegenError(f"the C back end cannot print {type(s).__name__}")

    def _allocate(self, s: Allocate, d: int) -> str:
        pad, b = "  " * d, s.buffer
        t, name = C_TYPES[b.dtype], self._name(b)
        nbytes = b.size * DTYPE_BYTES[b.dtype]
        if b.scope == "local" and nbytes <= STACK_LIMIT_BYTES:
            return f"{pad}{t} {name}[{b.size}] __attribute__((aligned(64)));\n" + self._stmt(s.body, d)
        rounded = max(64, -(-nbytes // 64) * 64)
        return (f"{pad}{{\n{pad}  {t}* restrict {name} = ({t}*)aligned_alloc(64, {rounded});\n"
                f"{pad}  if ({name} == NULL) {{ status = 1; }} else {{\n"
                f"{self._stmt(s.body, d + 2)}{pad}  free({name});\n{pad}  }}\n{pad}}}\n")

    def _for(self, s: For, d: int) -> str:
        pad = "  " * d
        v = self._name(s.var)
        self._ranges[s.var] = (0, s.extent - 1)
        if s.kind == "vectorize":
            vec = self._vector_loop(s, d) or self._versioned_vector_loop(s, d)
            if vec is not None:
                return vec
        head = {"parallel": f"{pad}#pragma omp parallel for\n", "unroll": f"{pad}#pragma GCC unroll {s.extent}\n",
                "vectorize": f"{pad}#pragma omp simd\n"}.get(s.kind, "")
        return (f"{head}{pad}for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{\n"
                f"{self._stmt(s.body, d + 1)}{pad}}}\n")

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
        selects = [x for x in walk(body.value) if isinstance(x, Select) and s.var in _free(x.cond)]
        conds += [x.cond for x in selects]
        if not conds or not all(_linear_guard(c, s.var) for c in conds):
            return None
        fast = Store(body.buffer, body.index, transform(body.value, lambda x: x.t if isinstance(x, Select) and
                                                        s.var in _free(x.cond) else None))
        vec = self._vector_loop(For(s.var, s.extent, "vectorize", fast), d + 1)
        if vec is None:
            return None
        ends = [arith.simplify(substitute(c, {s.var: Const(k, s.var.dtype)}), self._ranges)
                for c in conds for k in (0, s.extent - 1)]
        test = " && ".join(self._expr(e) for e in ends if not (isinstance(e, Const) and e.value)) or "1"
        self._ranges[s.var] = (0, s.extent - 1)
        scalar = self._for(For(s.var, s.extent, "serial", s.body), d + 1)
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
            if _has_var_in_atoms(idx, s.var):
                return None
            c = idx.coeff(s.var)
            base = self._expr(arith.simplify(_without(st.index, s.var)))
            val = self._vexpr(st.value, s.var, s.extent)
            if val is None:
                return None
            code, is_vec = val
            vt = self._vtype(dt, s.extent)
            name = self._name(st.buffer)
            if c == 1:
                if not is_vec:
                    code = f"(({vt}){{0}} + ({code}))"
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
        if v not in _free(e):
            return (self._expr(e), False)
        vt = self._vtype(e.dtype, lanes)
        if isinstance(e, Load):
            idx = arith.linear(e.indices[0])
            if _has_var_in_atoms(idx, v):
                return None
            c, name = idx.coeff(v), self._name(e.source)
            base = self._expr(arith.simplify(_without(e.indices[0], v)))
            if c == 1:
                return (f"(*({vt}*)&{name}[{base}])", True)
            return ("((" + vt + "){" + ", ".join(f"{name}[{base} + {c * k}]" for k in range(lanes)) + "})", True)
        if isinstance(e, Select):
            return self._vselect(e, v, lanes, vt)
        kids = [self._vexpr(k, v, lanes) for k in children(e)]
        if any(k is None for k in kids):
            return None
        if isinstance(e, BinOp) and e.op in ("add", "sub", "mul", "div"):
            (a, _), (b, _) = kids
            return (f"({a} {_BIN[e.op]} {b})", True)
        bc = [code if is_vec else f"(({vt}){{0}} + ({code}))" for code, is_vec in kids]
        if isinstance(e, BinOp) and e.op in ("min", "max") and e.dtype in _MASK_DTYPE and self.VECTOR_MATH:
            # compare and blend in vector types: gcc leaves a lane-by-lane ?: loop scalar
            mt = self._vtype(_MASK_DTYPE[e.dtype], lanes)
            fn = f"{e.op}_{vt}"
            if fn not in self._helpers:
                cmp = "<" if e.op == "min" else ">"
                self._helpers[fn] = (f"{self.INLINE} {vt} {fn}({vt} a, {vt} b) {{ {mt} m = ({mt})(a {cmp} b); "
                                     f"return ({vt})((m & ({mt})a) | (~m & ({mt})b)); }}")
            return (f"{fn}({bc[0]}, {bc[1]})", True)
        if isinstance(e, BinOp) and e.op in ("min", "max"):
            fn = self._lanewise(e.op, vt, 2, lanes, "({0} " + ("<" if e.op == "min" else ">") + " {1} ? {0} : {1})")
            return (f"{fn}({bc[0]}, {bc[1]})", True)
        if isinstance(e, Call) and e.dtype == "float32" and e.name in vmath.FUNCTIONS and self.VECTOR_MATH:
            it = self._vtype("int32", lanes)
            for name, code in vmath.helpers(e.name, vt, it):
                self._helpers.setdefault(name, code)
            return (f"{vmath.helper_name(e.name, vt)}({bc[0]})", True)
        if isinstance(e, Call) and is_float(e.dtype) and e.name in _MATH:
            fmt = _math_fmt(e.name, e.dtype)
            fn = self._lanewise(e.name, vt, len(bc), lanes, fmt)
            return (f"{fn}({', '.join(bc)})", True)
        if isinstance(e, Cast) and e.value.dtype in SHORT:
            return (f"__builtin_convertvector({bc[0]}, {vt})", True)
        return None

    def _vselect(self, e: Select, v: Var, lanes: int, vt: str) -> tuple[str, bool] | None:
        branches = [self._vexpr(x, v, lanes) for x in (e.t, e.f)]
        if any(b is None for b in branches):
            return None
        t, f = [code if is_vec else f"(({vt}){{0}} + ({code}))" for code, is_vec in branches]
        if v not in _free(e.cond):
            # one condition for all lanes: a C conditional evaluates only the taken branch, whose
            # loads may be out of bounds when it is not taken (padding, concatenation)
            return (f"({self._expr(e.cond)} ? {t} : {f})", True)
        # a per-lane condition evaluates both branches in every lane: only when no load can fault
        if not isinstance(e.cond, Cmp) or not self._loads_in_bounds(e):
            return None
        operands = [self._vexpr(x, v, lanes) for x in (e.cond.a, e.cond.b)]
        if any(o is None for o in operands):
            return None
        ct = self._vtype(e.cond.a.dtype, lanes)
        x, y = [code if is_vec else f"(({ct}){{0}} + ({code}))" for code, is_vec in operands]
        fn = f"sel_{e.cond.op}_{SHORT[e.cond.a.dtype]}_{vt}"
        if fn not in self._helpers:
            self._helpers[fn] = (f"{self.INLINE} {vt} {fn}({ct} x, {ct} y, {vt} t, {vt} f) {{ {vt} r; "
                                 f"for (int l = 0; l < {lanes}; ++l) r[l] = x[l] {_CMP[e.cond.op]} y[l] ? t[l] : f[l]; "
                                 "return r; }")
        return (f"{fn}({x}, {y}, {t}, {f})", True)

    def _loads_in_bounds(self, e: Expr) -> bool:
        for x in walk(e):
            if isinstance(x, Load):
                b = arith.int_bound(x.indices[0], self._ranges)
                if b is None or b[0] < 0 or b[1] >= x.source.size:
                    return False
        return True

    # --- scalar expressions ------------------------------------------------------------------------
    def _expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return _const(e)
        if isinstance(e, Var):
            return self._name(e)
        if isinstance(e, Load):
            return f"{self._name(e.source)}[{self._expr(e.indices[0])}]"
        if isinstance(e, BinOp):
            a, b = self._expr(e.a), self._expr(e.b)
            if e.op in _BIN:
                return f"({a} {_BIN[e.op]} {b})"
            if e.op in ("min", "max"):
                fn = f"as_{e.op}_{SHORT[e.dtype]}"
                if fn not in self._helpers:
                    t = C_TYPES[e.dtype]
                    cmp = "<" if e.op == "min" else ">"
                    self._helpers[fn] = f"{self.INLINE} {t} {fn}({t} a, {t} b) {{ return a {cmp} b ? a : b; }}"
                return f"{fn}({a}, {b})"
            return self._divmod(e, a, b)
        if isinstance(e, Cmp):
            return f"({self._expr(e.a)} {_CMP[e.op]} {self._expr(e.b)})"
        if isinstance(e, Select):
            return f"({self._expr(e.cond)} ? {self._expr(e.t)} : {self._expr(e.f)})"
        if isinstance(e, Call):
            if e.name in ("neg", "not"):
                return _MATH[e.name].format(self._expr(e.args[0]))
            return _math_fmt(e.name, e.args[0].dtype).format(*[self._expr(a) for a in e.args])
        if isinstance(e, Cast):
            return f"(({C_TYPES[e.dtype]})({self._expr(e.value)}))"
        raise CodegenError(f"the C back end cannot print {type(e).__name__}")

    def _divmod(self, e: BinOp, a: str, b: str) -> str:
        """Floor division and modulo; plain C `/` and `%` where both sides are known non-negative."""
        if is_float(e.dtype):
            return f"floorf({a} / {b})" if e.op == "floordiv" else f"fmodf({a}, {b})"
        ba, bb = arith.int_bound(e.a, self._ranges), arith.int_bound(e.b, self._ranges)
        if ba is not None and bb is not None and ba[0] >= 0 and bb[0] > 0:
            return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"
        t, s = C_TYPES[e.dtype], SHORT[e.dtype]
        fn = f"as_{e.op}_{s}"
        if fn not in self._helpers:
            body = ("{ T q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }" if e.op == "floordiv"
                    else "{ T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }")
            self._helpers[fn] = f"{self.INLINE} {t} {fn}({t} a, {t} b) " + body.replace("T ", f"{t} ")
        return f"{fn}({a}, {b})"


def _param_decls(func: PrimFunc, names: list[str], restrict: str = "restrict") -> list[str]:
    """Parameter declarations; inputs are const, since the kernel never writes them."""
    written = {id(s.buffer) for s in walk_stmts(func.body) if isinstance(s, Store)}
    return [f"{'' if id(b) in written else 'const '}{C_TYPES[b.dtype]}* {restrict} {n}"
            for b, n in zip(func.params, names)]


def _timer(fname: str, params: list[str]) -> str:
    """`<fname>_time`: times the kernel inside C, so no Python call overhead lands in the costs.

    One calibration finds how many calls make a repeat last `min_repeat_ms`; each repeat may
    first evict the caches by writing `flush_bytes`; timing stops early once a repeat costs more
    than `stop_above` seconds per call (a candidate far slower than the best so far). Returns
    the number of repeats written to `costs`, or -1 when the kernel failed.
    """
    args = ", ".join(f"p{k}" for k in range(len(params)))
    sig = ", ".join(params + ["int32_t repeat", "double min_repeat_ms", "int64_t flush_bytes",
                              "double stop_above", "double* costs"])
    return f"""static double autosched_now(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}

int32_t {fname}_time({sig}) {{
  if ({fname}({args}) != 0) return -1;
  int64_t number = 1;
  for (;;) {{
    double t0 = autosched_now();
    for (int64_t i = 0; i < number; ++i) {fname}({args});
    double elapsed = autosched_now() - t0;
    if (elapsed * 1e3 >= min_repeat_ms || number >= (INT64_C(1) << 40)) break;
    number = elapsed > 0 ? (int64_t)(number * fmin(10.0, 1.2 * min_repeat_ms / (elapsed * 1e3))) + 1 : number * 10;
  }}
  volatile char* flush = flush_bytes > 0 ? (volatile char*)malloc((size_t)flush_bytes) : NULL;
  int32_t done = 0;
  for (; done < repeat; ++done) {{
    if (flush != NULL) for (int64_t i = 0; i < flush_bytes; i += 64) flush[i] += 1;
    double t0 = autosched_now();
    for (int64_t i = 0; i < number; ++i) {fname}({args});
    costs[done] = (autosched_now() - t0) / (double)number;
    if (stop_above > 0 && costs[done] > stop_above) {{ ++done; break; }}
  }}
  free((void*)flush);
  return done;
}}
"""


def _math_fmt(name: str, dtype: str) -> str:
    fmt = _MATH[name]
    if dtype == "float64":
        fmt = fmt.replace("f(", "(").replace("1.0f", "1.0")
    return fmt


def _const(e: Const) -> str:
    v = e.value
    if e.dtype == "bool":
        return "1" if v else "0"
    if is_float(e.dtype):
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        if math.isnan(v):
            return "NAN"
        text = repr(float(v))
        return text + ("f" if e.dtype != "float64" else "")
    if e.dtype == "int64":
        return f"INT64_C({int(v)})"
    return str(int(v))


_C_RESERVED = set("""auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
while status l r""".split())
# functions of the included headers: a kernel named `abs` or `exp` would redeclare them, and a
# buffer named `sqrt` would hide the function from a float64 kernel's body
_LIBM = """exp exp2 expm1 log log2 log10 log1p pow sqrt cbrt hypot sin cos tan asin acos atan atan2 sinh cosh
tanh asinh acosh atanh erf erfc lgamma tgamma fabs floor ceil round trunc nearbyint rint fmod fmin fmax fma""".split()
_C_RESERVED |= set(_LIBM) | {f + "f" for f in _LIBM} | set("abs labs div free malloc calloc realloc aligned_alloc exit "
                                                             "rand time clock".split())


def _ident(name: str) -> str:
    """A C identifier for a user's name: keywords and the function's own locals get a suffix."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    out = out if out and not out[0].isdigit() else "_" + out
    return out + "_" if out in _C_RESERVED else out


def _free(e: Expr) -> set:
    return {x for x in walk(e) if isinstance(x, Var)}


def _without(index: Expr, v: Var) -> Expr:
    """The index with the lane variable set to 0: the address of lane 0."""
    return substitute(index, {v: Const(0, v.dtype)})


def _has_var_in_atoms(lin: arith.Linear, v: Var) -> bool:
    return any(v in _free(atom) and atom is not v for _, atom in lin.terms.values())


def _linear_guard(cond: Expr, v: Var) -> bool:
    """Whether `cond` is a conjunction of inequalities linear in `v` (so convex along it)."""
    if isinstance(cond, BinOp) and cond.op == "and":
        return _linear_guard(cond.a, v) and _linear_guard(cond.b, v)
    if isinstance(cond, Cmp) and cond.op in ("lt", "le", "gt", "ge"):
        return not any(_has_var_in_atoms(arith.linear(x), v) for x in (cond.a, cond.b) if x.dtype in INT_DTYPES) \
            and all(x.dtype in INT_DTYPES for x in (cond.a, cond.b))
    return v not in _free(cond)


def _flatten_stores(s: Stmt, v: Var):
    """(condition or None, Store) pairs of a vector loop body; None marks a shape we cannot vectorize."""
    if isinstance(s, Store):
        yield (None, s)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from _flatten_stores(x, v)
    elif isinstance(s, IfThenElse) and s.orelse is None and isinstance(s.then, Store) and v not in _free(s.cond):
        yield (s.cond, s.then)
    else:
        yield None


__all__ = ["CRenderer", "C_TYPES"]
