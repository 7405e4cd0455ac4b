"""What one graph op is: the record every stage of the pipeline reads.

An op is imported from ONNX (`importers`), given output shapes (`shape`), evaluated in numpy
as the ground truth (`reference`), compiled as tensor expressions (`compute`) and scheduled
when no tuned configuration exists (`schedule`). Its `kind` is what fusion and layout planning
reason about. Elementwise ops also carry their scalar form (`scalar`), which is how they are
fused into an anchor's epilogue.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched.errors import AutoschedError
from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.ops.epilogue import EpilogueFn
from autosched.opset.algebra import AlgebraOp
from autosched.schedule import Schedule
from autosched.target import Capabilities, CpuCapabilities
from autosched.te import Expr, Tensor

Shape = tuple[int, ...]
#: output (shape, dtype) pairs of a node given its input values; raises ValueError/IndexError/KeyError
ShapeFn = Callable[[Node, Sequence[Value]], list[tuple[Shape, str]]]
#: outputs of the op with the given attributes on concrete arrays, with ONNX semantics
ReferenceFn = Callable[[Mapping[str, Any], list[np.ndarray]], list[np.ndarray]]
#: the value of one output element from its operands' elements (already loaded)
ScalarFn = Callable[[list[Expr], Mapping[str, Any]], Expr]
#: operand `position`'s element that output index `idx` reads
OperandLoad = Callable[[Tensor, tuple, int], Expr]
#: the untuned schedule of a computation's outputs, vectorized `lanes` wide
ScheduleFn = Callable[[list[Tensor], int], Schedule]


class OpKind(str, enum.Enum):
    """Families of operators, as fusion sees them."""

    ANCHOR = "anchor"  # compute-heavy: absorbs elementwise consumers
    ELEMWISE = "elemwise"  # one output element from the same element of each input
    REDUCE = "reduce"  # reduces along axes; its own fused group
    POOL = "pool"  # windowed reduction; its own fused group
    INJECTIVE = "injective"  # moves data (reshape, transpose, ...); its own group


class UnknownOpError(AutoschedError):
    """An op (graph op or ONNX op type) that no record describes."""


class UnsupportedTaskError(AutoschedError):
    """No compute definition exists for a task's op or attributes."""


@dataclass(frozen=True)
class ComputeArgs:
    """What a compute definition reads of a task: the anchor's attributes and operand
    placeholders, the shapes the graph expects it to write, the fused epilogue (anchors and
    elementwise ops only), and the target's capabilities (matmul panels and reduction lanes are
    sized for them)."""

    attrs: Mapping[str, Any]
    inputs: tuple[Tensor, ...]
    out_shapes: tuple[Shape, ...]
    epilogue: EpilogueFn | None
    caps: Capabilities

    @property
    def epilogues(self) -> tuple[EpilogueFn, ...]:
        return (self.epilogue,) if self.epilogue else ()

    @property
    def lanes(self) -> int | None:
        """Vector lanes of the first operand's dtype; None on GPUs, whose templates schedule
        the plain (unsplit) forms."""
        if not isinstance(self.caps, CpuCapabilities):
            return None
        return self.caps.lanes(np.dtype(self.inputs[0].dtype).itemsize)


ComputeFn = Callable[[ComputeArgs], list[Tensor]]


@dataclass(frozen=True)
class OpDef:
    """Everything autosched knows about one graph op.

    `importers` maps each ONNX op type that becomes this op to its converter (Flatten, Squeeze
    and Unsqueeze all become Reshape); an op only layout planning creates has none. `scalar` and
    `operand_load` are set for elementwise ops only. `algebra` holds the symbols the op
    contributes to graph substitutions (`opset/algebra.py`); ops no substitution touches have none.
    `in_place` says the op's CPU kernel reads each position of its first input only before it
    writes that position of its output, and no other, so the memory planner may give the output
    the input's bytes where nothing reads the input afterwards (`plan_memory`).
    """

    op: Op
    kind: OpKind
    shape: ShapeFn
    reference: ReferenceFn
    compute: ComputeFn
    schedule: ScheduleFn
    importers: Mapping[str, Converter] = field(default_factory=dict)
    scalar: ScalarFn | None = None
    operand_load: OperandLoad | None = None
    algebra: tuple[AlgebraOp, ...] = ()
    in_place: bool = False


def on_output(schedule: Callable[[Tensor, int], Schedule]) -> ScheduleFn:
    """A schedule function of one output as a `ScheduleFn`."""
    return lambda outs, lanes: schedule(outs[0], lanes)


def same_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    """The output is shaped and typed like the first input."""
    return [(inputs[0].shape, inputs[0].dtype)]


def contiguous(array: np.ndarray) -> np.ndarray:
    """C-ordered `array`; unlike np.ascontiguousarray, keeps 0-d arrays 0-d."""
    return array if array.flags.c_contiguous else array.copy()


def direct(op: Op, **defaults: object) -> Converter:
    """A converter for ONNX ops whose form is already the IR's: attributes as given, or their
    ONNX defaults."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        attrs = {key: node.attr(key, default) for key, default in defaults.items()}
        imp.emit(node, op, node.inputs, node.outputs, attrs)

    return Converter(convert)
