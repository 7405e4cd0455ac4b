"""The operator library: tensor-expression compute definitions and their default schedules.

Each op is a function building its tensor expression, paired with a schedule function
`(out, vector_lanes) -> Schedule` used when no tuned configuration exists. Which graph op uses
which of them is each op's record in `autosched.opset`.
"""
from __future__ import annotations

from autosched.ops import conv, elementwise, matmul, nn, reduce, transform
from autosched.ops.conv import conv2d, schedule_conv2d
from autosched.ops.elementwise import (
    abs,
    add,
    binary,
    cast,
    clip,
    div,
    erf,
    exp,
    gelu,
    hard_sigmoid,
    hard_swish,
    leaky_relu,
    log,
    maximum,
    minimum,
    mul,
    neg,
    pow,
    relu,
    schedule_elementwise,
    sigmoid,
    sqrt,
    sub,
    tanh,
)
from autosched.ops.epilogue import EpilogueFn, apply_epilogue
from autosched.ops.matmul import Packing, default_packing, dense, gemm, schedule_matmul
from autosched.ops.nn import (
    avg_pool2d,
    batch_norm,
    global_avg_pool2d,
    global_max_pool2d,
    layer_norm,
    max_pool2d,
    schedule_batch_norm,
    schedule_layer_norm,
    schedule_pool2d,
    schedule_softmax,
    softmax,
)
from autosched.ops.reduce import reduce_max, reduce_mean, reduce_range, reduce_sum, schedule_reduce
from autosched.ops.transform import concat, pad, reshape, schedule_injective, strided_slice, transpose

__all__ = [
    "EpilogueFn", "apply_epilogue", "Packing", "default_packing",
    "conv", "elementwise", "matmul", "nn", "reduce", "transform",
    "conv2d", "schedule_conv2d", "dense", "gemm", "schedule_matmul",
    "relu", "leaky_relu", "clip", "sigmoid", "tanh", "exp", "log", "sqrt", "erf", "gelu", "hard_sigmoid",
    "hard_swish", "neg", "abs", "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "binary",
    "schedule_elementwise", "batch_norm", "schedule_batch_norm", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
    "global_max_pool2d", "schedule_pool2d", "softmax", "schedule_softmax", "layer_norm", "schedule_layer_norm",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_range", "schedule_reduce", "pad", "transpose", "reshape", "concat",
    "strided_slice", "schedule_injective",
]
