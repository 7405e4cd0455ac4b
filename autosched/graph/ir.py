"""The graph IR that every stage after the frontend reads.

A `Graph` is a static-shape dataflow graph: every value has a known shape and
dtype, every node's attributes are normalized (explicit pads, non-negative
axes, constant operands folded into attributes), and nodes are stored in
topological order.  Operators come from one closed vocabulary, `Op`; what
each one means (its shape, numpy semantics, kernel and family) is its record
in `autosched.opset`.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from autosched.errors import GraphError


class Op(str, enum.Enum):
    """Operators of the IR; the value is the ONNX op type they come from.

    The vocabulary is declared here, below the op records (autosched.opset), because records
    and passes alike name ops through it; the registry checks at import that every member
    has exactly one record.
    """

    CONV = "Conv"
    GEMM = "Gemm"
    MATMUL = "MatMul"
    INTEGER_MATMUL = "IntegerMatMul"  # uint8 by int8 into int32 (`graph/passes/integer_matmul.py`)
    ADD = "Add"
    SUB = "Sub"
    MUL = "Mul"
    DIV = "Div"
    POW = "Pow"
    SQRT = "Sqrt"
    ERF = "Erf"
    EXP = "Exp"
    LOG = "Log"
    TANH = "Tanh"
    SIGMOID = "Sigmoid"
    SOFTSIGN = "Softsign"
    RELU = "Relu"
    LEAKY_RELU = "LeakyRelu"
    CLIP = "Clip"
    HARD_SIGMOID = "HardSigmoid"
    HARD_SWISH = "HardSwish"
    GELU = "Gelu"
    ELU = "Elu"
    SELU = "Selu"
    CELU = "Celu"
    THRESHOLDED_RELU = "ThresholdedRelu"
    SOFTPLUS = "Softplus"
    MISH = "Mish"
    SWISH = "Swish"
    PRELU = "PRelu"
    SHRINK = "Shrink"
    ABS = "Abs"
    NEG = "Neg"
    FLOOR = "Floor"
    CEIL = "Ceil"
    ROUND = "Round"
    RECIPROCAL = "Reciprocal"
    SIGN = "Sign"
    MOD = "Mod"
    SIN = "Sin"
    COS = "Cos"
    TAN = "Tan"
    ASIN = "Asin"
    ACOS = "Acos"
    ATAN = "Atan"
    SINH = "Sinh"
    COSH = "Cosh"
    ASINH = "Asinh"
    ACOSH = "Acosh"
    ATANH = "Atanh"
    MAX = "Max"
    MIN = "Min"
    EQUAL = "Equal"
    LESS = "Less"
    LESS_OR_EQUAL = "LessOrEqual"
    GREATER = "Greater"
    GREATER_OR_EQUAL = "GreaterOrEqual"
    AND = "And"
    OR = "Or"
    XOR = "Xor"
    NOT = "Not"
    IS_NAN = "IsNaN"
    IS_INF = "IsInf"
    WHERE = "Where"
    BITWISE_AND = "BitwiseAnd"
    BITWISE_OR = "BitwiseOr"
    BITWISE_XOR = "BitwiseXor"
    BITWISE_NOT = "BitwiseNot"
    BIT_SHIFT = "BitShift"
    CAST = "Cast"
    IDENTITY = "Identity"
    DROPOUT = "Dropout"
    BATCH_NORM = "BatchNormalization"
    MAX_POOL = "MaxPool"
    AVERAGE_POOL = "AveragePool"
    SOFTMAX = "Softmax"
    LAYER_NORM = "LayerNormalization"
    REDUCE_MEAN = "ReduceMean"
    REDUCE_SUM = "ReduceSum"
    REDUCE_MAX = "ReduceMax"
    REDUCE_MIN = "ReduceMin"
    REDUCE_RANGE = "ReduceRange"  # the maximum and the minimum of every element (`graph/passes/reduce_range.py`)
    REDUCE_PROD = "ReduceProd"
    CUM_SUM = "CumSum"
    RESHAPE = "Reshape"
    TRANSPOSE = "Transpose"
    CONCAT = "Concat"
    SPLIT = "Split"
    SLICE = "Slice"
    GATHER = "Gather"
    GATHER_ELEMENTS = "GatherElements"
    PAD = "Pad"
    EXPAND = "Expand"
    RESIZE = "Resize"
    GRID_SAMPLE = "GridSample"
    # not ONNX: what layout planning (graph/passes/layout.py) rewrites convolutions and the
    # tensors between them into, channels cut into blocks that are the innermost axis
    CONV_NCHWC = "ConvNCHWc"
    INTEGER_CONV_NCHWC = "IntegerConvNCHWc"  # uint8 by int8 into int32 (`graph/passes/integer_conv.py`)
    LAYOUT_TRANSFORM = "LayoutTransform"
    # not ONNX: a chain of copies composed into one (graph/passes/fuse_copies.py)
    COPY_CHAIN = "CopyChain"

    def __str__(self) -> str:
        return self.value


# Dtypes the IR can carry, by numpy name.
DTYPES: frozenset[str] = frozenset(
    {
        "float16", "float32", "float64", "bool",
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    }
)


@dataclass(frozen=True)
class Value:
    """A tensor flowing through the graph: its static shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Node:
    """One operator application.

    `name` is the ONNX node name (or a generated one) so errors and reports
    point at what the user wrote.  `attrs` holds plain Python values (ints,
    floats, strings, tuples) only, so they can enter workload keys as is.
    """

    name: str
    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)


