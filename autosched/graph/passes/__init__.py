"""Graph passes, one module each, and the standard pipeline that chains them.

Each rewriting pass is a function Graph → Graph that preserves the graph's
results; `fuse` and `plan_memory` then describe the optimized graph as
kernels and buffers.
"""

from __future__ import annotations

from autosched.graph.ir import Graph
from autosched.graph.passes.collapse_views import collapse_views
from autosched.graph.passes.conv_windows import fold_conv_windows
from autosched.graph.passes.crop_taps import crop_taps
from autosched.graph.passes.cse import eliminate_common_subexpressions
from autosched.graph.passes.dce import eliminate_dead_code
from autosched.graph.passes.divide_by_constant import divide_by_constant
from autosched.graph.passes.flatten_pointwise import flatten_pointwise
from autosched.graph.passes.fold_batchnorm import fold_batchnorm
from autosched.graph.passes.fold_constants import fold_constants
from autosched.graph.passes.fold_depth import fold_depth
from autosched.graph.passes.fold_layer_norm import fold_layer_norm
from autosched.graph.passes.fold_pad import fold_pad
from autosched.graph.passes.fold_views import fold_views
from autosched.graph.passes.fuse import FusedGroup, fuse
from autosched.graph.passes.fuse_copies import fuse_copies
from autosched.graph.passes.integer_conv import integer_conv
from autosched.graph.passes.integer_matmul import integer_matmul
from autosched.graph.passes.layout import plan_layout
from autosched.graph.passes.lift_1d import lift_1d
from autosched.graph.passes.matmul_rows import matmul_rows
from autosched.graph.passes.memory import Buffer, MemoryPlan, plan_memory
from autosched.graph.passes.pad_channels import MAX_WASTE, max_waste, pad_channels
from autosched.graph.passes.patch_conv import patch_conv
from autosched.graph.passes.reduce_pow import reduce_pow
from autosched.graph.passes.reduce_range import reduce_range
from autosched.graph.passes.remove_identity import remove_identity
from autosched.graph.passes.space_to_depth import space_to_depth
from autosched.graph.passes.split_groups import split_groups
from autosched.graph.passes.split_k import split_k
from autosched.target import CpuCapabilities, Target

__all__ = [
    "Buffer",
    "FusedGroup",
    "MemoryPlan",
    "collapse_views",
    "crop_taps",
    "divide_by_constant",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_conv_windows",
    "flatten_pointwise",
    "fold_batchnorm",
    "fold_constants",
    "fold_layer_norm",
    "fold_pad",
    "fold_views",
    "fold_depth",
    "lift_1d",
    "matmul_rows",
    "fuse",
    "fuse_copies",
    "integer_conv",
    "integer_matmul",
    "optimize",
    "optimize_for",
    "pad_channels",
    "patch_conv",
    "plan_layout",
    "reduce_range",
    "plan_memory",
    "reduce_pow",
    "remove_identity",
    "space_to_depth",
    "split_groups",
    "split_k",
]


#: the vector registers up to which a target's 1x1 convolutions run as one row (`flatten_pointwise`)
FLAT_POINTWISE_REGISTERS = 16


def optimize_for(graph: Graph, target: Target) -> Graph:
    """`optimize` with what `target` says about its vectors, cores and GPU: the graph a target's
    tasks are extracted from and its model is built from."""
    caps = target.capabilities
    waste = max_waste(caps) if isinstance(caps, CpuCapabilities) else MAX_WASTE
    pointwise_rows = isinstance(caps, CpuCapabilities) and caps.vector_registers <= FLAT_POINTWISE_REGISTERS
    byte_dot = isinstance(caps, CpuCapabilities) and caps.byte_dot
    return optimize(graph, target.layout_lanes, target.gpu_blocks, waste, pointwise_rows, byte_dot)


def optimize(graph: Graph, layout_lanes: int | None = None, gpu_blocks: int | None = None,
             pad_waste: float = MAX_WASTE, pointwise_rows: bool = False, byte_dot: bool = False) -> Graph:
    """The standard rewrite pipeline, in an order where each pass feeds the next.

    Identity removal first exposes Conv→BN pairs an Identity sat between;
    constant folding before BN folding turns computed BN parameters into
    constants, and before the LayerNorm fold the exponents, ε, γ and β; divisions by constants
    become multiplications after that fold, which finds LayerNorm's division in its pattern; zero
    Pads that only convolutions read become their padding (`fold_pad`); a patch embedding
    becomes a MatMul after BN folding has scaled its filters, and 1-D convolutions and pools
    2-D ones of height 1 (`lift_1d`) after BN folding has merged into them, and then kernel taps
    that read only padding are dropped (`crop_taps`: on 2-D convolutions, their weights final); CSE after folding sees the final
    constants; a MatMul of a 2-D B reads its batch as rows (`matmul_rows`) and view chains that
    move nothing collapse before views fold; DCE last drops
    whatever the others orphaned. Views fold after CSE, so a Reshape/Transpose chain two
    MatMuls share is merged first and stays a node (it has two readers). With `layout_lanes`
    (a CPU target's float32 vector, `Target.layout_lanes`), convolutions a few channels short of
    whole vectors are padded to them (by at most `pad_waste` of their channels), grouped 3x3 ones of
    wide groups become one convolution per group (`split_groups`), and convolutions and the ops between them are then
    planned into channel blocks, and a blocked 5x5 convolution of stride 2 Winograd can take
    becomes a 3x3 one over its input's phases (`space_to_depth`); with `pointwise_rows` (a
    target of 16 vector registers), blocked 1x1 convolutions of stride 1 run over their image as
    one row (`flatten_pointwise`), and slices of blocked maps that only convolutions read become
    the windows those read in place (`fold_conv_windows`): the graph a target's tasks
    are extracted from and its model is built from. With `gpu_blocks` (a GPU target's `Target.gpu_blocks`), deep
    products too small to fill the GPU are split along K (`split_k`), and MatMuls read both
    operands through their views (a GPU kernel stages both through shared memory anyway).
    With `byte_dot` (a CPU target that multiplies bytes four at a time, `CpuCapabilities.byte_dot`),
    MatMuls and blocked convolutions of quantized integers become int8 products
    (`integer_matmul`, `integer_conv`). On a CPU target a tensor's maximum and minimum over
    every element are one kernel (`reduce_range`).
    """
    graph = remove_identity(graph)
    graph = fold_constants(graph)
    graph = divide_by_constant(fold_layer_norm(reduce_pow(graph)))
    graph = crop_taps(lift_1d(patch_conv(fold_depth(fold_batchnorm(fold_pad(graph))))))
    graph = collapse_views(matmul_rows(eliminate_common_subexpressions(graph)))
    if gpu_blocks:
        graph = fold_constants(split_k(graph, gpu_blocks))
    graph = fold_views(graph, dense_in_place=not gpu_blocks)
    if byte_dot:
        graph = integer_matmul(graph)
    graph = eliminate_dead_code(graph)
    if not layout_lanes:
        return graph
    graph = pad_channels(split_groups(graph, layout_lanes), layout_lanes, pad_waste)
    graph = space_to_depth(plan_layout(graph, layout_lanes))
    if pointwise_rows:
        graph = flatten_pointwise(graph, layout_lanes)
    graph = fold_conv_windows(graph)
    if byte_dot:
        graph = eliminate_dead_code(integer_conv(graph))
    graph = reduce_range(graph, layout_lanes)
    return fuse_copies(collapse_views(graph))  # the rearrangement's views merge with those beside them
