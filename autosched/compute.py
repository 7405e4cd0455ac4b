"""Tasks as tensor expressions: where the graph's op vocabulary meets autosched.ops.

A task's kernel takes the anchor's operands, then the epilogue's extra tensors (the order of
`Task.input_values`), and writes the group's output. The epilogue, a small DAG of elementwise
ops over the anchor's result, becomes one scalar function fused into the anchor's output stage.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from autosched import te
from autosched.errors import AutoschedError
from autosched.graph.views import keeps_rows, operand_views, view_tensor
from autosched.ops import conv as conv_ops
from autosched.ops import conv_nchwc as conv_blocked
from autosched.ops import elementwise as ew
from autosched.ops import matmul as mm_ops
from autosched.ops import nn, reduce as reduce_ops, transform
from autosched.ops.epilogue import EpilogueFn, apply_epilogue
from autosched.schedule import Schedule, create_schedule
from autosched.target import CpuCapabilities
from autosched.task import EpilogueOp, Task
from autosched.te import Cmp, Expr, Tensor


class UnsupportedTaskError(AutoschedError):
    """No compute definition exists for a task's op or attributes."""


def _c(v: float, like: Expr) -> Expr:
    return te.const(v, like.dtype)


def _clip(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x = a[0]
    if at.get("min") is not None:
        x = te.max(x, _c(at["min"], x))
    if at.get("max") is not None:
        x = te.min(x, _c(at["max"], x))
    return x


def _trunc_div(a: Expr, b: Expr) -> Expr:
    """Integer division rounding toward zero, as ONNX (and C) define it."""
    q = a // b
    inexact = Cmp("ne", a % b, te.const(0, a.dtype))
    signs_differ = Cmp("ne", a < te.const(0, a.dtype), b < te.const(0, b.dtype))
    return te.select(inexact & signs_differ, q + 1, q)


def _batch_norm(a: list[Expr], at: Mapping[str, Any]) -> Expr:
    x, scale, bias, mean, var = a
    return (x - mean) * te.rsqrt(var + _c(at.get("epsilon", 1e-5), x)) * scale + bias


#: ONNX elementwise op -> scalar expression of its operands (already loaded and broadcast)
ELEMENTWISE: dict[str, Callable[[list[Expr], Mapping[str, Any]], Expr]] = {
    "Add": lambda a, at: a[0] + a[1],
    "Sub": lambda a, at: a[0] - a[1],
    "Mul": lambda a, at: a[0] * a[1],
    "Div": lambda a, at: a[0] / a[1] if a[0].dtype.startswith("float") else _trunc_div(a[0], a[1]),
    "Pow": lambda a, at: te.power(a[0], te.cast(a[0].dtype, a[1])),
    "Sqrt": lambda a, at: te.sqrt(a[0]),
    "Erf": lambda a, at: te.erf(a[0]),
    "Exp": lambda a, at: te.exp(a[0]),
    "Log": lambda a, at: te.log(a[0]),
    "Tanh": lambda a, at: te.tanh(a[0]),
    "Sigmoid": lambda a, at: te.sigmoid(a[0]),
    "Relu": lambda a, at: te.max(a[0], _c(0, a[0])),
    "LeakyRelu": lambda a, at: te.select(a[0] >= _c(0, a[0]), a[0], a[0] * _c(at.get("alpha", 0.01), a[0])),
    "Clip": _clip,
    "HardSigmoid": lambda a, at: ew.hard_sigmoid_expr(a[0], at.get("alpha", 0.2), at.get("beta", 0.5)),
    "HardSwish": lambda a, at: a[0] * ew.hard_sigmoid_expr(a[0], 1 / 6, 0.5),
    "Gelu": lambda a, at: ew.gelu_expr(a[0], at.get("approximate", "none")),
    "Cast": lambda a, at: te.cast(at["to"], a[0]),
    "Identity": lambda a, at: a[0],
    "Dropout": lambda a, at: a[0],
    "BatchNormalization": _batch_norm,
}


def _load(t: Tensor, idx: tuple, op: str, position: int) -> Expr:
    """t's element for output index idx: numpy broadcasting, or per channel for BatchNorm's parameters."""
    if op == "BatchNormalization" and position > 0:
        return t[(idx[1],)]
    off = len(idx) - t.ndim
    return t[tuple(0 if n == 1 else idx[off + d] for d, n in enumerate(t.shape))]


def epilogue_fn(epilogue: Sequence[EpilogueOp], extras: Sequence[Tensor]) -> EpilogueFn | None:
    """One scalar function computing the whole epilogue DAG from the anchor's value."""
    if not epilogue:
        return None
    for e in epilogue:
        if e.op not in ELEMENTWISE:
            raise UnsupportedTaskError(f"epilogue op {e.op} has no compute definition")

    def fn(v: Expr, idx: tuple) -> Expr:
        steps = [v]
        it = iter(extras)
        for e in epilogue:
            args = [steps[o.step] if o.step is not None else _load(next(it), idx, e.op, k)
                    for k, o in enumerate(e.operands)]
            steps.append(ELEMENTWISE[e.op](args, dict(e.attrs)))
        return steps[-1]
    return fn


def _elementwise_anchor(task: Task, ins: list[Tensor], epi: EpilogueFn | None) -> Tensor:
    attrs = dict(task.attrs)

    def body(*i):
        v = ELEMENTWISE[task.op]([_load(t, i, task.op, k) for k, t in enumerate(ins)], attrs)
        return epi(v, i) if epi else v
    return te.compute(task.out_shapes[0], body, name=task.op.lower(), tag="elementwise")


def _conv(task: Task, ins: list[Tensor], epi: EpilogueFn | None, caps: CpuCapabilities) -> Tensor:
    at = dict(task.attrs)
    if len(task.shapes[0]) != 4:
        raise UnsupportedTaskError(f"Conv over {len(task.shapes[0]) - 2} spatial dims: only 2-D convolution is compiled")
    p = at.get("pads", (0, 0, 0, 0))
    return conv_ops.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None, stride=at.get("strides", (1, 1)),
                           padding=(p[0], p[1], p[2], p[3]), dilation=at.get("dilations", (1, 1)),
                           groups=at.get("group", 1), epilogue=(epi,) if epi else ())


