"""Resize (ONNX opsets 13-19): nearest, linear and cubic interpolation through index tables.

Why tables: which input row an output row reads depends on the coordinate transformation, the
nearest rounding and whether scales or sizes were given, in float arithmetic that must match
ONNX's to pick the same neighbour. The importer computes it once per resized axis, in float64
numpy as ONNX's reference does, and stores the result as constant inputs of the node: per axis
the source index (nearest), the two neighbours and the second one's weight (linear), or the
four neighbours and their four weights (cubic: Keys' kernel with `cubic_coeff_a`, weights of
neighbours outside the input zeroed and the rest renormalized with `exclude_outside`);
neighbours are clamped to the input, as the reference pads its edge. The kernel is a gather,
for linear and cubic a weighted sum of two or four gathers per resized axis, and the numpy
reference reads the same tables (interpolating axis by axis, as ONNX's does). Antialiasing,
cropping (tf_crop_and_resize) and aspect-ratio policies are refused by name. Cubic came with
YOLOS, whose position embeddings are resized to the image's patch grid (a constant the build
folds).

Linear and cubic interpolation are computed axis by axis too, the innermost resized axis first, each pass
at root: the gathers along the innermost axis, lane by lane in vector code, then run over the
input's rows only, and every later pass reads whole rows at two gathered positions. A
segmentation head's 8x or 16x bilinear upsampling (DeepLab-v3: 21 classes, 21x21 to 321x321)
computed in one pass gathered four lane-by-lane values per output.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode, ints
from autosched.graph.ir import Node, Op, Value
from autosched.ops import transform
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape
from autosched.schedule import Schedule
from autosched.te import Expr, Tensor

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(mode: str, out_len: int, in_len: int, scale: float) -> np.ndarray:
    """Each output position's coordinate in the input along one axis (ONNX's formulas, whose
    resized length is scale × in_len unrounded: 2.4 where 4 columns scaled by 0.6 give 2)."""
    x = np.arange(out_len, dtype=np.float64)
    resized = scale * in_len
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / resized)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if resized != 1 else np.full(out_len, -0.5)
    if mode == "align_corners":
        return x * (in_len - 1) / (resized - 1) if resized != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise ValueError(f"coordinate_transformation_mode {mode!r} is not one of {', '.join(COORDINATE_MODES)}")


def nearest_index(coords: np.ndarray, rounding: str, in_len: int) -> np.ndarray:
    if rounding == "round_prefer_floor":
        index = np.ceil(coords - 0.5)
    elif rounding == "round_prefer_ceil":
        index = np.floor(coords + 0.5)
    elif rounding == "floor":
        index = np.floor(coords)
    elif rounding == "ceil":
        index = np.ceil(coords)
    else:
        raise ValueError(f"nearest_mode {rounding!r} is not one of {', '.join(NEAREST_MODES)}")
    return np.clip(index, 0, in_len - 1).astype(np.int32)


def linear_taps(coords: np.ndarray, in_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two neighbours of each coordinate (clamped to the input) and the second's weight."""
    low = np.floor(coords)
    weight = (coords - low).astype(np.float32)
    return (np.clip(low, 0, in_len - 1).astype(np.int32), np.clip(low + 1, 0, in_len - 1).astype(np.int32), weight)


