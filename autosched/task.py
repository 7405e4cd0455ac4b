"""Tasks: the distinct workloads of a model, each tuned once.

A `Task` describes one fused group structurally — op, attributes, operand
shapes and dtypes, the fused epilogue — and nothing about where it sits in
a model: no node or value names.  Its `key` is a canonical JSON rendering of
that description, so the same subgraph in any model, or twice in one model,
gets the same key, and tuning records found under a key apply to it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.fuse import FusedGroup, fuse
from autosched.graph.reference import eval_node, random_inputs
from autosched.graph.views import operand_views, view_shape
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

Shape = tuple[int, ...]
Attrs = tuple[tuple[str, Any], ...]


#: a MatMul/Gemm task attribute: the anchor inputs that are constants of the model (a dense
#: layer's weight and bias). Part of the key, because a build packs those once and tuning must
#: time the kernel the same way (`autosched.measure.fold`); a matmul of two activations repacks
#: B at every call and is another workload.
WEIGHT_INPUTS_ATTR = "weight_inputs"


@dataclass(frozen=True)
class Operand:
    """One operand of an epilogue op.

    Either `step`, a value the group computed: 0 is the anchor's result,
    k ≥ 1 the result of epilogue op k; or an extra tensor the kernel reads,
    described by `shape` and `dtype` (and passed after the anchor's inputs,
    in order of appearance).
    """

    step: int | None = None
    shape: Shape | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class EpilogueOp:
    """An elementwise op applied to the chain, in group order."""

    op: str
    attrs: Attrs
    operands: tuple[Operand, ...]
    dtype: str  # result dtype; the shape is always the anchor's output shape


@dataclass(frozen=True)
class Task:
    """A workload to tune: everything needed to rebuild its computation.

    `op`, `attrs`, `shapes` and `dtypes` describe the anchor and its inputs
    (attributes as sorted (name, value) pairs); `epilogue` the fused ops
    after it; `out_shapes`/`out_dtypes` what the group writes.  `flops`
    counts one occurrence; `weight` is how many groups of the model share
    this task.
    """

    key: str
    op: str
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    attrs: Attrs
    epilogue: tuple[EpilogueOp, ...]
    out_shapes: tuple[Shape, ...]
    out_dtypes: tuple[str, ...]
    flops: int
    weight: int = 1

    @property
    def extra_inputs(self) -> tuple[Operand, ...]:
        """The epilogue's extra tensors, in the order the kernel takes them."""
        return tuple(o for e in self.epilogue for o in e.operands if o.step is None)

    @property
    def input_values(self) -> tuple[Value, ...]:
        """Every tensor a kernel of this task reads, in argument order: anchor operands, then extras."""
        anchor = [Value(f"in{k}", s, d) for k, (s, d) in enumerate(zip(self.shapes, self.dtypes))]
        extra = []
        for k, o in enumerate(self.extra_inputs):
            if o.shape is None or o.dtype is None:  # an extra tensor is always described
                raise ValueError(f"task {self.key}: epilogue operand {k} has neither a step nor a shape and dtype")
            extra.append(Value(f"extra{k}", o.shape, o.dtype))
        return tuple(anchor + extra)

    def random_inputs(self, seed: int) -> list[np.ndarray]:
        """Seeded arguments for measuring and checking candidates."""
        data = random_inputs(self.input_values, seed)
        return [data[v.name] for v in self.input_values]

    def reference(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """What every kernel of this task must compute, by the graph's numpy evaluator."""
        n = len(self.shapes)
        anchor = Node("anchor", Op(self.op), tuple(f"in{k}" for k in range(n)),
                      tuple(f"out{k}" for k in range(len(self.out_shapes))), dict(self.attrs))
        results = eval_node(anchor, inputs[:n])
        if not self.epilogue:
            return results
        extras = iter(inputs[n:])
        steps = [results[0]]
        for e in self.epilogue:
            args = [steps[o.step] if o.step is not None else next(extras) for o in e.operands]
            node = Node("epilogue", Op(e.op), tuple(f"a{k}" for k in range(len(args))), ("y",), dict(e.attrs))
            steps.append(eval_node(node, args)[0])
        return [steps[-1]]


@dataclass(frozen=True)
class TaskSet:
    """A model's tasks, its fused groups, and which task runs each group."""

    tasks: tuple[Task, ...]
    groups: tuple[FusedGroup, ...]
    group_tasks: tuple[int, ...]  # index into `tasks`, one per group

    def task_of(self, group_index: int) -> Task:
        return self.tasks[self.group_tasks[group_index]]

    @property
    def total_flops(self) -> int:
        return sum(t.flops * t.weight for t in self.tasks)


def extract_tasks(graph: Graph, groups: Sequence[FusedGroup] | None = None) -> TaskSet:
    """Deduplicated tasks of `graph` (fused with `fuse` unless groups are given)."""
    groups = tuple(fuse(graph) if groups is None else groups)
    by_key: dict[str, Task] = {}
    group_keys = []
    for group in groups:
        task = task_for_group(graph, group)
        earlier = by_key.get(task.key)
        by_key[task.key] = task if earlier is None else dataclasses.replace(earlier, weight=earlier.weight + 1)
        group_keys.append(task.key)
    order = {key: i for i, key in enumerate(by_key)}
    return TaskSet(tuple(by_key.values()), groups, tuple(order[key] for key in group_keys))


def task_for_group(graph: Graph, group: FusedGroup) -> Task:
    """The Task (weight 1) of one fused group."""
    anchor = group.anchor
    values = graph.values
    steps = {anchor.outputs[0]: 0}
    epilogue = []
    for k, node in enumerate(group.epilogue, start=1):
        operands = tuple(
            Operand(step=steps[name]) if name in steps else Operand(shape=values[name].shape, dtype=values[name].dtype)
            for name in node.inputs
        )
        epilogue.append(EpilogueOp(node.op.value, _attrs(node.attrs), operands, values[node.outputs[0]].dtype))
        steps[node.outputs[0]] = k
    attrs = dict(anchor.attrs)
    if anchor.op in (Op.MATMUL, Op.GEMM, Op.INTEGER_MATMUL):
        weights = tuple(k for k, name in enumerate(anchor.inputs) if name in graph.constants)
        if weights:
            attrs[WEIGHT_INPUTS_ATTR] = weights
    fields: _TaskFields = {
        "op": anchor.op.value,
        "shapes": tuple(values[name].shape for name in anchor.inputs),
        "dtypes": tuple(values[name].dtype for name in anchor.inputs),
        "attrs": _attrs(attrs),
        "epilogue": tuple(epilogue),
        "out_shapes": tuple(values[name].shape for name in group.outputs),
        "out_dtypes": tuple(values[name].dtype for name in group.outputs),
    }
    flops = _anchor_flops(graph, anchor) + sum(_elementwise_flops(graph, node) for node in group.epilogue)
    return Task(key=_key(fields), flops=flops, **fields)


def _attrs(attrs: Mapping[str, Any]) -> Attrs:
    return tuple(sorted((name, _tuples(v)) for name, v in attrs.items()))


def _tuples(v: Any) -> Any:
    """Lists (from JSON) as tuples, at every depth: MatMul's operand views nest them."""
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


class _TaskFields(TypedDict):
    """A task's structure, the fields its key digests (all but `key`, `flops` and `weight`)."""

    op: str
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    attrs: Attrs
    epilogue: tuple[EpilogueOp, ...]
    out_shapes: tuple[Shape, ...]
    out_dtypes: tuple[str, ...]


def _operand_key(o: Operand) -> int | list:
    """An epilogue operand in a key: its step, or an extra tensor's [shape, dtype]."""
    if o.step is not None:
        return o.step
    if o.shape is None:  # an extra tensor is always described
        raise ValueError("epilogue operand has neither a step nor a shape")
    return [list(o.shape), o.dtype]


def _key(fields: _TaskFields) -> str:
    """Canonical JSON of a task's structure: compact, key-sorted, names excluded."""
    epilogue = [
        [e.op, dict(e.attrs), [_operand_key(o) for o in e.operands], e.dtype]
        for e in fields["epilogue"]
    ]
    body = {
        "op": fields["op"],
        "in": [[list(s), d] for s, d in zip(fields["shapes"], fields["dtypes"])],
        "attrs": dict(fields["attrs"]),
        "epilogue": epilogue,
        "out": [[list(s), d] for s, d in zip(fields["out_shapes"], fields["out_dtypes"])],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _anchor_flops(graph: Graph, node: Node) -> int:
    """Floating-point operations of the anchor, multiply-add counted as two."""
    shape = {name: graph.values[name].shape for name in (*node.inputs, *node.outputs)}
    out = shape[node.outputs[0]]
    out_size = math.prod(out)
    if node.op in (Op.CONV, Op.CONV_NCHWC, Op.INTEGER_CONV_NCHWC):
        weight = shape[node.inputs[1]]
        macs = out_size * math.prod(weight[1:])
        return 2 * macs + (out_size if len(node.inputs) == 3 else 0)
    if node.op in (Op.MATMUL, Op.GEMM):
        a = view_shape(shape[node.inputs[0]], operand_views(node.attrs)[0])
        k = a[0] if node.op is Op.GEMM and node.attrs["transA"] else a[-1]
        return 2 * out_size * k + (out_size if len(node.inputs) == 3 else 0)
    if node.op is Op.INTEGER_MATMUL:  # integer operations, counted as the float product's
        return 2 * out_size * shape[node.inputs[0]][-1]
    if kind_of(node.op) is OpKind.POOL:
        return out_size * math.prod(node.attrs["kernel_shape"])
    if kind_of(node.op) is OpKind.REDUCE:
        size = math.prod(shape[node.inputs[0]])
        return {Op.SOFTMAX: 4 * size, Op.LAYER_NORM: 7 * size}.get(node.op, size)
    if kind_of(node.op) is OpKind.ELEMWISE:
        return _elementwise_flops(graph, node)
    return 0


def _elementwise_flops(graph: Graph, node: Node) -> int:
    size = math.prod(graph.values[node.outputs[0]].shape)
    if node.op in (Op.IDENTITY, Op.DROPOUT, Op.CAST):
        return 0
    return 2 * size if node.op is Op.BATCH_NORM else size


def task_from_key(key: str, flops: int = 0, weight: int = 1) -> Task:
    """The Task a key describes (the inverse of `_key`), for records of workloads no model at hand
    contains: a database's other workloads train cost models by transfer. Raises ValueError for a
    string that is not a task key."""
    try:
        body = json.loads(key)
        epilogue = tuple(
            EpilogueOp(op, _attrs(attrs), tuple(Operand(step=o) if isinstance(o, int)
                                                else Operand(shape=tuple(o[0]), dtype=o[1]) for o in operands), dtype)
            for op, attrs, operands, dtype in body["epilogue"])
        fields: _TaskFields = {
            "op": body["op"],
            "shapes": tuple(tuple(s) for s, _ in body["in"]),
            "dtypes": tuple(d for _, d in body["in"]),
            "attrs": _attrs(body["attrs"]),
            "epilogue": epilogue,
            "out_shapes": tuple(tuple(s) for s, _ in body["out"]),
            "out_dtypes": tuple(d for _, d in body["out"]),
        }
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"not a task key ({type(e).__name__}: {e}): {key[:80]}") from None
    if _key(fields) != key:
        raise ValueError(f"not a canonical task key: {key[:80]}")
    return Task(key=key, flops=flops, weight=weight, **fields)