def _conv_nchwc(task: Task, ins: list[Tensor], epi: EpilogueFn | None, caps: CpuCapabilities) -> Tensor:
    """A convolution the layout planner blocked: bias and epilogue on the blocked output."""
    at = dict(task.attrs)
    p = at.get("pads", (0, 0, 0, 0))
    x, w = ins[0], ins[1]
    depthwise = at.get("group", 1) != 1
    y = conv_blocked.conv2d_blocked(x, w, at.get("strides", (1, 1)), (p[0], p[1], p[2], p[3]),
                                    at.get("dilations", (1, 1)), in_block=at["in_block"],
                                    out_block=at["out_block"], depthwise=depthwise)
    pre = (conv_blocked.blocked_bias(ins[2], at["out_block"]),) if len(ins) > 2 else ()
    return apply_epilogue(y, pre + ((epi,) if epi else ()))


def _matmul(task: Task, ins: list[Tensor], epi: EpilogueFn | None, caps: CpuCapabilities) -> Tensor:
    view_a, view_b = operand_views(task.attrs)
    a, b = view_tensor(ins[0], view_a), view_tensor(ins[1], view_b)
    if a.ndim < 2 or b.ndim < 2:
        raise UnsupportedTaskError("MatMul with a 1-D operand is not compiled (only 2-D and batched operands)")
    m, n = a.shape[-2], b.shape[-1]
    # A seen through a view is packed (its index arithmetic then runs once per element, not per
    # FMA) unless the view keeps A's rows contiguous: then the index is affine and A is read in place
    packing = mm_ops.default_packing(m, n, caps, trans_a=not keeps_rows(ins[0].shape, view_a))
    return mm_ops.matmul(a, b, epilogue=(epi,) if epi else (), packing=packing)


def _gemm(task: Task, ins: list[Tensor], epi: EpilogueFn | None, caps: CpuCapabilities) -> Tensor:
    at = dict(task.attrs)
    ta, tb = bool(at.get("transA", 0)), bool(at.get("transB", 0))
    m = ins[0].shape[1] if ta else ins[0].shape[0]
    n = ins[1].shape[0] if tb else ins[1].shape[1]
    return mm_ops.gemm(ins[0], ins[1], ins[2] if len(ins) > 2 else None, at.get("alpha", 1.0), at.get("beta", 1.0),
                       ta, tb, epilogue=(epi,) if epi else (), packing=mm_ops.default_packing(m, n, caps, trans_a=ta))


ANCHORS: dict[str, Callable[[Task, list[Tensor], EpilogueFn | None, CpuCapabilities], Tensor]] = {
    "Conv": _conv, "MatMul": _matmul, "Gemm": _gemm, "ConvNCHWc": _conv_nchwc,
}