def cubic_taps(coords: np.ndarray, in_len: int, a: float, exclude_outside: bool) -> list[np.ndarray]:
    """The four neighbours floor(x) - 1 ... floor(x) + 2 of each coordinate (clamped to the
    input), then their weights from Keys' cubic kernel with parameter `a`; with
    `exclude_outside`, neighbours outside the input weigh nothing and the rest are rescaled to
    sum to 1."""
    base = np.floor(coords)
    positions = [base + k for k in range(-1, 3)]
    weights = [_keys(np.abs(coords - p), a) for p in positions]
    if exclude_outside:
        weights = [np.where((p >= 0) & (p <= in_len - 1), w, 0.0) for p, w in zip(positions, weights)]
        total = sum(weights)
        weights = [w / total for w in weights]
    return ([np.clip(p, 0, in_len - 1).astype(np.int32) for p in positions]
            + [w.astype(np.float32) for w in weights])


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances d >= 0."""
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


#: index and weight tables per resized axis, by mode
TABLES = {"nearest": 1, "linear": 3, "cubic": 8}


def _tables_per_axis(attrs: Mapping[str, Any]) -> int:
    return TABLES[attrs["mode"]]


def _taps(mode: str, tables: Sequence) -> list[tuple[Any, Any]]:
    """(index table, weight) per neighbour: linear's (low, 1 - w) and (high, w), cubic's four."""
    if mode == "linear":
        low, high, weight = tables
        return [(low, None), (high, weight)]
    return list(zip(tables[:4], tables[4:]))


def _shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x, per = inputs[0], _tables_per_axis(node.attrs)
    shape = list(x.shape)
    for k, axis in enumerate(node.attrs["axes"]):
        shape[axis] = inputs[1 + per * k].shape[0]
    return [(tuple(shape), x.dtype)]


def _reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    y, per = args[0], _tables_per_axis(attrs)
    for k, axis in enumerate(attrs["axes"]):
        tables = args[1 + per * k:1 + per * (k + 1)]
        if per == 1:
            y = np.take(y, tables[0].astype(np.int64), axis=axis)
            continue
        taps = _taps(attrs["mode"], tables)
        if attrs["mode"] == "linear":
            (low, _), (high, weight) = taps
            taps = [(low, 1 - weight), (high, weight)]
        along = [-1 if d == axis else 1 for d in range(y.ndim)]
        y = sum(np.take(y, index.astype(np.int64), axis=axis) * w.reshape(along) for index, w in taps).astype(
            args[0].dtype)
    return [np.ascontiguousarray(y)]


def _compute(args: ComputeArgs) -> list[Tensor]:
    x, axes, per = args.inputs[0], args.attrs["axes"], _tables_per_axis(args.attrs)
    tables = [args.inputs[1 + per * k:1 + per * (k + 1)] for k in range(len(axes))]

    if per == 1:
        def body(*i: Expr) -> Expr:
            sources = {a: te.cast("int32", t[0][i[a]]) for a, t in zip(axes, tables)}
            return x[tuple(sources.get(d, v) for d, v in enumerate(i))]
        return [te.compute(args.out_shapes[0], body, name="resize", tag="injective")]
    order = sorted(range(len(axes)), key=lambda k: -axes[k])  # innermost first
    y = x
    for n, k in enumerate(order):
        y = _interpolate(y, axes[k], _taps(args.attrs["mode"], tables[k]), args.out_shapes[0][axes[k]],
                         "injective" if n == len(order) - 1 else PASS_TAG)
    return [y]


#: the tag of a linear or cubic Resize's passes before the last (scheduled at root by `_schedule`)
PASS_TAG = "resize_pass"


def _interpolate(x: Tensor, axis: int, taps: Sequence[tuple[Tensor, Tensor | None]], length: int, tag: str) -> Tensor:
    """x resized along `axis` to `length`: Σ w·x[index] over the taps per position, a linear
    pair's first weight 1 − w of the second's (None)."""
    shape = tuple(length if d == axis else n for d, n in enumerate(x.shape))

    def body(*i: Expr) -> Expr:
        def at(table: Tensor) -> Expr:
            return x[tuple(te.cast("int32", table[v]) if d == axis else v for d, v in enumerate(i))]
        second = taps[-1][1]  # a linear pair's weight, whose complement the first tap takes
        assert second is not None
        weights = [w[i[axis]] if w is not None else te.const(1.0, x.dtype) - second[i[axis]] for _, w in taps]
        out = weights[0] * at(taps[0][0])
        for (index, _), w in zip(taps[1:], weights[1:]):
            out = out + w * at(index)
        return out
    return te.compute(shape, body, name=f"resize_axis{axis}", tag=tag)


def _schedule(outs: Sequence[Tensor], lanes: int) -> Schedule:
    """`schedule_injective`, with a linear Resize's earlier passes at root, each its own loops."""
    return transform.schedule_injective_passes(outs[0], lanes, PASS_TAG)


def _import(imp: Importer, node: OnnxNode) -> None:
    x = imp.value(node.inputs[0])
    rank = len(x.shape)
    mode = node.attr("mode", "nearest")
    if mode not in TABLES:
        raise node.error(f"mode {mode!r} is not one of {', '.join(TABLES)}")
    if node.attr("antialias", 0):
        raise node.error("antialias is not supported")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise node.error(f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')!r} is not supported")
    coordinate_mode = node.attr("coordinate_transformation_mode", "half_pixel")
    if coordinate_mode not in COORDINATE_MODES:
        raise node.error(f"coordinate_transformation_mode {coordinate_mode!r} is not supported")
    rounding = node.attr("nearest_mode", "round_prefer_floor")
    if mode == "nearest" and rounding not in NEAREST_MODES:
        raise node.error(f"nearest_mode {rounding!r} is not one of {', '.join(NEAREST_MODES)}")
    given_axes = node.attr("axes")
    axes = list(range(rank)) if given_axes is None else [a + rank if a < 0 else a for a in given_axes]
    scales, sizes = node.const(2), ints(node.const(3))
    if (scales is None or scales.size == 0) and not sizes:
        raise node.error("needs constant scales or sizes")
    inputs, resized = [node.inputs[0]], []
    for k, axis in enumerate(axes):
        in_len = x.shape[axis]
        if sizes:
            out_len, scale = sizes[k], sizes[k] / in_len
        else:
            assert scales is not None
            scale = float(scales.reshape(-1)[k])
            out_len = int(np.floor(in_len * scale))
        coords = source_coordinates(coordinate_mode, out_len, in_len, scale)
        if mode == "nearest":
            tables = [nearest_index(coords, rounding, in_len)]
        elif mode == "linear":
            tables = list(linear_taps(coords, in_len))
        else:
            tables = cubic_taps(coords, in_len, float(node.attr("cubic_coeff_a", -0.75)),
                                bool(node.attr("exclude_outside", 0)))
        if out_len == in_len and np.array_equal(coords, np.arange(in_len)) or mode == "nearest" and out_len == in_len \
                and np.array_equal(tables[0], np.arange(in_len)):
            continue  # this axis reads every input position in place
        resized.append(axis)
        for j, table in enumerate(tables):
            name = f"{node.name}:axis{axis}:{j}"
            imp.add_constant(name, table)
            inputs.append(name)
    if not resized:  # every axis in place (SegFormer's head "resizes" its first map to its own size)
        imp.emit(node, Op.IDENTITY, inputs, node.outputs, {})
        return
    imp.emit(node, Op.RESIZE, inputs, node.outputs, {"mode": mode, "axes": tuple(resized)})


RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.RESIZE, OpKind.INJECTIVE, _shape, _reference, _compute, _schedule,
          {"Resize": Converter(_import, constant_inputs=(1, 2, 3))}),
)
