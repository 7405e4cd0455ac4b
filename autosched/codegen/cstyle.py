"""What every back end printing C-family source shares: C types, names, statements, scalar
expressions, parameter declarations and the timing entry point.

The CPU renderer (`c.py`) adds vector-extension loops, OpenMP and heap temporaries; the GPU
renderers (`gpu.py`, `cuda.py`, `cuda_emulate.py`) add thread indices, shared memory and
barriers. Each says how a loop and an allocation are printed; the rest is printed here once,
so a fix to an expression reaches every back end.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from autosched.codegen import dot
from autosched.codegen.errors import CodegenError
from autosched.lower import arith
from autosched.lower.ir import MAY_ALIAS, Allocate, For, IfThenElse, Let, PrimFunc, Seq, Stmt, Store, walk_stmts
from autosched.te.expr import (
    INT_DTYPES,
    LIBM_UNARY,
    BinOp,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    Load,
    Select,
    Var,
    free_vars,
    is_float,
    substitute,
)

C_TYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "bool": "uint8_t",
           **{d: f"{d}_t" for d in INT_DTYPES}}
DTYPE_BYTES = {d: np.dtype(d).itemsize for d in C_TYPES}
SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "bool": "b8",
         **{d: d[0] + d.lstrip("uint") for d in INT_DTYPES}}
BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&&", "or": "||"}
COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
#: intrinsic -> C for float32 (libm "f" functions); float64 drops the suffix
MATH = {"exp": "expf({})", "log": "logf({})", "tanh": "tanhf({})", "erf": "erff({})", "sqrt": "sqrtf({})",
        "rsqrt": "(1.0f / sqrtf({}))", "sigmoid": "(1.0f / (1.0f + expf(-({}))))", "abs": "fabsf({})",
        "floor": "floorf({})", "ceil": "ceilf({})", "round": "nearbyintf({})", "neg": "(-({}))",
        "not": "(!({}))", "pow": "powf({}, {})", "sin": "sinf({})", "cos": "cosf({})",
        "fmod": "fmodf({}, {})", **{name: f"{name}f({{}})" for name in LIBM_UNARY},
        "bitand": "(({}) & ({}))", "bitor": "(({}) | ({}))", "bitxor": "(({}) ^ ({}))", "bitnot": "(~({}))",
        "shl": "(({}) << ({}))", "shr": "(({}) >> ({}))"}


class CStyleRenderer(ABC):
    """Renders the statements and scalar expressions of lowered kernels as C; subclasses print
    loops and allocations, and the translation unit around the kernels."""

    #: storage and linkage of generated helper functions (a GPU back end adds its device qualifier)
    INLINE = "static inline"
    #: helper functions the kernels call, by name: reset by each subclass's `render`
    _helpers: dict[str, str]

    @abstractmethod
    def render(self, func: PrimFunc) -> str:
        """The translation unit of one lowered kernel."""

    @staticmethod
    def symbol(func: PrimFunc) -> str:
        """The exported name of the rendered function."""
        return ident(func.name)

    def signature(self, func: PrimFunc, param_names: list[str] | None = None) -> str:
        """The C prototype of a rendered kernel (returning 0, or nonzero on failure)."""
        names = param_names or [self._name(b) for b in func.params]
        return f"int32_t {self.symbol(func)}({', '.join(param_decls(func, names))})"

    def _reset(self) -> None:
        """Forget the previous kernel's names and value ranges."""
        self._names: dict[int, str] = {}
        self._used: set[str] = set()
        self._ranges: dict = {}

    def _timing_entry(self, func: PrimFunc) -> str:
        """The kernel's `_time` entry point (see `timing_entry`), for builds run on the host."""
        return timing_entry(self.symbol(func), param_decls(func, [f"p{k}" for k in range(len(func.params))]))

    @abstractmethod
    def _for(self, s: For, d: int) -> str:
        """A loop, as the back end runs its kind (serial, parallel, unrolled, vectorized, thread)."""

    @abstractmethod
    def _allocate(self, s: Allocate, d: int) -> str:
        """A buffer's allocation in its scope, and the statements using it."""

    # --- names ----------------------------------------------------------------------------------
    def _name(self, obj) -> str:
        n = self._names.get(id(obj))
        if n is None:
            base = ident(obj.name)
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

    # --- scalar expressions ------------------------------------------------------------------------
    def _expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return const(e)
        if isinstance(e, Var):
            return self._name(e)
        if isinstance(e, Load):
            return f"{self._name(e.source)}[{self._expr(e.indices[0])}]"
        if isinstance(e, BinOp):
            a, b = self._expr(e.a), self._expr(e.b)
            if e.op in BINARY_OPS:
                return f"({a} {BINARY_OPS[e.op]} {b})"
            if e.op in ("min", "max"):
                fn = f"as_{e.op}_{SHORT[e.dtype]}"
                if fn not in self._helpers:
                    t = C_TYPES[e.dtype]
                    cmp = "<" if e.op == "min" else ">"
                    # _Float16 through fmaxf/fminf, not a select: gcc 12 spills a _Float16 select
                    # across a libm call as a zero-masked vmovsh store, which no assembler
                    # accepts (a NaN operand then yields the other one, as fmax does)
                    body = (f"return ({t})f{e.op}f(a, b);" if e.dtype == "float16" else f"return a {cmp} b ? a : b;")
                    self._helpers[fn] = f"{self.INLINE} {t} {fn}({t} a, {t} b) {{ {body} }}"
                return f"{fn}({a}, {b})"
            return self._divmod(e, a, b)
        if isinstance(e, Cmp):
            return f"({self._expr(e.a)} {COMPARISONS[e.op]} {self._expr(e.b)})"
        if isinstance(e, Select):
            return f"({self._expr(e.cond)} ? {self._expr(e.t)} : {self._expr(e.f)})"
        if isinstance(e, Call):
            word = dot.word_source(e) if e.name == "bitor" else None
            if word is not None:
                self._helpers.setdefault(dot.WORD_NAME, dot.WORD.replace("static inline", self.INLINE))
                return f"{dot.WORD_NAME}(&{self._expr(word)})"
            if e.name == "dot4":
                self._helpers.setdefault(dot.SCALAR_NAME, dot.SCALAR.replace("static inline", self.INLINE))
                return f"{dot.SCALAR_NAME}({self._expr(e.args[0])}, {self._expr(e.args[1])})"
            if e.name in ("neg", "not"):
                return MATH[e.name].format(self._expr(e.args[0]))
            return math_fmt(e.name, e.args[0].dtype).format(*[self._expr(a) for a in e.args])
        if isinstance(e, Cast):
            return f"(({C_TYPES[e.dtype]})({self._expr(e.value)}))"
        raise CodegenError(f"the C back end cannot print {type(e).__name__}")

    def _divmod(self, e: BinOp, a: str, b: str) -> str:
        """Floor division and modulo (the divisor's sign, as Python's %); plain C `/` and `%`
        where both integer sides are known non-negative."""
        if is_float(e.dtype) and e.op == "floordiv":
            return math_fmt("floor", e.dtype).format(f"{a} / {b}")
        ba, bb = arith.int_bound(e.a, self._ranges), arith.int_bound(e.b, self._ranges)
        if not is_float(e.dtype) and ba is not None and bb is not None and ba[0] >= 0 and bb[0] > 0:
            return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"
        t, s = C_TYPES[e.dtype], SHORT[e.dtype]
        fn = f"as_{e.op}_{s}"
        if fn not in self._helpers:
            remainder = math_fmt("fmod", e.dtype).format("a", "b") if is_float(e.dtype) else "a % b"
            body = ("{ T q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }" if e.op == "floordiv"
                    else f"{{ T r = {remainder}; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}")
            self._helpers[fn] = f"{self.INLINE} {t} {fn}({t} a, {t} b) " + body.replace("T ", f"{t} ")
        return f"{fn}({a}, {b})"