def task_compute(task: Task, caps: CpuCapabilities) -> tuple[list[Tensor], list[Tensor]]:
    """(argument placeholders, output tensors) of the task's computation; the matmul panels it
    packs into are sized for `caps`."""
    values = task.input_values
    placeholders = [te.placeholder(v.shape, v.dtype, name=v.name) for v in values]
    ins, extras = placeholders[:len(task.shapes)], placeholders[len(task.shapes):]
    epi = epilogue_fn(task.epilogue, extras)
    if task.op in ANCHORS:
        outs = [ANCHORS[task.op](task, ins, epi, caps)]
    elif task.op in ELEMENTWISE:
        outs = [_elementwise_anchor(task, ins, epi)]
    elif task.op in BY_LANES:
        if epi is not None:
            raise UnsupportedTaskError(f"{task.op} takes no fused epilogue")
        # GPU capabilities have no vector width: the plain forms, which the GPU templates schedule
        lanes = caps.lanes(np.dtype(ins[0].dtype).itemsize) if isinstance(caps, CpuCapabilities) else None
        outs = BY_LANES[task.op](task, ins, lanes)
    elif task.op in OTHERS:
        if epi is not None:
            raise UnsupportedTaskError(f"{task.op} takes no fused epilogue")
        outs = OTHERS[task.op](task, ins)
    else:
        raise UnsupportedTaskError(f"op {task.op} has no compute definition")
    for o, shape in zip(outs, task.out_shapes):
        if tuple(o.shape) != tuple(shape):
            raise UnsupportedTaskError(f"{task.op}: computed shape {list(o.shape)} differs from the graph's {list(shape)}")
    return placeholders, outs


def default_schedule(task: Task, outs: list[Tensor], caps: CpuCapabilities) -> Schedule:
    """The untuned baseline schedule of a task's computation, vectorized for `caps`."""
    vector_lanes = caps.lanes(np.dtype(outs[0].dtype).itemsize)
    if task.op in ("MatMul", "Gemm"):
        return mm_ops.schedule_matmul(outs[0], vector_lanes)
    if task.op == "Conv":
        return conv_ops.schedule_conv2d(outs[0], vector_lanes)
    if task.op == "ConvNCHWc":
        return conv_blocked.schedule_conv2d_blocked(outs[0], vector_lanes)
    if task.op in ELEMENTWISE:
        return ew.schedule_elementwise(outs[0], vector_lanes)
    if len(outs) > 1:
        return _schedule_outputs(outs, vector_lanes)
    return OTHER_SCHEDULES[task.op](outs, vector_lanes)


def _pool(task: Task, ins: list[Tensor]) -> list[Tensor]:
    at = dict(task.attrs)
    if len(task.shapes[0]) != (5 if at.get("block") else 4):
        raise UnsupportedTaskError(f"{task.op} over {len(task.shapes[0]) - 2} spatial dims: only 2-D pooling is compiled")
    p = at["pads"]
    common = dict(kernel=at["kernel_shape"], stride=at["strides"], padding=(p[0], p[1], p[2], p[3]),
                  dilation=at["dilations"], ceil_mode=bool(at.get("ceil_mode", 0)))
    if task.op == "MaxPool":
        return [nn.max_pool2d(ins[0], **common)]
    return [nn.avg_pool2d(ins[0], count_include_pad=bool(at.get("count_include_pad", 0)), **common)]


def _reduce(task: Task, ins: list[Tensor], lanes: int | None) -> list[Tensor]:
    at = dict(task.attrs)
    fn = {"ReduceMean": reduce_ops.reduce_mean, "ReduceSum": reduce_ops.reduce_sum,
          "ReduceMax": reduce_ops.reduce_max}[task.op]
    return [fn(ins[0], at["axes"], bool(at.get("keepdims", 1)), lanes=lanes)]


def _layer_norm(task: Task, ins: list[Tensor], lanes: int | None) -> list[Tensor]:
    at = dict(task.attrs)
    x, axis, eps = ins[0], at["axis"], at.get("epsilon", 1e-5)
    y = nn.layer_norm(x, ins[1], ins[2] if len(ins) > 2 else None, axis, eps,
                      lanes=lanes if len(task.out_shapes) == 1 else None)
    if len(task.out_shapes) == 1:
        return [y]
    # the optional Mean and InvStdDev outputs, over the same axes, kept as size-1 dims
    axes = tuple(range(axis, x.ndim))
    mean = reduce_ops.reduce_mean(x, axes, keepdims=True)
    dev = te.compute(x.shape, lambda *i: te.power(x[i] - mean[i[:axis] + (0,) * len(axes)], 2.0), name="sq_dev")
    var = reduce_ops.reduce_mean(dev, axes, keepdims=True)
    inv = te.compute(var.shape, lambda *i: te.rsqrt(var[i] + te.const(eps, var.dtype)), name="inv_std_dev")
    return [y, mean, inv][:len(task.out_shapes)]


def _pad_source(i: Expr, before: int, n: int, mode: str) -> Expr:
    """The input index that output index `i` reads under a non-constant pad mode."""
    j = i - before
    if mode == "edge":
        return te.min(te.max(j, 0), n - 1)
    if mode == "wrap":
        return j % n
    if n == 1:
        return j * 0
    m = j % (2 * (n - 1))
    return te.select(m < n, m, 2 * (n - 1) - m)


