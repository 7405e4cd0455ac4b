"""Scalar expressions: the one vocabulary shared by tensor expressions, lowering and code generation.

Nodes are immutable and compared by identity; `Expr.key()` gives a structural key where two
expressions must be recognised as the same (the simplifier cancels terms with it).
Every node carries its dtype, so index arithmetic (int32/int64) and data (float32, later
float16) never mix silently.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
LOGIC_OPS = ("and", "or")
CMP_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
#: trigonometric and hyperbolic functions the back ends call from their math library (each a
#: one-argument intrinsic of the same name): rare in models, so never a vector routine of ours
LIBM_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
#: math intrinsics: name -> number of arguments
INTRINSICS = {
    "exp": 1, "log": 1, "tanh": 1, "erf": 1, "sqrt": 1, "rsqrt": 1, "sigmoid": 1,
    "abs": 1, "floor": 1, "ceil": 1, "round": 1, "neg": 1, "not": 1, "pow": 2, "sin": 1, "cos": 1, "fmod": 2,
    **{name: 1 for name in LIBM_UNARY},
    **{name: 2 for name in ("bitand", "bitor", "bitxor", "shl", "shr")}, "bitnot": 1,  # integers' bits
    "dot4": 2,  # int8 products four at a time (`dot4`)
}
#: intrinsics whose result is not of their first argument's dtype
_RESULT_DTYPES = {"not": "bool", "dot4": "int32"}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def promote(a: str, b: str) -> str:
    """The dtype of a binary op's result (float beats int, wider beats narrower)."""
    if a == b:
        return a
    order = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
             "float64")
    return a if order.index(a) >= order.index(b) else b


class Expr:
    """Base of all scalar expressions; Python operators build nodes."""

    dtype: str

    def key(self) -> tuple:
        raise NotImplementedError(type(self).__name__)

    # arithmetic
    def __add__(self, o): return binop("add", self, o)
    def __radd__(self, o): return binop("add", o, self)
    def __sub__(self, o): return binop("sub", self, o)
    def __rsub__(self, o): return binop("sub", o, self)
    def __mul__(self, o): return binop("mul", self, o)
    def __rmul__(self, o): return binop("mul", o, self)
    def __truediv__(self, o): return binop("div", self, o)
    def __rtruediv__(self, o): return binop("div", o, self)
    def __floordiv__(self, o): return binop("floordiv", self, o)
    def __rfloordiv__(self, o): return binop("floordiv", o, self)
    def __mod__(self, o): return binop("floormod", self, o)
    def __rmod__(self, o): return binop("floormod", o, self)
    def __neg__(self): return call("neg", self)
    # comparisons (== stays identity: nodes live in dicts and sets)
    def __lt__(self, o): return Cmp("lt", self, as_expr(o, self.dtype))
    def __le__(self, o): return Cmp("le", self, as_expr(o, self.dtype))
    def __gt__(self, o): return Cmp("gt", self, as_expr(o, self.dtype))
    def __ge__(self, o): return Cmp("ge", self, as_expr(o, self.dtype))
    def equal(self, o) -> Cmp: return Cmp("eq", self, as_expr(o, self.dtype))
    def __and__(self, o): return BinOp("and", self, as_expr(o, "bool"))
    def __or__(self, o): return BinOp("or", self, as_expr(o, "bool"))
    def __bool__(self):
        raise TypeError("an Expr has no truth value; use te.select / te.if_then_else for conditions")
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        from autosched.te.printer import expr_str
        return expr_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    value: Any
    dtype: str

    def key(self) -> tuple:
        return ("c", self.value, self.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    name: str
    dtype: str = "int32"

    def key(self) -> tuple:
        return ("v", id(self))


@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = field(init=False)

    def __post_init__(self):
        if self.op not in ARITH_OPS + LOGIC_OPS:
            raise ValueError(f"unknown binary op {self.op!r}")
        object.__setattr__(self, "dtype", "bool" if self.op in LOGIC_OPS else promote(self.a.dtype, self.b.dtype))

    def key(self) -> tuple:
        return (self.op, self.a.key(), self.b.key())


@dataclass(frozen=True, eq=False, repr=False)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = field(init=False, default="bool")

    def key(self) -> tuple:
        return (self.op, self.a.key(), self.b.key())


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    cond: Expr
    t: Expr
    f: Expr
    dtype: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "dtype", promote(self.t.dtype, self.f.dtype))

    def key(self) -> tuple:
        return ("select", self.cond.key(), self.t.key(), self.f.key())


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    name: str
    args: tuple
    dtype: str

    def key(self) -> tuple:
        return ("call", self.name) + tuple(a.key() for a in self.args)


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr

    def key(self) -> tuple:
        return ("cast", self.dtype, self.value.key())


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """A read of a tensor (te level, multi-dimensional) or of a buffer (lowered, one flat index)."""
    source: Any  # te.Tensor before lowering, lower.ir.Buffer after
    indices: tuple
    dtype: str

    def key(self) -> tuple:
        return ("load", id(self.source)) + tuple(i.key() for i in self.indices)


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """A commutative reduction of `source` over `axes` (IterVars of kind reduce)."""
    combiner: str  # "sum" | "prod" | "max" | "min"
    source: Expr
    axes: tuple
    dtype: str

    def key(self) -> tuple:
        return ("reduce", self.combiner, self.source.key()) + tuple(id(a) for a in self.axes)

    def identity(self) -> Const:
        if self.combiner in ("sum", "prod"):
            unit = int(self.combiner == "prod")
            return Const(float(unit) if is_float(self.dtype) else unit, self.dtype)
        if self.dtype == "bool":
            return Const(self.combiner == "min", "bool")
        if is_float(self.dtype):
            return Const(-math.inf if self.combiner == "max" else math.inf, self.dtype)
        info = np.iinfo(self.dtype)
        return Const(int(info.min if self.combiner == "max" else info.max), self.dtype)


