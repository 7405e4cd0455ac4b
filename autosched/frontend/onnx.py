"""ONNX model → static-shape `Graph`.

autosched compiles for fixed shapes, so every symbolic dimension must be
bound (by the `shapes` argument, the CLI's `--shape name=1x3x224x224`) and
every shape operand must fold to a constant.  Every error names the file
and the node or value at fault; unsupported operators are all listed in
one FrontendError, so a user learns everything that is missing in one run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper, version_converter

from autosched.errors import FrontendError, GraphError
from autosched.frontend.constant_ops import CONSTANT_OPS
from autosched.frontend.context import Converter, Importer, OnnxNode, numpy_dtype, type_name
from autosched.graph.ir import Graph, Value, toposort
from autosched.graph.reference import eval_node
from autosched.graph.shapes import infer
from autosched.opset.registry import IMPORTERS

# Lowest opset whose operator forms the converters implement; the highest is
# the newest opset the converters were checked against (versions 22-28 of the
# supported ops only widen the accepted types).
MIN_OPSET = 13
MAX_OPSET = 28

#: every ONNX op type the importer accepts: the op records' importers and the constant folders
CONVERTERS: Mapping[str, Converter] = {**IMPORTERS, **CONSTANT_OPS}


def load_onnx(path: str | os.PathLike[str], shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Read and import an ONNX file; `shapes` binds dynamic input dimensions."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FrontendError(f"{source}: cannot read model ({exc.strerror or exc})") from exc
    try:
        model = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise FrontendError(f"{source}: not a readable ONNX model, truncated or not protobuf ({exc})") from exc
    if not model.HasField("graph") or not model.opset_import:
        raise FrontendError(f"{source}: not an ONNX model (no graph or no opset)")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            onnx.load_external_data_for_model(model, str(Path(path).parent))
        except (OSError, ValueError) as exc:
            raise FrontendError(f"{source}: cannot load external tensor data ({exc})") from exc
    return import_model(model, shapes, source=source)


def import_model(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    source: str = "<model>",
) -> Graph:
    """Import an in-memory ModelProto; `source` names it in error messages."""
    opset = _check_opset(model, source)
    if opset < MIN_OPSET:
        model, opset = _upgrade(model, opset, source), MIN_OPSET
    graph = model.graph
    nodes = [OnnxNode.from_proto(proto, i, source) for i, proto in enumerate(graph.node)]
    _check_supported(nodes, source)
    imp = Importer(source, infer, eval_node)
    for tensor in graph.initializer:
        imp.add_constant(tensor.name, _initializer(tensor, source))
    inputs = _graph_inputs(graph, dict(shapes or {}), imp, source)
    try:
        ordered = toposort([_Edges(node) for node in nodes], imp.values)
    except GraphError as exc:
        raise FrontendError(f"{source}: {exc}") from exc
    for edges in ordered:
        _check_arity(edges.node, opset)
        _convert(imp, edges.node)
    _check_declared(imp, graph, source)
    outputs = tuple(imp.values[info.name] for info in graph.output)
    used = _used_values(imp, inputs, outputs)
    try:
        return Graph(
            inputs=inputs,
            outputs=outputs,
            nodes=tuple(imp.nodes),
            constants={name: array for name, array in imp.constants.items() if name in used},
            values={name: value for name, value in imp.values.items() if name in used},
            name=graph.name or Path(source).stem,
        )
    except GraphError as exc:
        raise FrontendError(f"{source}: {exc}") from exc


def _check_opset(model: onnx.ModelProto, source: str) -> int:
    versions = {entry.domain: entry.version for entry in model.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None:
        raise FrontendError(f"{source}: the model does not import the default ONNX opset")
    if version > MAX_OPSET:
        raise FrontendError(f"{source}: opset {version} is newer than the newest supported, {MAX_OPSET}")
    return version


def _upgrade(model: onnx.ModelProto, opset: int, source: str) -> onnx.ModelProto:
    """An older model rewritten to MIN_OPSET by onnx's version converter (its adapters turn
    attributes that became inputs, such as Split's and Squeeze's, into constant inputs), so
    the converters see only the forms they implement."""
    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # the converter raises bare RuntimeErrors and C++ exceptions alike
        raise FrontendError(f"{source}: opset {opset} model could not be upgraded to opset {MIN_OPSET} "
                            f"by onnx.version_converter ({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})") from exc


def _converter_key(node: OnnxNode) -> str:
    """The key of a node's converter: its op type in ONNX's domain, else "domain.OpType"."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _check_supported(nodes: Sequence[OnnxNode], source: str) -> None:
    missing: dict[str, list[str]] = {}
    for node in nodes:
        if _converter_key(node) not in CONVERTERS:
            missing.setdefault(_converter_key(node), []).append(node.name)
    if missing:
        listed = "; ".join(f"{op} ({_some_nodes(names)})" for op, names in sorted(missing.items()))
        raise FrontendError(f"{source}: unsupported operators: {listed}")


