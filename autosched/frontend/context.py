"""The state an ONNX import builds up, and the view of one ONNX node.

Converters (each op's `importers` in `autosched.opset`) read an `OnnxNode` and
call the `Importer` to add IR nodes or constants.  Everything a converter
reports goes through `OnnxNode.error`, so each message names the model file
and the node.  The importer is handed shape inference and the numpy
evaluator rather than importing them: both dispatch through the op records,
which are built on the types defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from autosched.errors import FrontendError, GraphError
from autosched.graph.ir import DTYPES, Node, Op, Value

if TYPE_CHECKING:
    import onnx
# onnx itself is imported where a proto is read: the op records import this module, and every
# process that builds or measures a kernel imports them (Ray's workers among them), while
# `import onnx` alone takes 1-2 s (ml_dtypes' extension)

#: output values of a node given its input values (`autosched.graph.shapes.infer`)
InferFn = Callable[[Node, Sequence[Value]], list[Value]]
#: outputs of a node on concrete arrays (`autosched.graph.reference.eval_node`)
EvalFn = Callable[[Node, Sequence[np.ndarray]], list[np.ndarray]]


def numpy_dtype(elem_type: int) -> str | None:
    """Numpy name of an ONNX element type, or None if the IR cannot carry it."""
    from onnx import helper
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in DTYPES else None


def type_name(elem_type: int) -> str:
    """ONNX's name for an element type, for messages."""
    import onnx
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def _shortest_float(value: float) -> float:
    """The float32 attribute as its author wrote it: 1e-12, not 9.99999996e-13.

    Keeps workload keys readable; the difference is below float32 precision.
    """
    return float(str(np.float32(value)))


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node as converters see it.

    `inputs`/`outputs` keep ONNX's empty strings for omitted optional operands.
    `constants` holds the already-evaluated values of the operands the op's
    converter declares constant, by input position.
    """

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    source: str
    constants: Mapping[int, np.ndarray] = field(default_factory=dict)

    @staticmethod
    def from_proto(proto: onnx.NodeProto, index: int, source: str) -> OnnxNode:
        import onnx
        from onnx import helper
        attrs = {}
        for attr in proto.attribute:
            value = helper.get_attribute_value(attr)
            if attr.type == onnx.AttributeProto.FLOAT:
                value = _shortest_float(value)
            elif attr.type == onnx.AttributeProto.FLOATS:
                value = [_shortest_float(v) for v in value]
            elif isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode() for v in value]
            attrs[attr.name] = value
        return OnnxNode(
            name=proto.name or f"{proto.op_type}_{index}",
            op_type=proto.op_type,
            domain=proto.domain,
            inputs=tuple(proto.input),
            outputs=tuple(proto.output),
            attrs=attrs,
            source=source,
        )

    def error(self, message: str) -> FrontendError:
        return FrontendError(f"{self.source}: node '{self.name}' ({self.op_type}): {message}")

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] != ""

    def const(self, index: int) -> np.ndarray | None:
        """Value of a declared-constant operand, None if omitted."""
        return self.constants.get(index)

    def required_const(self, index: int) -> np.ndarray:
        """Value of a declared-constant operand the op cannot do without: an error naming the
        node, not a failure deep in its converter, when the model omits it."""
        value = self.constants.get(index)
        if value is None:
            raise self.error(f"input {index} is required (a constant) but omitted")
        return value

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def used_outputs(self) -> list[int]:
        return [i for i, name in enumerate(self.outputs) if name]


def normalize_axis(node: OnnxNode, axis: int | None, rank: int) -> int:
    """`axis` in [0, rank), checked against the operand's rank."""
    if axis is None:
        raise node.error("the axis attribute is missing")
    if not -rank <= axis < max(rank, 1):
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def normalize_axes(node: OnnxNode, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; a repeated axis is an error."""
    normalized = [normalize_axis(node, int(a), rank) for a in axes]
    if len(set(normalized)) != len(normalized):
        raise node.error(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(normalized))


@overload
def ints(array: np.ndarray) -> list[int]: ...
@overload
def ints(array: np.ndarray | None) -> list[int] | None: ...
def ints(array: np.ndarray | None) -> list[int] | None:
    """A constant operand's values as Python ints (None if omitted)."""
    return None if array is None else [int(v) for v in array.reshape(-1)]


class Importer:
    """Values, constants and IR nodes of a graph under import."""

    def __init__(self, source: str, infer: InferFn, evaluate: EvalFn) -> None:
        self.source = source
        self._infer = infer
        self._evaluate = evaluate
        self.values: dict[str, Value] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []

    def value(self, name: str) -> Value:
        return self.values[name]

    def add_input(self, value: Value) -> None:
        self.values[value.name] = value

    def add_constant(self, name: str, array: np.ndarray) -> None:
        array = np.asarray(array)
        array = array if array.flags.c_contiguous else array.copy()
        self.constants[name] = array
        self.values[name] = Value(name, tuple(int(d) for d in array.shape), array.dtype.name)

    def emit(self, onnx_node: OnnxNode, op: Op, inputs: Sequence[str], outputs: Sequence[str], attrs: Mapping[str, Any]) -> None:
        """Add one IR node for `onnx_node`, inferring its output values."""
        node = Node(onnx_node.name, op, tuple(inputs), tuple(outputs), dict(attrs))
        try:
            results = self._infer(node, [self.values[name] for name in inputs])
        except GraphError as exc:
            raise onnx_node.error(str(exc).split(": ", 1)[-1]) from exc
        for value in results:
            self.values[value.name] = value
        self.nodes.append(node)

    def emit_step(self, onnx_node: OnnxNode, label: str, op: Op, inputs: Sequence[str],
                  attrs: Mapping[str, Any]) -> str:
        """One IR node of an ONNX op that imports as several: named after the ONNX node and
        `label` (so errors still point at the node), its one output a new value whose name
        this returns."""
        out = f"{onnx_node.outputs[0] or onnx_node.name}:{label}"
        self.emit(replace(onnx_node, name=f"{onnx_node.name}/{label}"), op, inputs, [out], attrs)
        return out

    def computable(self, name: str) -> bool:
        """Whether `name` is a constant or computed from constants alone: what `constant_value`
        can fold."""
        producers = {out: node for node in self.nodes for out in node.outputs}
        seen, todo = set(), [name]
        while todo:  # every value behind `name` must be a constant or have a producer
            value = todo.pop()
            if value in seen or value in self.constants:
                continue
            seen.add(value)
            producer = producers.get(value)
            if producer is None:
                return False
            todo.extend(producer.inputs)
        return True

    def constant_value(self, name: str, reader: OnnxNode) -> np.ndarray:
        """The value of `name`, folding the constant subgraph behind it if needed.

        Static shapes need the values of shape operands; in exported models
        these are often computed (Shape → Gather → Concat) rather than stored,
        so the producing IR nodes are evaluated here and replaced by constants.
        """
        if name in self.constants:
            return self.constants[name]
        producer = next((node for node in self.nodes if name in node.outputs), None)
        if producer is None:
            raise reader.error(f"operand '{name}' must be a constant (autosched compiles static shapes only)")
        args = [self.constant_value(arg, reader) for arg in producer.inputs]
        self.nodes.remove(producer)
        for out, result in zip(producer.outputs, self._evaluate(producer, args)):
            self.add_constant(out, result)
        return self.constants[name]


@dataclass(frozen=True)
class Converter:
    """Imports one ONNX op type. `constant_inputs` are the operand positions that must be
    constants for shapes to be static; the importer folds them before `fn` runs."""

    fn: Callable[[Importer, OnnxNode], None]
    constant_inputs: tuple[int, ...] = ()