class Operation(Protocol):
    """Anything with a name and named inputs and outputs: IR nodes, ONNX nodes."""

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...


N = TypeVar("N", bound=Operation)


def toposort(nodes: Iterable[N], available: Iterable[str]) -> list[N]:
    """Order `nodes` so each comes after the producers of its inputs.

    Ties keep the given order, so an already sorted list comes back unchanged.
    Raises GraphError naming the reader of a value nobody produces, the nodes
    of a cycle, or the two producers of one value.
    """
    nodes = list(nodes)
    if _in_order(nodes, available):
        return nodes
    ready_values = set(available)
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.outputs:
            if out in producer or out in ready_values:
                first = nodes[producer[out]].name if out in producer else "a graph input or constant"
                raise GraphError(f"value '{out}' is produced twice: by '{first}' and by node '{node.name}'")
            producer[out] = i
    for node in nodes:
        for name in node.inputs:
            if name not in producer and name not in ready_values:
                raise GraphError(
                    f"node '{node.name}' reads '{name}', which is neither produced by a node "
                    "nor a graph input or constant"
                )
    waiting = [sum(1 for name in node.inputs if name in producer) for node in nodes]
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            if name in producer:
                readers.setdefault(name, []).append(i)
    heap = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(heap)
    order: list[N] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(nodes[i])
        for out in nodes[i].outputs:
            for reader in readers.get(out, ()):
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    heapq.heappush(heap, reader)
    if len(order) < len(nodes):
        raise GraphError(f"cycle through nodes {_find_cycle(nodes, producer, waiting)}")
    return order


def _in_order(nodes: Sequence[Operation], available: Iterable[str]) -> bool:
    """Whether every node reads only values produced before it and writes only new ones: then
    Kahn's order (ties by position) is the given one. Every pass's result is checked again, and
    most are already sorted: an unrolled LSTM's 1,900 nodes took 7 ms a sort, 100 sorts a search."""
    defined = set(available)
    for node in nodes:
        if (not defined.issuperset(node.inputs) or not defined.isdisjoint(node.outputs)
                or len(set(node.outputs)) < len(node.outputs)):
            return False
        defined.update(node.outputs)
    return True


def _find_cycle(nodes: Sequence[Operation], producer: dict[str, int], waiting: list[int]) -> list[str]:
    """Names of the nodes on one cycle among the nodes Kahn's algorithm left over."""
    stuck = {i for i, count in enumerate(waiting) if count > 0}
    path: list[int] = []
    seen: dict[int, int] = {}
    i = min(stuck)
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(producer[name] for name in nodes[i].inputs if producer.get(name) in stuck)
    cycle = path[seen[i]:]
    return [nodes[j].name for j in reversed(cycle)]


@dataclass(frozen=True, eq=False)
class Graph:
    """A validated static-shape graph.

    Construction checks every value has a `Value` record, constants agree with
    theirs, and sorts `nodes` topologically, so any Graph a pass receives is
    well formed.  `values` holds the record of every value: inputs,
    constants, intermediates and outputs.
    """

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    constants: Mapping[str, np.ndarray]
    values: Mapping[str, Value]
    name: str = "graph"

    def __post_init__(self) -> None:
        input_names = [v.name for v in self.inputs]
        clash = set(input_names) & set(self.constants)
        if clash:
            raise GraphError(f"values {sorted(clash)} are both graph inputs and constants")
        for value in self.inputs:
            if self._record(value.name, "graph input") != value:
                raise GraphError(f"graph input '{value.name}' disagrees with its value record")
        for name, array in self.constants.items():
            record = self._record(name, "constant")
            if tuple(array.shape) != record.shape or array.dtype.name != record.dtype:
                raise GraphError(
                    f"constant '{name}' holds {array.dtype.name}{list(array.shape)} "
                    f"but is declared {record.dtype}{list(record.shape)}"
                )
        used: set[str] = set()
        for node in self.nodes:
            used.update(node.inputs)
            used.update(node.outputs)
        if not used <= self.values.keys() or any(self.values[n].dtype not in DTYPES for n in used):
            for node in self.nodes:  # the first name at fault, by its node
                for name in (*node.inputs, *node.outputs):
                    self._record(name, f"node '{node.name}'")
        ordered = toposort(self.nodes, [*input_names, *self.constants])
        object.__setattr__(self, "nodes", tuple(ordered))
        produced = {out for node in self.nodes for out in node.outputs}
        for value in self.outputs:
            if value.name not in produced and value.name not in self.constants and value.name not in input_names:
                raise GraphError(f"graph output '{value.name}' is never produced")
            if self.values[value.name] != value:
                raise GraphError(f"graph output '{value.name}' disagrees with its value record")

    def _record(self, name: str, where: str) -> Value:
        record = self.values.get(name)
        if record is None:
            raise GraphError(f"{where} uses value '{name}', which has no shape or dtype record")
        if record.dtype not in DTYPES:
            raise GraphError(f"value '{name}' has dtype {record.dtype}, which the IR does not carry")
        return record

    def producers(self) -> dict[str, Node]:
        """Value name → the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name → the nodes that read it, in graph order."""
        readers: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(node.inputs):
                readers.setdefault(name, []).append(node)
        return readers

    def replace(self, **changes: Any) -> Graph:
        """A copy with some fields changed (validated again)."""
        fields: dict[str, Any] = {  # the constructor's keywords, each of its own type
            "inputs": self.inputs,
            "outputs": self.outputs,
            "nodes": self.nodes,
            "constants": self.constants,
            "values": self.values,
            "name": self.name,
        }
        fields.update(changes)
        return Graph(**fields)
