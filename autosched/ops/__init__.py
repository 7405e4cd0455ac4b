"""The operator library: compute definitions and their default schedules, looked up by name.

Every entry pairs a function building the op's tensor expression with the schedule function
`(out, vector_lanes) -> Schedule` used when no tuned configuration exists. The registry is a
plain mapping built once at import; callers pass names, never compare them further.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from autosched.ops import conv, elementwise, matmul, nn, reduce, transform
from autosched.ops.conv import conv2d, schedule_conv2d
from autosched.ops.elementwise import (
    abs, add, binary, cast, clip, div, erf, exp, gelu, hard_sigmoid, hard_swish, leaky_relu, log, maximum,
    minimum, mul, neg, pow, relu, schedule_elementwise, sigmoid, sqrt, sub, tanh,
)
from autosched.ops.epilogue import EpilogueFn, apply_epilogue
from autosched.ops.matmul import Packing, default_packing, dense, gemm, schedule_matmul
from autosched.ops.nn import (
    avg_pool2d, batch_norm, global_avg_pool2d, global_max_pool2d, layer_norm, max_pool2d, schedule_batch_norm,
    schedule_layer_norm, schedule_pool2d, schedule_softmax, softmax,
)
from autosched.ops.reduce import reduce_max, reduce_mean, reduce_sum, schedule_reduce
from autosched.ops.transform import concat, pad, reshape, schedule_injective, strided_slice, transpose


class OpEntry(NamedTuple):
    compute: Callable
    schedule: Callable


def _entries() -> dict[str, OpEntry]:
    table = {
        "conv2d": OpEntry(conv2d, schedule_conv2d),
        "matmul": OpEntry(matmul.matmul, schedule_matmul),
        "dense": OpEntry(dense, schedule_matmul),
        "gemm": OpEntry(gemm, schedule_matmul),
        "batch_norm": OpEntry(batch_norm, schedule_batch_norm),
        "max_pool2d": OpEntry(max_pool2d, schedule_pool2d),
        "avg_pool2d": OpEntry(avg_pool2d, schedule_pool2d),
        "global_avg_pool2d": OpEntry(global_avg_pool2d, schedule_reduce),
        "global_max_pool2d": OpEntry(global_max_pool2d, schedule_reduce),
        "softmax": OpEntry(softmax, schedule_softmax),
        "layer_norm": OpEntry(layer_norm, schedule_layer_norm),
        "reduce_sum": OpEntry(reduce_sum, schedule_reduce),
        "reduce_mean": OpEntry(reduce_mean, schedule_reduce),
        "reduce_max": OpEntry(reduce_max, schedule_reduce),
        "pad": OpEntry(pad, schedule_injective),
        "transpose": OpEntry(transpose, schedule_injective),
        "reshape": OpEntry(reshape, schedule_injective),
        "concat": OpEntry(concat, schedule_injective),
        "slice": OpEntry(strided_slice, schedule_injective),
    }
    for name, fn in {**elementwise.UNARY_OPS, **elementwise.BINARY_OPS}.items():
        table[name] = OpEntry(fn, schedule_elementwise)
    return table


#: op name -> (compute function, default schedule function)
REGISTRY: dict[str, OpEntry] = _entries()


def lookup(name: str) -> OpEntry:
    """The registry entry for `name`, with the known names in the error when it is missing."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no operator {name!r} in autosched.ops; known: {', '.join(sorted(REGISTRY))}") from None


__all__ = [
    "REGISTRY", "OpEntry", "lookup", "EpilogueFn", "apply_epilogue", "Packing", "default_packing",
    "conv", "elementwise", "matmul", "nn", "reduce", "transform",
    "conv2d", "schedule_conv2d", "dense", "gemm", "schedule_matmul",
    "relu", "leaky_relu", "clip", "sigmoid", "tanh", "exp", "log", "sqrt", "erf", "gelu", "hard_sigmoid",
    "hard_swish", "neg", "abs", "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "binary",
    "schedule_elementwise", "batch_norm", "schedule_batch_norm", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
    "global_max_pool2d", "schedule_pool2d", "softmax", "schedule_softmax", "layer_norm", "schedule_layer_norm",
    "reduce_sum", "reduce_mean", "reduce_max", "schedule_reduce", "pad", "transpose", "reshape", "concat",
    "strided_slice", "schedule_injective",
]