#: node names an error lists per operator: a detector's 180 NonZero nodes made a screenful
NAMED_NODES = 5


def _some_nodes(names: Sequence[str]) -> str:
    """The first nodes by name, and how many more."""
    shown = ", ".join(repr(n) for n in names[:NAMED_NODES])
    more = f" and {len(names) - NAMED_NODES} more" if len(names) > NAMED_NODES else ""
    return f"{len(names)} nodes: {shown}{more}" if len(names) > 1 else f"node {shown}"


def _initializer(tensor: onnx.TensorProto, source: str) -> np.ndarray:
    dtype = numpy_dtype(tensor.data_type)
    if dtype is None:
        raise FrontendError(f"{source}: initializer '{tensor.name}' has unsupported element type {type_name(tensor.data_type)}")
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if tensor.HasField("raw_data"):
        expected = count * np.dtype(dtype).itemsize
        if len(tensor.raw_data) != expected:
            raise FrontendError(
                f"{source}: initializer '{tensor.name}' holds {len(tensor.raw_data)} bytes of raw data, "
                f"but its shape {list(tensor.dims)} of {dtype} needs {expected}"
            )
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:
        raise FrontendError(f"{source}: initializer '{tensor.name}' cannot be read ({exc})") from exc
    if array.size != count:
        raise FrontendError(
            f"{source}: initializer '{tensor.name}' holds {array.size} values, its shape {list(tensor.dims)} needs {count}"
        )
    return array.reshape(tuple(tensor.dims)).astype(dtype, copy=False)


def _graph_inputs(
    graph: onnx.GraphProto, shapes: dict[str, Sequence[int]], imp: Importer, source: str
) -> tuple[Value, ...]:
    """Input values with every dimension static, initializer-backed inputs excluded."""
    real = [info for info in graph.input if info.name not in imp.constants]
    unknown = set(shapes) - {info.name for info in real}
    if unknown:
        raise FrontendError(f"{source}: --shape names {sorted(unknown)}, which are not model inputs")
    values = []
    for info in real:
        if info.type.WhichOneof("value") != "tensor_type":
            raise FrontendError(f"{source}: input '{info.name}' is not a tensor")
        tensor_type = info.type.tensor_type
        dtype = numpy_dtype(tensor_type.elem_type)
        if dtype is None:
            raise FrontendError(f"{source}: input '{info.name}' has unsupported element type {type_name(tensor_type.elem_type)}")
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor_type.shape.dim]
        shape = _bind_shape(info.name, declared, shapes.get(info.name), tensor_type.HasField("shape"), source)
        values.append(Value(info.name, shape, dtype))
        imp.add_input(values[-1])
    return tuple(values)