def _pad(task: Task, ins: list[Tensor]) -> list[Tensor]:
    at = dict(task.attrs)
    x, pads, rank = ins[0], at["pads"], len(task.shapes[0])
    widths = [(pads[d], pads[rank + d]) for d in range(rank)]
    if any(b < 0 or a < 0 for b, a in widths):
        raise UnsupportedTaskError("Pad with negative pads (cropping) is not compiled")
    if at.get("mode", "constant") == "constant":
        return [transform.pad(x, widths, value=float(at.get("value", 0)))]
    return [te.compute(task.out_shapes[0], lambda *i: x[tuple(_pad_source(v, b, n, at["mode"])
                                                              for v, (b, _), n in zip(i, widths, x.shape))],
                       name="pad", tag="injective")]


def _slice(task: Task, ins: list[Tensor]) -> list[Tensor]:
    at = dict(task.attrs)
    ranges = [range(s, e, st) for s, e, st in zip(at["starts"], at["ends"], at["steps"])]
    x = ins[0]
    return [te.compute(tuple(len(r) for r in ranges), lambda *i: x[tuple(r.start + r.step * v for r, v in zip(ranges, i))],
                       name="slice", tag="injective")]


def _split(task: Task, ins: list[Tensor]) -> list[Tensor]:
    at = dict(task.attrs)
    axis, x, outs, start = at["axis"], ins[0], [], 0
    for k, size in enumerate(at["split"]):
        outs.append(te.compute(task.out_shapes[k], lambda *i, s0=start: x[i[:axis] + (i[axis] + s0,) + i[axis + 1:]],
                               name=f"split{k}", tag="injective"))
        start += size
    return outs


def _gather(task: Task, ins: list[Tensor]) -> list[Tensor]:
    axis = dict(task.attrs)["axis"]
    x, idx = ins
    q = idx.ndim

    def body(*i):
        pos = te.cast("int32", idx[i[axis:axis + q]]) if q else te.cast("int32", idx[()])
        return x[i[:axis] + (pos,) + i[axis + q:]]
    return [te.compute(task.out_shapes[0], body, name="gather", tag="injective")]


OTHERS: dict[str, Callable[[Task, list[Tensor]], list[Tensor]]] = {
    "MaxPool": _pool, "AveragePool": _pool,
    "Reshape": lambda task, ins: [transform.reshape(ins[0], task.out_shapes[0])],
    "Transpose": lambda task, ins: [transform.transpose(ins[0], dict(task.attrs)["perm"])],
    "Concat": lambda task, ins: [transform.concat(ins, dict(task.attrs)["axis"])],
    "Pad": _pad, "Slice": _slice, "Split": _split, "Gather": _gather,
    "LayoutTransform": lambda task, ins: [conv_blocked.layout_transform(ins[0], dict(task.attrs)["src_block"],
                                                                        dict(task.attrs)["dst_block"])],
}


#: ops whose compute definition takes the target's vector width (reductions split into lanes)
BY_LANES: dict[str, Callable[[Task, list[Tensor], int | None], list[Tensor]]] = {
    "Softmax": lambda task, ins, lanes: [nn.softmax(ins[0], dict(task.attrs)["axis"], lanes=lanes)],
    "LayerNormalization": _layer_norm,
    "ReduceMean": _reduce, "ReduceSum": _reduce, "ReduceMax": _reduce,
}


def _each(schedule: Callable[[Tensor, int], Schedule]) -> Callable[[list[Tensor], int], Schedule]:
    return lambda outs, lanes: schedule(outs[0], lanes)


def _schedule_outputs(outs: list[Tensor], lanes: int) -> Schedule:
    """For kernels with several outputs: every stage at root, its outermost loop parallel."""
    s = create_schedule(outs)
    for st in s.stages:
        if st.op.axes and st.op.axes[0].extent > 1:
            st.parallel(st.op.axes[0])
    return s


OTHER_SCHEDULES: dict[str, Callable[[list[Tensor], int], Schedule]] = {
    "Split": _schedule_outputs,
    "MaxPool": _each(nn.schedule_pool2d), "AveragePool": _each(nn.schedule_pool2d),
    "ReduceMean": _each(reduce_ops.schedule_reduce), "ReduceSum": _each(reduce_ops.schedule_reduce),
    "ReduceMax": _each(reduce_ops.schedule_reduce),
    "Softmax": _each(nn.schedule_softmax), "LayerNormalization": _each(nn.schedule_layer_norm),
    **{op: _each(transform.schedule_injective)
       for op in ("Reshape", "Transpose", "Concat", "Pad", "Slice", "Gather", "LayoutTransform")},
}
