"""Readable text for expressions, used in reprs and error messages."""
from __future__ import annotations

from autosched.te.expr import BinOp, Call, Cast, Cmp, Const, Expr, Load, Reduce, Select, Var

_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
        "and": "&&", "or": "||", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def expr_str(e: Expr) -> str:
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, (BinOp, Cmp)):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        return f"({expr_str(e.a)} {_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, Load):
        return f"{e.source.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        return f"{e.combiner}({expr_str(e.source)}, axis=[{', '.join(a.name for a in e.axes)}])"
    return type(e).__name__