def param_decls(func: PrimFunc, names: list[str], restrict: str = "restrict") -> list[str]:
    """Parameter declarations; inputs are const, since the kernel never writes them. A kernel
    that runs in place somewhere (`MAY_ALIAS`) promises no `restrict`: its input and output
    are then one buffer."""
    written = {id(s.buffer) for s in walk_stmts(func.body) if isinstance(s, Store)}
    qualifier = "" if func.attrs.get(MAY_ALIAS) else f"{restrict} "
    return [f"{'' if id(b) in written else 'const '}{C_TYPES[b.dtype]}* {qualifier}{n}"
            for b, n in zip(func.params, names)]


def timing_entry(fname: str, params: list[str]) -> str:
    """`<fname>_time`: times the kernel inside C, so no Python call overhead lands in the costs.

    One calibration finds how many calls make a repeat last `min_repeat_ms`. With `flush_bytes`,
    every timed call instead follows the writing of that many bytes, so it starts with cold
    caches (TVM's cache flush; flushing once before many calls timed the rest warm); then the
    first `warm_bytes[k]` bytes of argument k are read back in (NULL: none), so that the
    activations a model's previous kernel left in cache are warm while its weights stay cold.
    A repeat is then the mean of such calls until they add up to `min_repeat_ms` (or the
    flushes make the repeat last five times that): one cold call alone is as noisy as the
    machine. The flush and the read-back run on the kernel's threads: done by one thread, they
    left the others asleep, and each cold call paid their wake-up (a 0.3 ms MobileNetV2 kernel
    timed at 6 ms), which a model's back-to-back kernels never pay.
    Timing stops early once a repeat costs more than `stop_above` seconds per call (a
    candidate far slower than the best so far). Returns the number of repeats written to
    `costs`, or -1 when the kernel failed.
    """
    args = ", ".join(f"p{k}" for k in range(len(params)))
    sig = ", ".join(params + ["int32_t repeat", "double min_repeat_ms", "int64_t flush_bytes",
                              "const int64_t* warm_bytes", "double stop_above", "double* costs"])
    pointers = ", ".join(f"(const unsigned char*)p{k}" for k in range(len(params)))
    return f"""static double autosched_now(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}

static volatile unsigned char autosched_sink;

int32_t {fname}_time({sig}) {{
  if ({fname}({args}) != 0) return -1;
  int64_t number = 1;
  while (flush_bytes <= 0) {{
    double t0 = autosched_now();
    for (int64_t i = 0; i < number; ++i) {fname}({args});
    double elapsed = autosched_now() - t0;
    if (elapsed * 1e3 >= min_repeat_ms || number >= (INT64_C(1) << 40)) break;
    number = elapsed > 0 ? (int64_t)(number * fmin(10.0, 1.2 * min_repeat_ms / (elapsed * 1e3))) + 1 : number * 10;
  }}
  volatile char* flush = flush_bytes > 0 ? (volatile char*)malloc((size_t)flush_bytes) : NULL;
  const unsigned char* args_[] = {{{pointers}}};
  int32_t done = 0;
  for (; done < repeat; ++done) {{
    if (flush == NULL) {{
      double t0 = autosched_now();
      for (int64_t i = 0; i < number; ++i) {fname}({args});
      costs[done] = (autosched_now() - t0) / (double)number;
    }} else {{
      double spent = 0.0, begin = autosched_now();
      int64_t calls = 0;
      do {{
        _Pragma("omp parallel for")
        for (int64_t i = 0; i < flush_bytes; i += 64) flush[i] += 1;
        unsigned char seen = 0;
        for (int a_ = 0; warm_bytes != NULL && a_ < {len(params)}; ++a_) {{
          const unsigned char* arg_ = args_[a_];
          _Pragma("omp parallel for reduction(^:seen)")
          for (int64_t i = 0; i < warm_bytes[a_]; i += 64) seen ^= arg_[i];
        }}
        autosched_sink = seen;
        double t0 = autosched_now();
        {fname}({args});
        spent += autosched_now() - t0;
        ++calls;
      }} while (spent * 1e3 < min_repeat_ms && (autosched_now() - begin) * 1e3 < 5.0 * min_repeat_ms);
      costs[done] = spent / (double)calls;
    }}
    if (stop_above > 0 && costs[done] > stop_above) {{ ++done; break; }}
  }}
  free((void*)flush);
  return done;
}}
"""