def as_expr(x: Any, dtype_hint: str | None = None) -> Expr:
    """Python numbers become constants of the dtype of the other operand."""
    if isinstance(x, Expr):
        return x
    if hasattr(x, "__expr__"):
        return x.__expr__()
    if isinstance(x, bool):
        return Const(x, "bool")
    if isinstance(x, int):
        return Const(x, dtype_hint if dtype_hint and dtype_hint != "bool" else "int32")
    if isinstance(x, float):
        return Const(x, dtype_hint if dtype_hint and is_float(dtype_hint) else "float32")
    raise TypeError(f"cannot turn {type(x).__name__} {x!r} into an expression")


def binop(op: str, a: Any, b: Any) -> Expr:
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    if op == "div" and not is_float(promote(a.dtype, b.dtype)):
        raise TypeError("'/' on integers is ambiguous; use // (floor division)")
    return BinOp(op, a, b)


def call(name: str, *args: Any) -> Call:
    if name not in INTRINSICS or INTRINSICS[name] != len(args):
        raise ValueError(f"unknown intrinsic {name} with {len(args)} arguments")
    exprs = [as_expr(a) for a in args]
    return Call(name, tuple(exprs), _RESULT_DTYPES.get(name, exprs[0].dtype))


def const(value: Any, dtype: str = "float32") -> Const:
    return Const(int(value) if dtype in INT_DTYPES else (bool(value) if dtype == "bool" else float(value)), dtype)


def const_value(e: Expr) -> Any:
    """The Python value of a constant, or None."""
    return e.value if isinstance(e, Const) else None


def children(e: Expr) -> Sequence[Expr]:
    if isinstance(e, (BinOp, Cmp)):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,)
    return ()


def rebuild(e: Expr, new: Sequence[Expr]) -> Expr:
    """`e` with its children replaced (same node when nothing changed)."""
    if all(n is o for n, o in zip(new, children(e))):
        return e
    if isinstance(e, BinOp):
        return BinOp(e.op, *new)
    if isinstance(e, Cmp):
        return Cmp(e.op, *new)
    if isinstance(e, Select):
        return Select(*new)
    if isinstance(e, Call):
        return Call(e.name, tuple(new), e.dtype)
    if isinstance(e, Cast):
        return Cast(e.dtype, new[0])
    if isinstance(e, Load):
        return Load(e.source, tuple(new), e.dtype)
    if isinstance(e, Reduce):
        return Reduce(e.combiner, new[0], e.axes, e.dtype)
    raise TypeError(type(e).__name__)


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Post-order rewrite: `fn` sees each node after its children were rewritten; None keeps it."""
    memo: dict[int, Expr] = {}

    def go(x: Expr) -> Expr:
        hit = memo.get(id(x))
        if hit is not None:
            return hit
        y = rebuild(x, [go(c) for c in children(x)])
        out = fn(y)
        memo[id(x)] = y if out is None else out
        return memo[id(x)]

    return go(e)


def walk(e: Expr):
    """Every node of `e`, pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(children(x))


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace Vars (keyed by the Var object) with expressions."""
    if not mapping:
        return e
    return transform(e, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def free_vars(e: Expr) -> set[Var]:
    """The variables `e` reads: which loops (or lets) an index or a guard depends on."""
    return {x for x in walk(e) if isinstance(x, Var)}


# --- the user-facing math vocabulary -------------------------------------------------------

def exp(x): return call("exp", x)
def log(x): return call("log", x)
def tanh(x): return call("tanh", x)
def erf(x): return call("erf", x)
def sin(x): return call("sin", x)
def fmod(x, y): return call("fmod", x, as_expr(y, as_expr(x).dtype))  # C's: the sign of x
def cos(x): return call("cos", x)
def sqrt(x): return call("sqrt", x)
def rsqrt(x): return call("rsqrt", x)
def sigmoid(x): return call("sigmoid", x)
def abs(x): return call("abs", x)  # noqa: A001 - the field's name for it
def floor(x): return call("floor", x)
def ceil(x): return call("ceil", x)
def round_even(x): return call("round", x)  # half to even, as ONNX Round and numpy round
def power(x, y): return call("pow", x, as_expr(y, as_expr(x).dtype))
def max(a, b): return binop("max", a, b)  # noqa: A001
def min(a, b): return binop("min", a, b)  # noqa: A001
def logical_not(x): return call("not", x)


def dot4(a: Any, b: Any) -> Call:
    """The sum of four products: a's bytes read unsigned times b's bytes read signed, both
    operands uint32 words of four bytes, as int32 (x86's VNNI instruction vpdpbusd computes one
    per lane, accumulating: 64 int8 products per instruction where float32 FMA does 16)."""
    a, b = as_expr(a), as_expr(b)
    if a.dtype != "uint32" or b.dtype != "uint32":
        raise ValueError(f"dot4 takes two uint32 words of four bytes, got {a.dtype} and {b.dtype}")
    return call("dot4", a, b)


def select(cond: Expr, t: Any, f: Any) -> Select:
    t_e = as_expr(t, f.dtype if isinstance(f, Expr) else None)
    return Select(cond, t_e, as_expr(f, t_e.dtype))


def cast(dtype: str, x: Any) -> Expr:
    x = as_expr(x)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return x if x.dtype == dtype else Cast(dtype, x)
