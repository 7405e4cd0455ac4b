"""Index arithmetic: canonical linear forms, simplification and interval bounds.

Splits and fuses produce index expressions such as `(io*8 + ii) // 8`; bound inference needs
`hi - lo + 1` to cancel to a constant. Both rest on one idea: an integer expression is a sum of
coefficient × atom plus a constant, where atoms are variables or irreducible sub-expressions.
`ranges` maps loop variables to inclusive (lo, hi) bounds; they let `x // c` and `x % c` fold.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from autosched.te.expr import (
    INT_DTYPES,
    BinOp,
    Cast,
    Cmp,
    Const,
    Expr,
    Select,
    Var,
    children,
    is_float,
    rebuild,
)

Ranges = dict  # Var -> (lo, hi) inclusive integer bounds
Interval = tuple  # (lo, hi) inclusive


class Linear:
    """sum(coeff * atom) + const over integer atoms; atoms keyed structurally."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms: dict | None = None, const: int = 0, dtype: str = "int32"):
        self.terms = terms or {}  # key -> [coeff, atom]
        self.const = const
        self.dtype = dtype

    @staticmethod
    def atom(e: Expr) -> Linear:
        return Linear({e.key(): [1, e]}, 0, e.dtype)

    def scaled(self, c: int) -> Linear:
        return Linear({k: [v[0] * c, v[1]] for k, v in self.terms.items() if v[0] * c}, self.const * c, self.dtype)

    def plus(self, o: Linear, sign: int = 1) -> Linear:
        terms = {k: list(v) for k, v in self.terms.items()}
        for k, (c, a) in o.terms.items():
            if k in terms:
                terms[k][0] += sign * c
                if terms[k][0] == 0:
                    del terms[k]
            else:
                terms[k] = [sign * c, a]
        dtype = "int64" if "int64" in (self.dtype, o.dtype) else self.dtype
        return Linear(terms, self.const + sign * o.const, dtype)

    def is_const(self) -> bool:
        return not self.terms

    def coeff(self, v: Var) -> int:
        t = self.terms.get(v.key())
        return t[0] if t else 0

    def split_by(self, c: int) -> tuple[Linear, Linear]:
        """(q, r) with self = q*c + r, q collecting every term divisible by c."""
        q, r = Linear(dtype=self.dtype), Linear(dtype=self.dtype)
        for k, (coef, a) in self.terms.items():
            (q if coef % c == 0 else r).terms[k] = [coef // c if coef % c == 0 else coef, a]
        q.const, r.const = divmod(self.const, c)
        return q, r

    def to_expr(self) -> Expr:
        out: Expr | None = None
        for coef, a in self.terms.values():
            term = a if coef in (1, -1) else BinOp("mul", a, Const(abs(coef), self.dtype))
            if out is None:
                out = term if coef > 0 else BinOp("sub", Const(0, self.dtype), term)
            else:
                out = BinOp("add" if coef > 0 else "sub", out, term)
        if out is None:
            return Const(self.const, self.dtype)
        if self.const:
            out = BinOp("add" if self.const > 0 else "sub", out, Const(abs(self.const), self.dtype))
        return out


def _is_int(e: Expr) -> bool:
    return e.dtype in INT_DTYPES


def linear(e: Expr, ranges: Ranges | None = None) -> Linear:
    """The canonical linear form of an integer expression."""
    ranges = ranges or {}
    if isinstance(e, Const):
        return Linear({}, int(e.value), e.dtype)
    if isinstance(e, BinOp) and _is_int(e):
        if e.op in ("add", "sub"):
            return _merge_divmod(linear(e.a, ranges).plus(linear(e.b, ranges), 1 if e.op == "add" else -1), ranges)
        if e.op == "mul":
            la, lb = linear(e.a, ranges), linear(e.b, ranges)
            if lb.is_const():
                return la.scaled(lb.const)
            if la.is_const():
                return lb.scaled(la.const)
            return Linear.atom(BinOp("mul", la.to_expr(), lb.to_expr()))
        if e.op in ("floordiv", "floormod"):
            la, lb = linear(e.a, ranges), linear(e.b, ranges)
            if lb.is_const() and lb.const > 0:
                return _divmod(e.op, la, lb.const, ranges)
            if la.is_const() and lb.is_const() and lb.const != 0:
                return Linear({}, la.const // lb.const if e.op == "floordiv" else la.const % lb.const, e.dtype)
            return Linear.atom(BinOp(e.op, la.to_expr(), lb.to_expr()))
        if e.op in ("min", "max"):
            la, lb = linear(e.a, ranges), linear(e.b, ranges)
            d = la.plus(lb, -1)
            if d.is_const():
                pick_a = (d.const <= 0) == (e.op == "min")
                return la if pick_a else lb
            ib = int_bound(d.to_expr(), ranges)
            if ib is not None and (ib[1] <= 0 or ib[0] >= 0):
                pick_a = (ib[1] <= 0) == (e.op == "min")
                return la if pick_a else lb
            return Linear.atom(BinOp(e.op, la.to_expr(), lb.to_expr()))
    if isinstance(e, Var):
        return Linear.atom(e)
    return Linear.atom(_simplify_node(e, ranges))


def _merge_divmod(lin: Linear, ranges: Ranges) -> Linear:
    """c·k·(x // k) + c·(x % k) is c·x: un-fusing a fused axis leaves these pairs in flat indices,
    and only once they cancel is the index affine in the loop variables again (vectorizable)."""
    while True:
        for key, (c, atom) in lin.terms.items():
            if not (isinstance(atom, BinOp) and atom.op == "floormod" and isinstance(atom.b, Const)):
                continue
            div_key = ("floordiv", atom.a.key(), atom.b.key())
            d = lin.terms.get(div_key)
            if d is not None and d[0] == c * atom.b.value:
                rest = Linear({k: v for k, v in lin.terms.items() if k not in (key, div_key)}, lin.const, lin.dtype)
                lin = rest.plus(linear(atom.a, ranges).scaled(c))
                break
        else:
            return lin


def _divmod(op: str, la: Linear, c: int, ranges: Ranges) -> Linear:
    if c == 1:
        return la if op == "floordiv" else Linear({}, 0, la.dtype)
    q, r = la.split_by(c)
    rb = int_bound(r.to_expr(), ranges) if r.terms else (r.const, r.const)
    if rb is not None and rb[0] // c == rb[1] // c:
        k = rb[0] // c
        if op == "floordiv":
            return q.plus(Linear({}, k, la.dtype))
        return r.plus(Linear({}, k * c, la.dtype), -1)
    # r = v + w: every coefficient of v a multiple of g, g dividing c, and 0 <= w < g (the
    # constant's remainder mod g, and terms of small non-negative range, a vector's lane): then
    # (v + w) // c = v // c and (v + w) % c = v % c + w, since v % c is a multiple of g below c.
    # So (4x + lane) // 8 is (4x) // 8 for lanes 0..3, and a vector's lanes differ by the lane alone
    small = Linear(dtype=la.dtype)
    small.const = r.const
    big = Linear(dtype=la.dtype)
    for key, (coef, atom) in r.terms.items():
        b = int_bound(BinOp("mul", Const(coef, la.dtype), atom), ranges) if abs(coef) < c else None
        (small if b is not None and b[0] >= 0 and b[1] < c else big).terms[key] = [coef, atom]
    if big.terms:
        g = math.gcd(c, *(coef for coef, _ in big.terms.values()))
        small.const, big.const = r.const % g, r.const - r.const % g
        hi = int_bound(small.to_expr(), ranges) if small.terms else (small.const, small.const)
        if g > 1 and (small.terms or small.const) and hi is not None and hi[1] < g:
            if op == "floordiv":
                return q.plus(_divmod(op, big, c, ranges))
            return _divmod(op, big, c, ranges).plus(small)
    if op == "floordiv":
        return q.plus(Linear.atom(BinOp("floordiv", r.to_expr(), Const(c, la.dtype))))
    return Linear.atom(BinOp("floormod", r.to_expr(), Const(c, la.dtype)))


def known_divisor(e: Expr) -> int:
    """A number every value of `e` is a multiple of (1 where none is known): a floormod by c of
    an expression whose terms share a divisor with c keeps it ((4x) % 8 is 0 or 4)."""
    if isinstance(e, BinOp) and e.op == "floormod" and isinstance(e.b, Const):
        lin = linear(e.a)
        return math.gcd(int(e.b.value), lin.const, *(coef * known_divisor(a) for coef, a in lin.terms.values()))
    return 1


def int_bound(e: Expr, ranges: Ranges) -> Interval | None:
    """Inclusive integer bounds of `e` when every variable in it has a range, else None."""
    if isinstance(e, Const):
        return (int(e.value), int(e.value))
    if isinstance(e, Var):
        return ranges.get(e)
    if not isinstance(e, BinOp):
        if isinstance(e, Select):
            t, f = int_bound(e.t, ranges), int_bound(e.f, ranges)
            return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
        return None
    a, b = int_bound(e.a, ranges), int_bound(e.b, ranges)
    if a is None or b is None:
        if e.op == "floormod" and b is not None and b[0] > 0:
            return (0, b[1] - known_divisor(e))  # a multiple of its divisor, below b
        return None
    if e.op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if e.op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if e.op == "mul":
        p = [x * y for x in a for y in b]
        return (min(p), max(p))
    if e.op == "floordiv" and b[0] > 0:
        q = [x // y for x in a for y in b]
        return (min(q), max(q))
    if e.op == "floormod" and b[0] > 0:
        if b[0] == b[1] and a[0] // b[0] == a[1] // b[0]:
            return (a[0] % b[0], a[1] % b[0])
        return (0, b[1] - known_divisor(e))
    if e.op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if e.op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    return None


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """An equivalent, canonical and usually smaller expression."""
    ranges = ranges or {}
    if _is_int(e) and isinstance(e, (BinOp, Const, Var)):
        return linear(e, ranges).to_expr()
    return _simplify_node(e, ranges)


_FOLD: dict[str, Callable[[Any, Any], Any]] = {  # constant folding of Const values (int, float, bool)
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "min": min, "max": max,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


def _simplify_node(e: Expr, ranges: Ranges) -> Expr:
    kids = [simplify(c, ranges) for c in children(e)]
    e = rebuild(e, kids)
    if isinstance(e, Cmp):
        return _simplify_cmp(e, ranges)
    if isinstance(e, BinOp):
        a, b = e.a, e.b
        if e.op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    if e.op == "and":
                        return y if x.value else Const(False, "bool")
                    return Const(True, "bool") if x.value else y
            return e
        if isinstance(a, Const) and isinstance(b, Const) and e.op in _FOLD:
            return Const(_FOLD[e.op](a.value, b.value), e.dtype)
        if is_float(e.dtype):
            if e.op == "add" and isinstance(b, Const) and b.value == 0:
                return a
            if e.op == "mul" and isinstance(b, Const) and b.value == 1:
                return a
            if e.op == "mul" and isinstance(a, Const) and a.value == 1:
                return b
        return e
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.t if e.cond.value else e.f
    if isinstance(e, Cast) and isinstance(e.value, Const):
        v = e.value.value
        return Const(float(v) if is_float(e.dtype) else (bool(v) if e.dtype == "bool" else int(v)), e.dtype)
    return e


def _simplify_cmp(e: Cmp, ranges: Ranges) -> Expr:
    if not (_is_int(e.a) and _is_int(e.b)):
        if isinstance(e.a, Const) and isinstance(e.b, Const):
            return Const(_FOLD[e.op](e.a.value, e.b.value), "bool")
        return e
    d = linear(e.a, ranges).plus(linear(e.b, ranges), -1)  # a - b
    bd = int_bound(d.to_expr(), ranges) if d.terms else (d.const, d.const)
    if bd is not None:
        lo, hi = bd
        verdict = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
                   "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
                   "ne": (lo > 0 or hi < 0, lo == hi == 0)}[e.op]
        if verdict[0]:
            return Const(True, "bool")
        if verdict[1]:
            return Const(False, "bool")
    return e


def symbolic_interval(e: Expr, ranges: Ranges) -> tuple[Expr, Expr] | None:
    """Bounds of `e` as expressions: ranged vars vary, every other var stays symbolic.

    Bound inference uses this with the loops outside a compute_at point left symbolic.
    """
    if isinstance(e, Const):
        return (e, e)
    if isinstance(e, Var):
        r = ranges.get(e)
        return (e, e) if r is None else (Const(r[0], e.dtype), Const(r[1], e.dtype))
    if not isinstance(e, BinOp):
        if isinstance(e, Select):
            t, f = symbolic_interval(e.t, ranges), symbolic_interval(e.f, ranges)
            if t is None or f is None:
                return None
            return (BinOp("min", t[0], f[0]), BinOp("max", t[1], f[1]))
        return None
    a, b = symbolic_interval(e.a, ranges), symbolic_interval(e.b, ranges)
    if a is None or b is None:
        return None
    if e.op == "add":
        return (BinOp("add", a[0], b[0]), BinOp("add", a[1], b[1]))
    if e.op == "sub":
        return (BinOp("sub", a[0], b[1]), BinOp("sub", a[1], b[0]))
    if e.op in ("mul", "floordiv"):
        for x, y in ((a, b), (b, a)) if e.op == "mul" else ((a, b),):
            if isinstance(y[0], Const) and y[0] is y[1] or (isinstance(y[0], Const) and isinstance(y[1], Const) and y[0].value == y[1].value):
                c = y[0].value
                if c >= 0:
                    return (BinOp(e.op, x[0], y[0]), BinOp(e.op, x[1], y[0]))
                return (BinOp(e.op, x[1], y[0]), BinOp(e.op, x[0], y[0]))
        return None
    if e.op == "floormod":
        if isinstance(b[0], Const) and isinstance(b[1], Const) and b[0].value == b[1].value and b[0].value > 0:
            c = b[0].value
            lo, hi = simplify(a[0], ranges), simplify(a[1], ranges)
            d = linear(hi).plus(linear(lo), -1)
            if d.is_const() and d.const == 0:
                # one value (an outer loop's, left symbolic): the components of a fused axis
                exact = BinOp("floormod", lo, b[0])
                return (exact, exact)
            if d.is_const() and d.const < c and isinstance(lo, Const):
                if lo.value // c == (lo.value + d.const) // c:
                    return (Const(lo.value % c, e.dtype), Const(lo.value % c + d.const, e.dtype))
            return (Const(0, e.dtype), Const(c - 1, e.dtype))
        return None
    if e.op in ("min", "max"):
        return (BinOp(e.op, a[0], b[0]), BinOp(e.op, a[1], b[1]))
    return None


def as_int(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) and _is_int(e) else None


__all__ = ["Linear", "linear", "simplify", "int_bound", "symbolic_interval", "as_int"]
