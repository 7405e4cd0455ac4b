"""A chain of copies as one op (`graph/passes/fuse_copies.py` makes them; no ONNX op imports as it).

Its attribute `steps` lists the copies in order, each as (op, attributes as sorted pairs, output
shape); its shape, reference and compute are theirs applied one after the other. The compute is
their tensor expressions nested, and the injective schedule inlines every stage into the last:
one loop nest reads the chain's input where the composed index map says, and nothing in between
is written.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from autosched.graph.ir import Node, Op, Value
from autosched.ops import transform
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape, on_output
from autosched.te import Tensor

#: (op, attributes as sorted (name, value) pairs, output shape)
Step = tuple[str, tuple[tuple[str, Any], ...], Shape]


def chain_step(node: Node, shape: Shape) -> Step:
    """The step of `steps` that does what `node` does, writing `shape`."""
    return node.op.value, tuple(sorted(node.attrs.items())), tuple(shape)


def chain_records(record_of: Callable[[str], OpDef]) -> tuple[OpDef, ...]:
    """The CopyChain record, reading its steps' records through `record_of` (the registry, which
    holds this record too, passes its own lookup)."""

    def shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
        return [(tuple(node.attrs["steps"][-1][2]), inputs[0].dtype)]

    def reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
        x = args[0]
        for op, step_attrs, _ in attrs["steps"]:
            (x,) = record_of(op).reference(dict(step_attrs), [x])
        return [x]

    def compute(args: ComputeArgs) -> list[Tensor]:
        x = args.inputs[0]
        for op, step_attrs, step_shape in args.attrs["steps"]:
            (x,) = record_of(op).compute(ComputeArgs(dict(step_attrs), (x,), (tuple(step_shape),), None, args.caps))
        return [x]

    return (OpDef(Op.COPY_CHAIN, OpKind.INJECTIVE, shape, reference, compute, on_output(transform.schedule_injective)),)
