"""Tensor expressions: what to compute, independent of how the loops run."""
from autosched.te.expr import (
    Expr, Var, Const, BinOp, Cmp, Select, Call, Cast, Load, Reduce,
    exp, log, tanh, erf, sqrt, rsqrt, sigmoid, abs, floor, ceil, power, max, min,
    logical_not, select, cast, const, as_expr,
)
from autosched.te.tensor import (
    IterVar, Tensor, ComputeOp, PlaceholderOp, SPATIAL, REDUCE,
    placeholder, compute, reduce_axis, sum, max_reduce, min_reduce, post_order,
)

__all__ = [
    "Expr", "Var", "Const", "BinOp", "Cmp", "Select", "Call", "Cast", "Load", "Reduce",
    "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "sigmoid", "abs", "floor", "ceil", "power",
    "max", "min", "logical_not", "select", "cast", "const", "as_expr",
    "IterVar", "Tensor", "ComputeOp", "PlaceholderOp", "SPATIAL", "REDUCE",
    "placeholder", "compute", "reduce_axis", "sum", "max_reduce", "min_reduce", "post_order",
]
