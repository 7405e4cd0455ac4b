"""GridSample (ONNX opsets 16 and 20): each output position reads the input where a grid says.

The grid is a run-time tensor (a spatial transformer's, a deformable attention's sampling
offsets), so unlike Resize's, the taps cannot be tables made at import. The kernel makes them
once per output position instead of once per channel: a first stage per (spatial axis, tap)
writes the input index and the weight of every output position of the grid, `[N, *out]` each,
and the output reads those and gathers, the same for every channel.

A tap's weight is zero where the zeros padding puts it outside the input, and its index is then
clamped into the input so the gather never reads outside it. Semantics are ONNX's reference
implementation's (PyTorch's): grid coordinates (x, y[, z]) on the input's last axes first,
denormalized with or without align_corners, rounded half to even for nearest, clamped
("border") or reflected ("reflection") where they leave the input, Keys' cubic kernel with
a = -0.75 over four taps per axis. The same tap arithmetic builds the te stages and the numpy
reference (`_Math`), so the two cannot drift apart. AffineGrid, the grid of a spatial
transformer, imports as the matrix product it is (`_import_affine_grid`).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched import te
from autosched.frontend.context import Converter, Importer, OnnxNode
from autosched.graph.ir import Node, Op, Value
from autosched.ops import transform
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape
from autosched.schedule import Schedule
from autosched.te import Expr, Tensor

#: ONNX's names of each mode (opset 16 spells linear and cubic "bilinear" and "bicubic")
MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic", "bicubic": "cubic"}
PADDING_MODES = ("zeros", "border", "reflection")
#: Keys' cubic convolution parameter, fixed by ONNX's GridSample (PyTorch's)
CUBIC_A = -0.75
#: the tag of the tap stages (scheduled at root, each its own loops)
TAPS_TAG = "grid_sample_taps"


@dataclass(frozen=True)
class _Math:
    """The arithmetic the taps need, on te expressions or numpy arrays alike."""

    floor: Callable[[Any], Any]
    round_even: Callable[[Any], Any]
    select: Callable[[Any, Any, Any], Any]
    min: Callable[[Any, Any], Any]
    max: Callable[[Any, Any], Any]
    trunc_int: Callable[[Any], Any]  # toward zero, to int32, as C's cast and numpy's astype
    to_float: Callable[[Any], Any]


_NUMPY = _Math(np.floor, np.rint, np.where, np.minimum, np.maximum, lambda x: np.trunc(x).astype(np.int32),
               lambda x: np.asarray(x, np.float32))
_TE = _Math(te.floor, te.round_even, te.select, te.min, te.max, lambda x: te.cast("int32", x),
            lambda x: te.cast("float32", x))


def _reflect(m: _Math, x: Any, low: float, high: float) -> Any:
    """x reflected by the border it crossed, as often as it takes to land in [low, high]."""
    span = high - low
    if span <= 0:
        return x * 0.0 + low
    below, above = low - x, x - high
    out = x
    for dx, near, far, is_out in ((below, low, high, x < low), (above, high, low, x > high)):
        dx = m.max(dx, 0.0)
        flips = m.floor(dx / span)
        rest = dx - flips * span
        even = (flips - 2.0 * m.floor(flips * 0.5)) < 0.5
        toward = 1.0 if near == low else -1.0
        out = m.select(is_out, m.select(even, near + toward * rest, far - toward * rest), out)
    return out


def _cubic_weights(t: Any) -> list[Any]:
    """Keys' weights of the taps at -1, 0, 1 and 2 from the floor, t in [0, 1) past it."""
    a = CUBIC_A

    def near(d: Any) -> Any:  # |d| <= 1
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0

    def far(d: Any) -> Any:  # 1 < |d| < 2
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


