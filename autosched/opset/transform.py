"""Data movement: reshape (and the ONNX ops that are reshapes), transpose, concat, split, slice,
gather, pad and expand, and the ONNX ops that import as chains of them (DepthToSpace,
SpaceToDepth, Tile). Shapes and attributes are static, so each is an index mapping."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, ints, normalize_axes, normalize_axis
from autosched.graph.ir import Node, Op, Value
from autosched.ops import transform
from autosched.ops.util import vectorize_innermost
from autosched.opset.algebra import AlgebraOp, concat, split
from autosched.opset.elementwise import broadcast_operand
from autosched.opset.record import (
    ComputeArgs,
    ComputeFn,
    OpDef,
    OpKind,
    ReferenceFn,
    ScheduleFn,
    Shape,
    ShapeFn,
    UnsupportedTaskError,
    contiguous,
    on_output,
)
from autosched.schedule import Schedule, create_schedule
from autosched.te import Expr, Tensor


def schedule_outputs(outs: list[Tensor], lanes: int) -> Schedule:
    """For kernels with several outputs: every stage at root, its outermost loop parallel."""
    s = create_schedule(outs)
    s.parallel_outermost()
    return s


def schedule_split(outs: list[Tensor], lanes: int) -> Schedule:
    """Each part a copy loop of its own, parallel, its contiguous run (`transform.copy_suffix`)
    vectorized: at the root with only the outermost loop parallel, a ShuffleNet unit's split of
    1x116x28x28 ran on one thread in scalar code (0.059 ms in the model, AVX-512)."""
    s = create_schedule(outs)
    for out in outs:
        vectorize_innermost(s[out], lanes, fuse_from=transform.copy_suffix(out))
    return s


def _reshape_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    shape = tuple(node.attrs["shape"])
    if math.prod(shape) != inputs[0].size:
        raise ValueError(f"cannot reshape {list(inputs[0].shape)} to {list(shape)}")
    return [(shape, inputs[0].dtype)]


def _emit_reshape(imp: Importer, node: OnnxNode, shape: Sequence[int]) -> None:
    imp.emit(node, Op.RESHAPE, node.inputs[:1], node.outputs, {"shape": tuple(int(d) for d in shape)})


def _import_reshape(imp: Importer, node: OnnxNode) -> None:
    source = imp.value(node.inputs[0]).shape
    requested = ints(node.required_const(1))
    allow_zero = node.attr("allowzero", 0)
    if not allow_zero and any(d == 0 and i >= len(source) for i, d in enumerate(requested)):
        raise node.error(f"shape {requested} copies a dimension (0) beyond the input's rank {len(source)}")
    shape = [source[i] if d == 0 and not allow_zero else d for i, d in enumerate(requested)]
    if shape.count(-1) > 1:
        raise node.error(f"shape {requested} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or math.prod(source) % known:
            raise node.error(f"cannot reshape {list(source)} to {requested}")
        shape[shape.index(-1)] = math.prod(source) // known
    _emit_reshape(imp, node, shape)


def _import_flatten(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = node.attr("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise node.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    _emit_reshape(imp, node, [math.prod(shape[:axis]), math.prod(shape[axis:])])


def _import_squeeze(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    given = ints(node.const(1))
    if given is None:
        given = node.attr("axes")
    if given is None:
        given = [i for i, d in enumerate(shape) if d == 1]
    axes = normalize_axes(node, given, len(shape))
    if any(shape[a] != 1 for a in axes):
        raise node.error(f"cannot squeeze axes {list(axes)} of shape {list(shape)}")
    _emit_reshape(imp, node, [d for i, d in enumerate(shape) if i not in axes])


def _import_unsqueeze(imp: Importer, node: OnnxNode) -> None:
    shape = list(imp.value(node.inputs[0]).shape)
    given = ints(node.const(1))
    if given is None:
        given = node.attr("axes")
    if given is None:
        raise node.error("axes are missing")
    axes = normalize_axes(node, given, len(shape) + len(given))
    for a in axes:
        shape.insert(a, 1)
    _emit_reshape(imp, node, shape)


def _transpose_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    perm = node.attrs["perm"]
    if sorted(perm) != list(range(len(inputs[0].shape))):
        raise ValueError(f"perm {list(perm)} is not a permutation of rank {len(inputs[0].shape)}")
    return [(tuple(inputs[0].shape[p] for p in perm), inputs[0].dtype)]


def _import_transpose(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    perm = tuple(int(p) for p in node.attr("perm", range(rank - 1, -1, -1)))
    imp.emit(node, Op.TRANSPOSE, node.inputs, node.outputs, {"perm": perm})


def _nchw(imp: Importer, node: OnnxNode) -> tuple[int, int, int, int, int]:
    """(N, C, H, W) of a 4-D operand, and the blocksize attribute."""
    shape, block = imp.value(node.inputs[0]).shape, int(node.attr("blocksize", 0))
    if len(shape) != 4:
        raise node.error(f"the input must be 4-D (N, C, H, W), not {list(shape)}")
    if block < 1:
        raise node.error("blocksize must be a positive integer")
    return (*shape, block)


def _block_order(node: OnnxNode) -> str:
    """DCR: a block's pixels are the outer part of the channel index; CRD: the inner part."""
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise node.error(f"mode must be DCR or CRD, not {mode!r}")
    return mode