def math_fmt(name: str, dtype: str) -> str:
    """The C format of intrinsic `name` on `dtype` (libm's float functions, or their double twins)."""
    fmt = MATH[name]
    if dtype == "float64":
        fmt = fmt.replace("f(", "(").replace("1.0f", "1.0")
    return fmt


def const(e: Const) -> str:
    """A C literal of the constant's own type (a float32 literal is suffixed, or it would be a
    double)."""
    v = e.value
    if e.dtype == "bool":
        return "1" if v else "0"
    if is_float(e.dtype):
        if math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        elif math.isnan(v):
            text = "NAN"
        else:
            text = repr(float(v)) + ("f" if e.dtype != "float64" else "")
        # a half-precision constant is cast: gcc refuses to broadcast a float into a _Float16 vector
        return f"(({C_TYPES['float16']}){text})" if e.dtype == "float16" else text
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


def ident(name: str) -> str:
    """A C identifier for a user's name: keywords and the function's own locals get a suffix."""
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    out = out if out and not out[0].isdigit() else "_" + out
    return out + "_" if out in _C_RESERVED else out


def lane_zero(index: Expr, v: Var) -> Expr:
    """The index with the lane variable set to 0: the address of lane 0."""
    return substitute(index, {v: Const(0, v.dtype)})


def var_in_atoms(lin: arith.Linear, v: Var) -> bool:
    """Whether `v` hides inside a non-linear atom of `lin` (a division, a modulo): then lanes of
    `v` are not evenly spaced, however its own coefficient reads."""
    return any(v in free_vars(atom) and atom is not v for _, atom in lin.terms.values())


__all__ = ["BINARY_OPS", "COMPARISONS", "CStyleRenderer", "C_TYPES", "DTYPE_BYTES", "MATH", "SHORT", "const", "ident",
           "lane_zero", "math_fmt", "param_decls", "timing_entry", "var_in_atoms"]