def axis_taps(m: _Math, g: Any, size: int, mode: str, padding: str, align: bool) -> list[tuple[Any, Any]]:
    """(index, weight) of each tap along one input axis of `size`, from normalized coordinates
    `g`: the index inside the input, the weight zero where the tap fell outside under zeros
    padding (nearest's one weight is 1 then 0). Nearest and linear sampling clamp or reflect the
    coordinate, then each tap; cubic only each of its four taps, as PyTorch and onnxruntime do
    (ONNX's reference clamps a cubic coordinate too: 0.13 apart with border padding on a
    standard normal grid)."""
    x = (g + 1.0) * 0.5 * (size - 1) if align else ((g + 1.0) * size - 1.0) * 0.5
    low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest":
        x = m.round_even(x)
    if padding == "border" and mode != "cubic":
        x = m.select((x >= low) & (x <= high), x, m.min(m.max(x, 0.0), size - 1.0))
    elif padding == "reflection" and mode != "cubic":
        x = _reflect(m, x, low, high)
    if mode == "nearest":
        starts, weights = [m.trunc_int(x)], [x * 0.0 + 1.0]
    else:
        base = m.floor(x)
        t = x - base
        first = m.trunc_int(base)
        if mode == "linear":
            starts, weights = [first, first + 1], [1.0 - t, t]
        else:
            starts, weights = [first - 1, first, first + 1, first + 2], _cubic_weights(t)
    taps = []
    for index, weight in zip(starts, weights):
        if padding == "zeros":
            inside = (index >= 0) & (index < size)
            weight = m.select(inside, weight, x * 0.0)
        elif padding == "reflection":
            index = m.trunc_int(_reflect(m, m.to_float(index), low, high))
        taps.append((m.min(m.max(index, 0), size - 1), weight))
    return taps


