"""A chain of copies as one op (`graph/passes/fuse_copies.py` makes them; no ONNX op imports as it).

Its attribute `steps` lists the copies in order, each as (op, attributes as sorted pairs, output
shape); its shape, reference and compute are theirs applied one after the other. The compute is
their tensor expressions nested, and the injective schedule inlines every stage into the last:
one loop nest reads the chain's input where the composed index map says, and nothing in between
is written. A chain headed by a Concat has one input per concatenated value, and `branches`
lists the copies each input goes through before the Concat (none, or a padded convolution's
result converted back to plain and sliced); its first step is the Concat of them all.
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
        def run(steps: Sequence[Step], xs: list[np.ndarray]) -> list[np.ndarray]:
            for op, step_attrs, _ in steps:
                xs = record_of(op).reference(dict(step_attrs), xs)
            return xs

        branches = attrs.get("branches", ((),) * len(args))
        return run(attrs["steps"], [run(b, [x])[0] for b, x in zip(branches, args)])

    def compute(args: ComputeArgs) -> list[Tensor]:
        def run(steps: Sequence[Step], xs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            for op, step_attrs, step_shape in steps:
                xs = tuple(record_of(op).compute(ComputeArgs(dict(step_attrs), xs, (tuple(step_shape),), None,
                                                             args.caps)))
            return xs

        branches = args.attrs.get("branches", ((),) * len(args.inputs))
        return list(run(args.attrs["steps"], tuple(run(b, (x,))[0] for b, x in zip(branches, args.inputs))))

    return (OpDef(Op.COPY_CHAIN, OpKind.INJECTIVE, shape, reference, compute, on_output(transform.schedule_injective)),)
