"""Small tasks built from one-anchor graphs, for template, feature and tuning tests, and runners
that time nothing, for the task scheduler's."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.layout import blocked_shape
from autosched.graph.passes import fold_views
from autosched.measure import ErrorKind, MeasureResult
from autosched.measure.interface import PipelinedRunner
from autosched.task import Task, extract_tasks

_RNG = np.random.default_rng(0)


def _const(b: GraphBuilder, name: str, shape: Sequence[int]) -> str:
    return b.constant(name, _RNG.standard_normal(shape).astype(np.float32))


def _task(b: GraphBuilder) -> Task:
    (task,) = extract_tasks(b.build()).tasks
    return task


def matmul_task(a_shape: Sequence[int], b_shape: Sequence[int], relu: bool = False) -> Task:
    b = GraphBuilder()
    y = b.node(Op.MATMUL, [b.input("a", a_shape), _const(b, "w", b_shape)])
    b.output(b.node(Op.RELU, [y]) if relu else y)
    return _task(b)


def attention_scores_task(batch: Sequence[int], m: int, k: int, n: int) -> Task:
    """BERT's Q·Kᵀ / sqrt(d) + mask: a batched MatMul whose epilogue reads a 0-d and a broadcast tensor."""
    b = GraphBuilder()
    y = b.node(Op.MATMUL, [b.input("q", (*batch, m, k)), _const(b, "k", (*batch, k, n))])
    y = b.node(Op.DIV, [y, b.constant("scale", np.array(np.sqrt(k), np.float32))])
    b.output(b.node(Op.ADD, [y, b.input("mask", (1,) * len(batch) + (1, n))]))
    return _task(b)


def viewed_attention_task(seq: int, heads: int, dim: int, key: bool = True) -> Task:
    """Attention's batched MatMul with its operands' Reshape/Transpose folded in as views:
    Q·Kᵀ (`key`) or the context's scores·V, from [1, seq, heads·dim] activations."""
    b = GraphBuilder()

    def split_heads(name: str, perm: tuple[int, ...]) -> str:
        x = b.node(Op.RESHAPE, [b.input(name, (1, seq, heads * dim))], shape=(1, seq, heads, dim))
        return b.node(Op.TRANSPOSE, [x], perm=perm)

    if key:
        y = b.node(Op.MATMUL, [split_heads("q", (0, 2, 1, 3)), split_heads("k", (0, 2, 3, 1))])
    else:
        y = b.node(Op.MATMUL, [b.input("p", (1, heads, seq, seq)), split_heads("v", (0, 2, 1, 3))])
    b.output(y)
    (task,) = extract_tasks(fold_views(b.build())).tasks
    assert dict(task.attrs).get("operand_views"), "the views were not folded"
    return task


def gemm_task(a_shape: Sequence[int], b_shape: Sequence[int], c_shape: Sequence[int] | None, trans_a: int = 0,
              trans_b: int = 0, alpha: float = 1.0, beta: float = 1.0) -> Task:
    b = GraphBuilder()
    ins = [b.input("a", a_shape), _const(b, "w", b_shape)] + ([_const(b, "c", c_shape)] if c_shape else [])
    b.output(b.node(Op.GEMM, ins, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta))
    return _task(b)


def conv_task(x_shape: Sequence[int], w_shape: Sequence[int], stride: int = 1, pad: int = 0, group: int = 1,
              bias: bool = False, epilogue: str = "", dilation: int = 1) -> Task:
    """Conv with optional bias; epilogue "relu" or "residual" (Add of a second input, then Relu)."""
    b = GraphBuilder()
    ins = [b.input("x", x_shape), _const(b, "w", w_shape)] + ([_const(b, "bias", (w_shape[0],))] if bias else [])
    y = b.node(Op.CONV, ins, strides=(stride, stride), pads=(pad,) * 4, dilations=(dilation, dilation), group=group)
    if epilogue == "residual":
        y = b.node(Op.ADD, [y, b.input("r", b.values[y].shape)])
    if epilogue:
        y = b.node(Op.RELU, [y])
    b.output(y)
    return _task(b)