def _shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x, grid = inputs
    rank = len(x.shape) - 2
    if grid.shape[0] != x.shape[0] or len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
        raise ValueError(f"grid {list(grid.shape)} does not sample {rank}-D input {list(x.shape)}: "
                         f"it must be [N, *out, {rank}] with the input's N")
    return [((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def _reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    x, grid = args
    exact = np.float64 if np.float64 in (x.dtype, grid.dtype) else np.float32
    sizes = tuple(x.shape[2:])
    per_axis = [axis_taps(_NUMPY, grid[..., len(sizes) - 1 - a].astype(exact), size, attrs["mode"],
                          attrs["padding_mode"], bool(attrs["align_corners"])) for a, size in enumerate(sizes)]
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    out = np.zeros((x.shape[0], *grid.shape[1:-1], x.shape[1]), exact)
    for combo in itertools.product(*per_axis):
        weight = math.prod(w for _, w in combo)
        picked = x[(batch, slice(None)) + tuple(i for i, _ in combo)]  # advanced indices first: [N, *out, C]
        out += np.asarray(weight, exact)[..., None] * picked
    return [np.ascontiguousarray(np.moveaxis(out, -1, 1)).astype(x.dtype)]


def _compute(args: ComputeArgs) -> list[Tensor]:
    x, grid = args.inputs
    attrs = args.attrs
    sizes = tuple(x.shape[2:])
    rank = len(sizes)
    where = grid.shape[:-1]  # [N, *out]
    exact = "float64" if "float64" in (x.dtype, grid.dtype) else "float32"  # a double model's taps in double
    tables = []  # per axis, per tap: (index, weight) stages over [N, *out]
    for a, size in enumerate(sizes):
        def taps_at(*i: Expr, a: int = a, size: int = size) -> list[tuple[Expr, Expr]]:
            g = te.cast(exact, grid[i + (te.const(rank - 1 - a, "int32"),)])
            return axis_taps(_TE, g, size, attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"]))
        count = {"nearest": 1, "linear": 2, "cubic": 4}[attrs["mode"]]
        tables.append([(te.compute(where, lambda *i, k=k, f=taps_at: f(*i)[k][0], name=f"grid_index{a}_{k}",
                                   tag=TAPS_TAG),
                        te.compute(where, lambda *i, k=k, f=taps_at: f(*i)[k][1], name=f"grid_weight{a}_{k}",
                                   tag=TAPS_TAG))
                       for k in range(count)])

    def body(n: Expr, c: Expr, *o: Expr) -> Expr:
        total: Expr | None = None
        for combo in itertools.product(*tables):
            value = x[(n, c) + tuple(index[(n,) + o] for index, _ in combo)]
            for _, weight in combo:
                value = value * weight[(n,) + o]
            total = value if total is None else total + value
        assert total is not None
        return te.cast(x.dtype, total)
    return [te.compute(args.out_shapes[0], body, name="grid_sample", tag="injective")]


def _schedule(outs: Sequence[Tensor], lanes: int) -> Schedule:
    """The tap stages at root, each its own loops; the gather as any injective op."""
    return transform.schedule_injective_passes(outs[0], lanes, TAPS_TAG)


def _import(imp: Importer, node: OnnxNode) -> None:
    x, grid = (imp.value(name) for name in node.inputs[:2])
    mode = node.attr("mode", "linear")  # opset 16's default "bilinear" is the same
    if mode not in MODES:
        raise node.error(f"mode {mode!r} is not one of {', '.join(MODES)}")
    padding = node.attr("padding_mode", "zeros")
    if padding not in PADDING_MODES:
        raise node.error(f"padding_mode {padding!r} is not one of {', '.join(PADDING_MODES)}")
    if len(x.shape) < 3:
        raise node.error(f"input {list(x.shape)} has no spatial axis to sample")
    if x.dtype not in ("float32", "float16", "float64") or grid.dtype not in ("float32", "float16", "float64"):
        raise node.error(f"input and grid must be floating point, not {x.dtype} and {grid.dtype}")
    imp.emit(node, Op.GRID_SAMPLE, node.inputs[:2], node.outputs,
             {"mode": MODES[mode], "padding_mode": padding, "align_corners": int(node.attr("align_corners", 0))})


def base_grid(spatial: Sequence[int], align: bool) -> np.ndarray:
    """AffineGrid's normalized coordinates of every output position, homogeneous: [S, r + 1]
    rows (x, y[, z], 1) over the positions in C order, x along the last axis."""
    def along(n: int) -> np.ndarray:
        return np.linspace(-1.0, 1.0, n) if align else (2.0 * np.arange(n) + 1.0) / n - 1.0
    axes = np.meshgrid(*(along(n) for n in spatial), indexing="ij")
    coords = [a.reshape(-1) for a in reversed(axes)]  # x (the last axis) first
    return np.stack([*coords, np.ones_like(coords[0])], axis=1).astype(np.float32)


def _import_affine_grid(imp: Importer, node: OnnxNode) -> None:
    """AffineGrid (opset 20) as the product it is: the constant homogeneous base grid of the
    output size times each batch element's transposed theta, [S, r + 1] . [N, r + 1, r], read
    as [N, *size, r]. A spatial transformer's grid is then an ordinary MatMul task."""
    theta = imp.value(node.inputs[0])
    size = node.const(1)
    if size is None:
        raise node.error("needs a constant size")
    n, _, *spatial = (int(v) for v in size.reshape(-1))
    r = len(spatial)
    if r not in (2, 3) or theta.shape != (n, r, r + 1):
        raise node.error(f"theta {list(theta.shape)} is not an affine map of size {[int(v) for v in size]}: "
                         f"it must be [{n}, {r}, {r + 1}] with 2 or 3 spatial axes")
    base = f"{node.outputs[0]}:base"
    imp.add_constant(base, base_grid(spatial, bool(node.attr("align_corners", 0))).astype(theta.dtype))
    turned = imp.emit_step(node, "theta_t", Op.TRANSPOSE, [node.inputs[0]], {"perm": (0, 2, 1)})
    rows = imp.emit_step(node, "grid_rows", Op.MATMUL, [base, turned], {})
    imp.emit(node, Op.RESHAPE, [rows], node.outputs, {"shape": (n, *spatial, r)})


RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.GRID_SAMPLE, OpKind.INJECTIVE, _shape, _reference, _compute, _schedule,
          {"GridSample": Converter(_import), "AffineGrid": Converter(_import_affine_grid, constant_inputs=(1,))}),
)