def _bind_shape(
    name: str, declared: list[int | str], bound: Sequence[int] | None, has_shape: bool, source: str
) -> tuple[int, ...]:
    if bound is not None:
        bound = tuple(int(d) for d in bound)
        if has_shape and (
            len(bound) != len(declared) or any(isinstance(d, int) and d != b for d, b in zip(declared, bound))
        ):
            raise FrontendError(f"{source}: --shape {name}={list(bound)} contradicts the model's shape {declared}")
        return bound
    if not has_shape:
        raise FrontendError(f"{source}: input '{name}' has no shape; bind it with --shape {name}=DxDx...")
    for i, d in enumerate(declared):
        if not isinstance(d, int):
            raise FrontendError(
                f"{source}: input '{name}' has dynamic dimension {i} ({d!r}); bind it with --shape {name}=DxDx..."
            )
    return tuple(int(d) for d in declared)


@dataclass(frozen=True)
class _Edges:
    """An ONNX node seen by the topological sort: omitted operands left out."""

    node: OnnxNode

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(name for name in self.node.inputs if name)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(name for name in self.node.outputs if name)


def _check_arity(node: OnnxNode, opset: int) -> None:
    """Operand counts and required operands against the op's ONNX schema (contrib ops have
    none in onnx: their converters check the operands they read)."""
    if _converter_key(node) != node.op_type:
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:
        first = min(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                    if s.name == node.op_type and s.domain == "")
        raise node.error(f"{node.op_type} does not exist in opset {opset}, the model's; "
                         f"it was added in opset {first}") from None
    for kind, names, low, high, formals in (
        ("inputs", node.inputs, schema.min_input, schema.max_input, schema.inputs),
        ("outputs", node.outputs, schema.min_output, schema.max_output, schema.outputs),
    ):
        if not low <= len(names) <= high:
            expected = f"{low}" if low == high else f"{low} to {high}" if high < 2**31 - 1 else f"at least {low}"
            raise node.error(f"has {len(names)} {kind}, expected {expected}")
        for formal, name in zip(formals, names):
            if formal.option == onnx.defs.OpSchema.FormalParameterOption.Single and not name:
                raise node.error(f"required {kind[:-1]} '{formal.name}' is empty")


def _convert(imp: Importer, node: OnnxNode) -> None:
    converter = CONVERTERS[_converter_key(node)]
    constants = {
        i: imp.constant_value(node.inputs[i], node) for i in converter.constant_inputs if node.has_input(i)
    }
    try:
        converter.fn(imp, dataclasses.replace(node, constants=constants))
    except (TypeError, ValueError, IndexError, KeyError) as exc:  # a malformed node, e.g. a missing operand
        raise node.error(f"cannot convert ({type(exc).__name__}: {exc})") from exc


def _check_declared(imp: Importer, graph: onnx.GraphProto, source: str) -> None:
    """Graph outputs must exist, and the model's annotations must agree with ours."""
    for info in graph.output:
        if info.name not in imp.values:
            raise FrontendError(f"{source}: graph output '{info.name}' is never produced")
    for info in (*graph.value_info, *graph.output):
        value = imp.values.get(info.name)
        if value is None or info.type.WhichOneof("value") != "tensor_type":
            continue
        tensor_type = info.type.tensor_type
        dtype = numpy_dtype(tensor_type.elem_type) if tensor_type.elem_type else None
        if dtype is not None and dtype != value.dtype:
            raise FrontendError(f"{source}: value '{info.name}' is {value.dtype} but the model declares {dtype}")
        if tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
            if len(dims) != len(value.shape) or any(d is not None and d != v for d, v in zip(dims, value.shape)):
                shown = ["?" if d is None else d for d in dims]
                raise FrontendError(
                    f"{source}: value '{info.name}' has shape {list(value.shape)} but the model declares {shown}"
                )


def _used_values(imp: Importer, inputs: Sequence[Value], outputs: Sequence[Value]) -> set[str]:
    return {v.name for v in (*inputs, *outputs)} | {
        name for node in imp.nodes for name in (*node.inputs, *node.outputs)
    }