def blocked_conv_task(x_shape: Sequence[int], w_shape: Sequence[int], in_block: int, out_block: int, stride: int = 1,
                      pad: int = 0, depthwise: bool = False, bias: bool = False, residual: bool = False,
                      groups: int = 1, dilation: int = 1, crop: Sequence[int] = (0, 0, 0, 0)) -> Task:
    """ConvNCHWc as layout planning emits it: x plain NCHW (in_block 0) or in blocks, output in
    blocks of out_block; optional bias, and a blocked residual Add then Relu; depthwise, or
    `groups` of whole blocks; reading the window of x inside `crop` (`fold_conv_windows`)."""
    b = GraphBuilder()
    x = b.input("x", blocked_shape(x_shape, in_block))
    ins = [x, _const(b, "w", w_shape)] + ([_const(b, "bias", (w_shape[0],))] if bias else [])
    y = b.node(Op.CONV_NCHWC, ins, strides=(stride, stride), pads=(pad,) * 4, dilations=(dilation, dilation),
               group=x_shape[1] if depthwise else groups, in_block=in_block, out_block=out_block,
               **({"crop": tuple(crop)} if any(crop) else {}))
    if residual:
        y = b.node(Op.RELU, [b.node(Op.ADD, [y, b.input("r", b.values[y].shape)])])
    b.output(y)
    return _task(b)


def softmax_task(shape: Sequence[int]) -> Task:
    b = GraphBuilder()
    b.output(b.node(Op.SOFTMAX, [b.input("x", shape)], axis=-1))
    return _task(b)


def unary_task(op, shape: Sequence[int], **attrs) -> Task:
    """One node of `op` on one input: pooling, reductions, layout ops, LayerNorm (with constants)."""
    b = GraphBuilder()
    ins = [b.input("x", shape)]
    if op is Op.LAYER_NORM:
        ins += [_const(b, "scale", shape[attrs["axis"]:]), _const(b, "bias", shape[attrs["axis"]:])]
    b.output(b.node(op, ins, **attrs))
    return _task(b)


def multi_output_task(op, shape: Sequence[int], outputs: int, **attrs) -> Task:
    """unary_task's node with `outputs` outputs, every one an output of the graph (Split's
    parts; LayerNorm's Y, Mean and InvStdDev)."""
    b = GraphBuilder()
    ins = [b.input("x", shape)]
    if op is Op.LAYER_NORM:
        ins += [_const(b, "scale", shape[attrs["axis"]:]), _const(b, "bias", shape[attrs["axis"]:])]
    first = b.node(op, ins, name="multi", outputs=outputs, **attrs)
    b.output(first, *(f"multi:{i}" for i in range(1, outputs)))
    return _task(b)


def add_relu_task(shape: Sequence[int], other: Sequence[int]) -> Task:
    """Add with numpy broadcasting, then Relu: an elementwise anchor with an epilogue."""
    b = GraphBuilder()
    b.output(b.node(Op.RELU, [b.node(Op.ADD, [b.input("x", shape), b.input("y", other)])]))
    return _task(b)


def assert_matches_reference(task: Task, schedule, args, target) -> None:
    """The kernel of `schedule` compiled as a model build compiles it (weight-only stages
    computed ahead) computes what `task.reference` (numpy) computes on the task's seeded inputs:
    comparing two of our own kernels would miss a mistake they share."""
    from autosched.compile.model import kernel_as_built
    from autosched.measure.fold import constant_inputs
    inputs = task.random_inputs(0)
    kern, folded = kernel_as_built(schedule, args, constant_inputs(task), target, inputs)
    outs = [np.empty(shape, dtype) for shape, dtype in zip(task.out_shapes, task.out_dtypes)]
    kern(*inputs, *outs, *folded)
    for got, want in zip(outs, task.reference(inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


class PerTaskCost:
    """A runner that times nothing (a test double for the device): every config of a task
    costs that task's fixed time, so no task improves after its first round."""

    def __init__(self, costs):
        self.costs = costs

    def run(self, inputs, builds):
        return [MeasureResult((self.costs[i.task.key],), ErrorKind.NO_ERROR, "", 0.0, 0.0) for i in inputs]


class PipelinedPerTaskCost(PerTaskCost, PipelinedRunner):
    """PerTaskCost behind the pipelined interface (as the Ray runner is), logging when each
    batch is submitted and when it is waited for."""

    def __init__(self, costs):
        super().__init__(costs)
        self.log: list[tuple[str, int]] = []
        self._batches: dict[int, list] = {}

    def submit(self, builder, inputs):
        ticket = len(self.log)
        self._batches[ticket] = self.run(inputs, builder.build(inputs))
        self.log.append(("submit", ticket))
        return ticket

    def wait(self, ticket):
        self.log.append(("wait", ticket))
        return self._batches.pop(ticket)