def _import_depth_to_space(imp: Importer, node: OnnxNode) -> None:
    """Channels spread into b x b pixel blocks: Reshape, Transpose, Reshape (a sub-pixel
    convolution's upsampling)."""
    n, c, h, w, b = _nchw(imp, node)
    if c % (b * b):
        raise node.error(f"{c} channels do not divide into blocks of {b}x{b}")
    mode = _block_order(node)
    split, perm = (((n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)) if mode == "DCR"
                   else ((n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)))
    blocks = imp.emit_step(node, "blocks", Op.RESHAPE, node.inputs[:1], {"shape": split})
    spread = imp.emit_step(node, "spread", Op.TRANSPOSE, [blocks], {"perm": perm})
    imp.emit(node, Op.RESHAPE, [spread], node.outputs, {"shape": (n, c // (b * b), h * b, w * b)})


def _import_space_to_depth(imp: Importer, node: OnnxNode) -> None:
    n, c, h, w, b = _nchw(imp, node)
    if h % b or w % b:
        raise node.error(f"{h}x{w} pixels do not divide into blocks of {b}x{b}")
    mode = _block_order(node)
    blocks = imp.emit_step(node, "blocks", Op.RESHAPE, node.inputs[:1], {"shape": (n, c, h // b, b, w // b, b)})
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    gathered = imp.emit_step(node, "gather", Op.TRANSPOSE, [blocks], {"perm": perm})
    imp.emit(node, Op.RESHAPE, [gathered], node.outputs, {"shape": (n, c * b * b, h // b, w // b)})


def _expand_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    shape = tuple(node.attrs["shape"])
    if np.broadcast_shapes(inputs[0].shape, shape) != shape:
        raise ValueError(f"{list(inputs[0].shape)} does not broadcast to {list(shape)}")
    return [(shape, inputs[0].dtype)]


def _import_expand(imp: Importer, node: OnnxNode) -> None:
    source = imp.value(node.inputs[0]).shape
    try:  # ONNX's Expand broadcasts both ways: a 1 in the requested shape keeps the input's size
        shape = np.broadcast_shapes(source, tuple(ints(node.required_const(1))))
    except ValueError:
        raise node.error(f"{list(source)} does not broadcast with {ints(node.required_const(1))}") from None
    imp.emit(node, Op.EXPAND, node.inputs[:1], node.outputs, {"shape": tuple(int(d) for d in shape)})


def _import_tile(imp: Importer, node: OnnxNode) -> None:
    """Each axis d repeated r times: the input with a size-1 axis before each, expanded to r
    there, then the pairs merged (Reshape, Expand, Reshape)."""
    shape, repeats = imp.value(node.inputs[0]).shape, ints(node.required_const(1))
    if len(repeats) != len(shape) or min(repeats, default=1) < 0:
        raise node.error(f"repeats {repeats} must be {len(shape)} non-negative counts, one per axis")
    spaced = imp.emit_step(node, "spaced", Op.RESHAPE, node.inputs[:1],
                           {"shape": tuple(d for n in shape for d in (1, n))})
    tiled = imp.emit_step(node, "tiled", Op.EXPAND, [spaced], {"shape": tuple(d for pair in zip(repeats, shape) for d in pair)})
    imp.emit(node, Op.RESHAPE, [tiled], node.outputs, {"shape": tuple(r * n for r, n in zip(repeats, shape))})


def _concat_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    axis = node.attrs["axis"]
    first = inputs[0].shape
    for v in inputs[1:]:
        if len(v.shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(v.shape, first)) if i != axis):
            raise ValueError(f"shapes {[list(v.shape) for v in inputs]} differ off axis {axis}")
    return [((*first[:axis], sum(v.shape[axis] for v in inputs), *first[axis + 1:]), inputs[0].dtype)]


def _import_concat(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    imp.emit(node, Op.CONCAT, node.inputs, node.outputs, {"axis": normalize_axis(node, node.attr("axis"), rank)})


def _split_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    axis, sizes = node.attrs["axis"], node.attrs["split"]
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"split {list(sizes)} does not add up to dimension {x.shape[axis]}")
    return [((*x.shape[:axis], s, *x.shape[axis + 1:]), x.dtype) for s in sizes]


def _split_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    bounds = np.cumsum(attrs["split"])[:-1]
    return [contiguous(part) for part in np.split(args[0], bounds, axis=attrs["axis"])]


def _split_compute(args: ComputeArgs) -> list[Tensor]:
    axis, x, outs, start = args.attrs["axis"], args.inputs[0], [], 0
    for k, size in enumerate(args.attrs["split"]):
        outs.append(te.compute(args.out_shapes[k], lambda *i, s0=start: x[i[:axis] + (i[axis] + s0,) + i[axis + 1:]],
                               name=f"split{k}", tag="injective"))
        start += size
    return outs


def _import_split(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = normalize_axis(node, node.attr("axis", 0), len(shape))
    sizes = ints(node.const(1)) or node.attr("split")
    parts = len(node.outputs)
    if not sizes:
        if node.attr("num_outputs") is not None:
            chunk = math.ceil(shape[axis] / node.attr("num_outputs"))
            sizes = [min(chunk, shape[axis] - i * chunk) for i in range(node.attr("num_outputs"))]
        elif shape[axis] % parts:
            raise node.error(f"dimension {shape[axis]} does not split evenly into {parts} parts")
        else:
            sizes = [shape[axis] // parts] * parts
    if len(sizes) != parts:
        raise node.error(f"split {list(sizes)} does not give {parts} outputs")
    outputs = [name or f"{node.name}:unused{i}" for i, name in enumerate(node.outputs)]
    imp.emit(node, Op.SPLIT, node.inputs[:1], outputs, {"axis": axis, "split": tuple(sizes)})


def slice_length(start: int, end: int, step: int) -> int:
    """Elements selected by a normalized (start, end, step) triple."""
    return max(0, math.ceil((end - start) / step))


def _slice_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    attrs = node.attrs
    shape = tuple(slice_length(s, e, t) for s, e, t in zip(attrs["starts"], attrs["ends"], attrs["steps"]))
    if len(shape) != len(inputs[0].shape):
        raise ValueError("slice bounds do not cover every axis")
    return [(shape, inputs[0].dtype)]


def _slice_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    index = tuple(
        slice(start, end if end >= 0 else None, step)
        for start, end, step in zip(attrs["starts"], attrs["ends"], attrs["steps"])
    )
    return [contiguous(args[0][index])]


def _slice_compute(args: ComputeArgs) -> list[Tensor]:
    at = args.attrs
    ranges = [range(s, e, st) for s, e, st in zip(at["starts"], at["ends"], at["steps"])]
    x = args.inputs[0]
    return [te.compute(tuple(len(r) for r in ranges), lambda *i: x[tuple(r.start + r.step * v for r, v in zip(ranges, i))],
                       name="slice", tag="injective")]


def _import_slice(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    starts, ends = ints(node.required_const(1)), ints(node.required_const(2))
    axes = ints(node.const(3)) or list(range(len(starts)))
    steps = ints(node.const(4)) or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.error("starts, ends, axes and steps differ in length")
    normalize_axes(node, axes, len(shape))  # rejects repeated axes
    full_starts, full_ends, full_steps = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = normalize_axis(node, axis, len(shape))
        dim = shape[axis]
        if step == 0:
            raise node.error("step 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        full_starts[axis], full_ends[axis], full_steps[axis] = start, end, step
    attrs = {"starts": tuple(full_starts), "ends": tuple(full_ends), "steps": tuple(full_steps)}
    imp.emit(node, Op.SLICE, node.inputs[:1], node.outputs, attrs)


def _gather_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    data, indices = inputs
    axis = node.attrs["axis"]
    return [((*data.shape[:axis], *indices.shape, *data.shape[axis + 1:]), data.dtype)]


def _gather_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    data, indices = args
    return [np.take(data, indices.astype(np.int64), axis=attrs["axis"])]


def _run_time_index(pos: Expr, n: int) -> Expr:
    """An index read at run time into an axis of n: a negative one counts from the end, and
    one out of range reads the nearest element rather than memory outside the tensor."""
    pos = te.select(pos < te.const(0, "int32"), pos + n, pos)
    return te.min(te.max(pos, te.const(0, "int32")), te.const(n - 1, "int32"))


def _gather_compute(args: ComputeArgs) -> list[Tensor]:
    axis = args.attrs["axis"]
    x, idx = args.inputs
    q = idx.ndim

    n = x.shape[axis]

    def body(*i: Expr) -> Expr:
        pos = te.cast("int32", idx[i[axis:axis + q]]) if q else te.cast("int32", idx[()])
        if not args.attrs.get("checked"):  # run-time indices
            pos = _run_time_index(pos, n)
        return x[i[:axis] + (pos,) + i[axis + q:]]
    return [te.compute(args.out_shapes[0], body, name="gather", tag="injective")]


def _flat_positions(imp: Importer, node: OnnxNode, given: str, indexed: Sequence[int], label: str,
                    scale: int = 1) -> str:
    """Each index tuple along the last axis of `given` (entries counted from their axis' end
    where negative) as one position among the elements of a tensor of shape `indexed`, times
    `scale`: a value of `given`'s shape but its last axis, in int64."""
    shape = imp.value(given).shape
    lead, m = tuple(shape[:-1]), shape[-1]
    strides = [scale * int(np.prod(indexed[j + 1:])) for j in range(m)]
    out = node.outputs[0]
    step = lambda name, op, inputs, attrs: imp.emit_step(node, f"{label}{name}", op, inputs, attrs)  # noqa: E731
    flat = None
    for j in range(m):
        column = step(f"column{j}", Op.SLICE, [given], {
            "starts": (0,) * len(lead) + (j,), "ends": lead + (j + 1,), "steps": (1,) * len(shape)})
        column = step(f"column{j}/flat", Op.RESHAPE, [column], {"shape": lead})
        if imp.value(given).dtype != "int64":
            column = step(f"column{j}/int64", Op.CAST, [column], {"to": "int64"})
        constants = {}
        for name, array in ((f"dim{j}", indexed[j]), (f"stride{j}", strides[j]), ("zero", 0)):
            constants[name] = f"{out}:{label}{name}"
            if constants[name] not in imp.constants:
                imp.add_constant(constants[name], np.array(array, dtype=np.int64))
        negative = step(f"column{j}/negative", Op.LESS, [column, constants["zero"]], {})
        column = step(f"column{j}/wrapped", Op.WHERE, [negative, step(f"column{j}/from_end", Op.ADD, [
            column, constants[f"dim{j}"]], {}), column], {})
        term = step(f"term{j}", Op.MUL, [column, constants[f"stride{j}"]], {})
        flat = term if flat is None else step(f"position{j}", Op.ADD, [flat, term], {})
    assert flat is not None
    return flat


def _import_gather_nd(imp: Importer, node: OnnxNode) -> None:
    """GatherND as a Gather of flat positions: the data's batch and indexed axes merged into one,
    each index tuple (negative entries counted from their axis' end) made one position into it,
    by constants folded at import where the indices are constants, else at run time."""
    data, given = imp.value(node.inputs[0]), imp.value(node.inputs[1])
    b = int(node.attr("batch_dims", 0))
    m = given.shape[-1]
    if np.dtype(given.dtype).kind not in "iu":
        raise node.error(f"indices '{given.name}' must be integers, not {given.dtype}")
    if m < 1 or b + m > len(data.shape) or tuple(given.shape[:b]) != tuple(data.shape[:b]):
        raise node.error(f"indices {list(given.shape)} with batch_dims {b} do not index data {list(data.shape)}")
    indexed = data.shape[b:b + m]
    out = node.outputs[0]
    step = lambda label, op, inputs, attrs: imp.emit_step(node, label, op, inputs, attrs)  # noqa: E731
    lead = tuple(given.shape[:-1])
    flat = _flat_positions(imp, node, given.name, indexed, "")
    batch = int(np.prod(data.shape[:b]))
    if b:  # each batch's positions after the previous batches' elements
        imp.add_constant(f"{out}:batch_start", (np.arange(batch, dtype=np.int64) * int(np.prod(indexed))).reshape(
            data.shape[:b] + (1,) * (len(lead) - b)))
        flat = step("batched", Op.ADD, [flat, f"{out}:batch_start"], {})
    rows = step("rows", Op.RESHAPE, [data.name], {"shape": (batch * int(np.prod(indexed)),) + data.shape[b + m:]})
    imp.emit(node, Op.GATHER, [rows, flat], node.outputs, {"axis": 0})


#: the most elements a scatter's match of every output row against every update may span: it
#: compares each row with each index, which is what a static-shape graph can do without a loop
MAX_SCATTER_PAIRS = 1 << 26

#: per reduction: the elementwise op that folds the updates into the data, the reduction over the
#: updates that match a row, and the value of an update that does not match
_SCATTER_REDUCTIONS = {"add": (Op.ADD, Op.REDUCE_SUM, lambda dt: 0), "mul": (Op.MUL, Op.REDUCE_PROD, lambda dt: 1),
                       "max": (Op.MAX, Op.REDUCE_MAX, lambda dt: _lowest(dt)),
                       "min": (Op.MIN, Op.REDUCE_MIN, lambda dt: -_lowest(dt) if dt.kind == "f" else np.iinfo(dt).max)}


def _lowest(dt: np.dtype):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _scatter_rows(imp: Importer, node: OnnxNode, rows: str, positions: str, updates: str) -> str:
    """`rows` [N, R] with each row at positions [K] replaced by (or, with a reduction, folded
    with) the updates [K, R] whose position it is: every row compared with every position, the
    last matching update taken (ONNX leaves duplicates undefined without a reduction; this is
    the order numpy's reference assigns in), or the matching ones reduced. Positions outside the
    rows match none."""
    n, r = imp.value(rows).shape
    k = imp.value(positions).shape[0]
    reduction = node.attr("reduction", "none")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction != "none" and reduction not in _SCATTER_REDUCTIONS:
        raise node.error(f"unknown reduction '{reduction}' (none, add, mul, max or min)")
    out = node.outputs[0]
    if all(imp.computable(v) for v in (rows, positions, updates)):
        # a scatter of constants (BEiT's relative position index, built with index_put): its value
        folded = f"{out}:scattered"
        arrays = [imp.constant_value(v, node) for v in (rows, positions, updates)]
        imp.add_constant(folded, scattered_rows(arrays[0], arrays[1], arrays[2], reduction))
        return folded
    pairs = n * k * (r if reduction != "none" else 1)
    if pairs > MAX_SCATTER_PAIRS:
        raise node.error(f"{k} updates into {n} rows of {r} elements: {pairs} comparisons, more than the "
                         f"{MAX_SCATTER_PAIRS} a scatter is compiled for")
    step = lambda label, op, inputs, attrs: imp.emit_step(node, label, op, inputs, attrs)  # noqa: E731
    imp.add_constant(f"{out}:row_numbers", np.arange(n, dtype=np.int64).reshape(n, 1))
    at = step("positions_row", Op.RESHAPE, [positions], {"shape": (1, k)})
    match = step("match", Op.EQUAL, [f"{out}:row_numbers", at], {})  # [N, K]
    if reduction == "none":
        imp.add_constant(f"{out}:order", np.arange(k, dtype=np.int64).reshape(1, k))
        imp.add_constant(f"{out}:none", np.array(-1, dtype=np.int64))
        imp.add_constant(f"{out}:first", np.array(0, dtype=np.int64))
        last = step("last", Op.REDUCE_MAX, [step("order_matched", Op.WHERE, [match, f"{out}:order", f"{out}:none"], {})],
                    {"axes": (1,), "keepdims": 1})  # [N, 1]: the last update of each row, -1 for none
        taken = step("taken", Op.GATHER, [updates, step("last_flat", Op.RESHAPE, [
            step("last_valid", Op.MAX, [last, f"{out}:first"], {})], {"shape": (n,)})], {"axis": 0})
        return step("scattered", Op.WHERE, [step("untouched", Op.LESS, [last, f"{out}:first"], {}), rows, taken], {})
    fold, reduce, neutral = _SCATTER_REDUCTIONS[reduction]
    dtype = np.dtype(imp.value(rows).dtype)
    imp.add_constant(f"{out}:neutral", np.array(neutral(dtype), dtype=dtype))
    each = step("each", Op.WHERE, [step("match3", Op.RESHAPE, [match], {"shape": (n, k, 1)}),
                                  step("updates3", Op.RESHAPE, [updates], {"shape": (1, k, r)}), f"{out}:neutral"], {})
    return step("scattered", fold, [rows, step("reduced", reduce, [each], {"axes": (1,), "keepdims": 0})], {})


#: the numpy folds of the scatter reductions
_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scattered_rows(rows: np.ndarray, positions: np.ndarray, updates: np.ndarray, reduction: str) -> np.ndarray:
    """What `_scatter_rows` computes, in numpy: the last update of each position taken, or
    the updates folded in; positions outside the rows ignored."""
    out = rows.copy()
    inside = (positions >= 0) & (positions < len(rows))
    at, given = positions[inside], updates[inside]
    if reduction == "none":
        unique, from_end = np.unique(at[::-1], return_index=True)  # each position's last update
        out[unique] = given[len(at) - 1 - from_end]
    else:
        _SCATTER_UFUNCS[reduction].at(out, at, given)
    return out


def _import_scatter_nd(imp: Importer, node: OnnxNode) -> None:
    """ScatterND: the data's indexed axes merged into rows, each index tuple one position among
    them (as GatherND's), the updates one row each."""
    data, given, updates = (imp.value(i) for i in node.inputs[:3])
    m = given.shape[-1]
    if np.dtype(given.dtype).kind not in "iu":
        raise node.error(f"indices '{given.name}' must be integers, not {given.dtype}")
    if m < 1 or m > len(data.shape) or tuple(updates.shape) != tuple(given.shape[:-1]) + tuple(data.shape[m:]):
        raise node.error(f"indices {list(given.shape)} and updates {list(updates.shape)} do not scatter into "
                         f"data {list(data.shape)}")
    k, r = int(np.prod(given.shape[:-1])), int(np.prod(data.shape[m:]))
    positions = _flat_positions(imp, node, given.name, data.shape[:m], "")
    step = lambda label, op, inputs, attrs: imp.emit_step(node, label, op, inputs, attrs)  # noqa: E731
    rows = step("rows", Op.RESHAPE, [data.name], {"shape": (int(np.prod(data.shape[:m])), r)})
    done = _scatter_rows(imp, node, rows, step("positions_flat", Op.RESHAPE, [positions], {"shape": (k,)}),
                         step("update_rows", Op.RESHAPE, [updates.name], {"shape": (k, r)}))
    imp.emit(node, Op.RESHAPE, [done], node.outputs, {"shape": data.shape})


def _import_scatter_elements(imp: Importer, node: OnnxNode) -> None:
    """ScatterElements (and the deprecated Scatter): each element of the updates goes to the
    data element at its own coordinates but the index along the axis: a flat position, the
    element's coordinates a constant and the index times the axis' stride."""
    data, given, updates = (imp.value(i) for i in node.inputs[:3])
    axis = normalize_axis(node, node.attr("axis", 0), len(data.shape))
    if np.dtype(given.dtype).kind not in "iu":
        raise node.error(f"indices '{given.name}' must be integers, not {given.dtype}")
    if tuple(given.shape) != tuple(updates.shape) or len(given.shape) != len(data.shape) or any(
            g > d for j, (g, d) in enumerate(zip(given.shape, data.shape)) if j != axis):
        raise node.error(f"indices {list(given.shape)} and updates {list(updates.shape)} do not scatter into "
                         f"data {list(data.shape)} along axis {axis}")
    out = node.outputs[0]
    coords = np.indices(given.shape, dtype=np.int64)
    coords[axis] = 0
    imp.add_constant(f"{out}:base", np.ravel_multi_index(tuple(coords), data.shape).astype(np.int64))
    step = lambda label, op, inputs, attrs: imp.emit_step(node, label, op, inputs, attrs)  # noqa: E731
    column = step("indices_column", Op.RESHAPE, [given.name], {"shape": (*given.shape, 1)})
    along = _flat_positions(imp, node, column, (data.shape[axis],), "along/", scale=int(np.prod(data.shape[axis + 1:])))
    k, n = int(np.prod(given.shape)), int(np.prod(data.shape))
    positions = step("positions_flat", Op.RESHAPE, [step("positions", Op.ADD, [f"{out}:base", along], {})], {"shape": (k,)})
    done = _scatter_rows(imp, node, step("rows", Op.RESHAPE, [data.name], {"shape": (n, 1)}), positions,
                         step("update_rows", Op.RESHAPE, [updates.name], {"shape": (k, 1)}))
    imp.emit(node, Op.RESHAPE, [done], node.outputs, {"shape": data.shape})


def _import_gather(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = normalize_axis(node, node.attr("axis", 0), len(shape))
    if node.inputs[1] not in imp.constants:  # token ids of an embedding: indices at run time
        if np.dtype(imp.value(node.inputs[1]).dtype).kind not in "iu":
            raise node.error(f"indices '{node.inputs[1]}' must be integers, not {imp.value(node.inputs[1]).dtype}")
        imp.emit(node, Op.GATHER, node.inputs, node.outputs, {"axis": axis})
        return
    given = imp.constants[node.inputs[1]]
    indices = given.astype(np.int64)
    if indices.size and (indices.min() < -shape[axis] or indices.max() >= shape[axis]):
        raise node.error(f"indices fall outside dimension {shape[axis]}")
    normalized = np.where(indices < 0, indices + shape[axis], indices)
    name = node.inputs[1]
    if not np.array_equal(normalized, given) or given.dtype != np.int64:
        name = f"{node.name}:indices"
        imp.add_constant(name, normalized)
    imp.emit(node, Op.GATHER, [node.inputs[0], name], node.outputs, {"axis": axis, "checked": 1})


def _gather_elements_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    data, indices = inputs
    if len(data.shape) != len(indices.shape):
        raise ValueError(f"data {list(data.shape)} and indices {list(indices.shape)} differ in rank")
    return [(indices.shape, data.dtype)]


def _gather_elements_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    data, indices = args
    return [np.take_along_axis(data, indices.astype(np.int64), axis=attrs["axis"])]


def _gather_elements_compute(args: ComputeArgs) -> list[Tensor]:
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along the axis."""
    (x, idx), axis = args.inputs, args.attrs["axis"]
    n = x.shape[axis]

    def body(*i: Expr) -> Expr:
        return x[i[:axis] + (_run_time_index(te.cast("int32", idx[i]), n),) + i[axis + 1:]]
    return [te.compute(args.out_shapes[0], body, name="gather_elements", tag="injective")]


def _import_gather_elements(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    imp.emit(node, Op.GATHER_ELEMENTS, node.inputs, node.outputs,
             {"axis": normalize_axis(node, node.attr("axis", 0), rank)})


def _pad_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    pads = node.attrs["pads"]
    rank = len(x.shape)
    shape = tuple(x.shape[i] + pads[i] + pads[rank + i] for i in range(rank))
    if min(shape, default=0) < 0:
        raise ValueError(f"pads {list(pads)} crop input {list(x.shape)} below zero")
    return [(shape, x.dtype)]


def _pad_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x = args[0]
    rank = x.ndim
    pads = attrs["pads"]
    crop = tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[rank + i])) for i in range(rank))
    x = x[crop]
    widths = [(max(0, pads[i]), max(0, pads[rank + i])) for i in range(rank)]
    mode = attrs["mode"]
    if mode == "constant":
        y = np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))
    else:
        modes: dict[str, Literal["reflect", "edge", "wrap"]] = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}
        y = np.pad(x, widths, mode=modes[mode])
    return [y]


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


def _pad_compute(args: ComputeArgs) -> list[Tensor]:
    at = args.attrs
    x, pads, rank = args.inputs[0], at["pads"], len(args.inputs[0].shape)
    widths = [(pads[d], pads[rank + d]) for d in range(rank)]
    if any(b < 0 or a < 0 for b, a in widths):
        raise UnsupportedTaskError("Pad with negative pads (cropping) is not compiled")
    if at.get("mode", "constant") == "constant":
        return [transform.pad(x, widths, value=float(at.get("value", 0)))]
    return [te.compute(args.out_shapes[0], lambda *i: x[tuple(_pad_source(v, b, n, at["mode"])
                                                              for v, (b, _), n in zip(i, widths, x.shape))],
                       name="pad", tag="injective")]


def _import_pad(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    widths = ints(node.required_const(1))
    given = ints(node.const(3))
    axes = list(range(rank)) if given is None else [normalize_axis(node, a, rank) for a in given]
    if len(widths) != 2 * len(axes):
        raise node.error(f"pads {widths} do not match {len(axes)} axes")
    pads = [0] * 2 * rank
    for i, axis in enumerate(axes):
        pads[axis], pads[rank + axis] = widths[i], widths[len(axes) + i]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise node.error(f"mode {mode!r} is not supported")
    value = node.const(2)
    fill = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()
    imp.emit(node, Op.PAD, node.inputs[:1], node.outputs, {"pads": tuple(pads), "mode": mode, "value": fill})


#: most shape ops' default schedule: the output's loops, tiled, outer ones in parallel
INJECTIVE_SCHEDULE = on_output(transform.schedule_injective)


def _injective(op: Op, shape: ShapeFn, reference: ReferenceFn, compute: ComputeFn,
               importers: Mapping[str, Converter], schedule: ScheduleFn = INJECTIVE_SCHEDULE,
               algebra: tuple[AlgebraOp, ...] = ()) -> OpDef:
    return OpDef(op, OpKind.INJECTIVE, shape, reference, compute, schedule, importers, algebra=algebra)


#: `enlarge(w)`: a [F, C, kh, kw] kernel padded with one ring of zeros to [F, C, kh+2, kw+2]; a
#: "same" convolution with it computes what one with w does
ENLARGE = AlgebraOp("enlarge", Op.PAD, (4,), lambda a, n: (a[0][0], a[0][1], a[0][2] + 2, a[0][3] + 2),
                    lambda a: [], lambda shapes, n: {"pads": (0, 0, 1, 1, 0, 0, 1, 1), "mode": "constant", "value": 0})
#: `transpose(x)` of a matrix
TRANSPOSE = AlgebraOp("transpose", Op.TRANSPOSE, (2,), lambda a, n: (a[0][1], a[0][0]), lambda a: [],
                      lambda shapes, n: {"perm": (1, 0)})

RECORDS: tuple[OpDef, ...] = (
    _injective(Op.RESHAPE, _reshape_shape, lambda attrs, args: [args[0].reshape(attrs["shape"])],
               lambda args: [transform.reshape(args.inputs[0], args.out_shapes[0])],
               {"Reshape": Converter(_import_reshape, constant_inputs=(1,)), "Flatten": Converter(_import_flatten),
                "Squeeze": Converter(_import_squeeze, constant_inputs=(1,)),
                "Unsqueeze": Converter(_import_unsqueeze, constant_inputs=(1,))}),
    _injective(Op.TRANSPOSE, _transpose_shape, lambda attrs, args: [contiguous(np.transpose(args[0], attrs["perm"]))],
               lambda args: [transform.transpose(args.inputs[0], args.attrs["perm"])],
               {"Transpose": Converter(_import_transpose), "DepthToSpace": Converter(_import_depth_to_space),
                "SpaceToDepth": Converter(_import_space_to_depth)}, algebra=(TRANSPOSE,)),
    _injective(Op.EXPAND, _expand_shape, lambda attrs, args: [np.broadcast_to(args[0], attrs["shape"]).copy()],
               lambda args: [te.compute(args.out_shapes[0], lambda *i: broadcast_operand(args.inputs[0], i, 0),
                                        name="expand")],
               {"Expand": Converter(_import_expand, constant_inputs=(1,)),
                "Tile": Converter(_import_tile, constant_inputs=(1,))}),
    _injective(Op.CONCAT, _concat_shape, lambda attrs, args: [np.concatenate(args, axis=attrs["axis"])],
               lambda args: [transform.concat(list(args.inputs), args.attrs["axis"])],
               {"Concat": Converter(_import_concat)}, algebra=(concat(0), concat(1), concat(2))),
    _injective(Op.SPLIT, _split_shape, _split_reference, _split_compute,
               {"Split": Converter(_import_split, constant_inputs=(1,))}, schedule=schedule_split,
               algebra=tuple(split(axis, part) for axis in (0, 1, 2) for part in (0, 1))),
    _injective(Op.SLICE, _slice_shape, _slice_reference, _slice_compute,
               {"Slice": Converter(_import_slice, constant_inputs=(1, 2, 3, 4))}),
    _injective(Op.GATHER, _gather_shape, _gather_reference, _gather_compute,
               {"Gather": Converter(_import_gather), "GatherND": Converter(_import_gather_nd),
                "ScatterND": Converter(_import_scatter_nd), "ScatterElements": Converter(_import_scatter_elements),
                "Scatter": Converter(_import_scatter_elements)}),
    _injective(Op.GATHER_ELEMENTS, _gather_elements_shape, _gather_elements_reference, _gather_elements_compute,
               {"GatherElements": Converter(_import_gather_elements)}),
    _injective(Op.PAD, _pad_shape, _pad_reference, _pad_compute,
               {"Pad": Converter(_import_pad, constant_inputs=(1, 2, 3))}, algebra=(ENLARGE,)),
)
