"""PET's partially equivalent transformations, corrected (OSDI'21), for convolutions.

"Spatial to batch": a convolution of [N, C, H, W] is cut along a spatial axis into S strips,
which are stacked on the batch axis and convolved as one batch of S·N smaller images: the same
weights and padding, now also at every cut. Away from the cuts it computes what the original
does; beside them it reads a strip's zero padding where the original read the next strip. A
kernel of another shape can be the faster one (PET's gains on ResNet came from such shapes),
so the transformation is offered to the substitution search, corrected, and the search's costs
decide. The positions to correct are found without enumerating them:

* Region analysis: along the cut axis, each output index reads kernel taps at input positions
  affine in the index. Runs of indices where both programs use the same taps, in the same
  strip, are regions; inside one, both outputs are the same multi-linear form up to a shift,
  so a few positions decide the whole region.
* Random-integer checks: both programs are evaluated at those positions (a region's first,
  last and one random index, at the other spatial axis's own border and inner positions) on
  random integers modulo 2^31 − 1 standing for every input and weight, through the graph's own
  ops (`PointEvaluator`): an error escapes t positions with probability (2^-31)^t.
* Correction: each region that differs is recomputed by the original convolution on a slice of
  the input (its halo included, its padding kept only where the original had it); corrections
  of one shape are stacked on the batch axis into one convolution, one kernel as PET fuses
  them, and the output is assembled from the partial result and the corrections.
* The corrected program is checked again at every output index along the cut axis: only one
  that agrees everywhere is ever offered, so only exact programs are built.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched.errors import AutoschedError
from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.rewrite import fresh_name, rebuild
from autosched.opset.registry import lookup

#: the modulus of the random-integer checks (a prime: products of two residues fit in int64)
PRIME = 2**31 - 1
#: how the names of PET's rewrites begin
PREFIX = "pet-"


class PetError(AutoschedError):
    """A graph the point evaluator cannot evaluate."""


@dataclass(frozen=True)
class SpatialSplit:
    """Cut a convolution's input into `parts` strips along `axis` (2: rows, 3: columns) and
    convolve them as one batch."""

    axis: int
    parts: int

    @property
    def name(self) -> str:
        return f"{PREFIX}{'hw'[self.axis - 2]}{self.parts}"


TRANSFORMS: tuple[SpatialSplit, ...] = (SpatialSplit(2, 2), SpatialSplit(3, 2), SpatialSplit(2, 4))


@dataclass(frozen=True)
class Geometry:
    """A convolution along one spatial axis: input size, kernel taps, stride, dilation, pads,
    output size."""

    size: int
    taps: int
    stride: int
    dilation: int
    pad_begin: int
    pad_end: int
    out: int

    def first_read(self, o: int) -> int:
        return o * self.stride - self.pad_begin

    def valid_taps(self, o: int, size: int) -> tuple[int, ...]:
        return tuple(r for r in range(self.taps) if 0 <= self.first_read(o) + r * self.dilation < size)


def geometry(graph: Graph, node: Node, axis: int) -> Geometry:
    a = axis - 2
    attrs = node.attrs
    return Geometry(graph.values[node.inputs[0]].shape[axis], graph.values[node.inputs[1]].shape[axis],
                    attrs["strides"][a], attrs["dilations"][a], attrs["pads"][a], attrs["pads"][a + 2],
                    graph.values[node.outputs[0]].shape[axis])


def regions(g: Geometry, parts: int) -> list[tuple[int, int]]:
    """The output intervals along the cut axis inside which the original and the partial
    program each read the same taps of the same strip (PET's regions)."""
    strip, strip_out = g.size // parts, g.out // parts

    def signature(o: int) -> tuple[Any, ...]:
        q, local = divmod(o, strip_out)
        return g.valid_taps(o, g.size), g.valid_taps(local, strip), q

    out, start = [], 0
    for o in range(1, g.out + 1):
        if o == g.out or signature(o) != signature(start):
            out.append((start, o))
            start = o
    return out


def applies(graph: Graph, node: Node, t: SpatialSplit) -> bool:
    """Whether `t` cuts `node` (a 2-D convolution of a weight constant) into strips whose
    outputs tile the original's."""
    if node.op is not Op.CONV or len(graph.values[node.inputs[0]].shape) != 4 or node.inputs[1] not in graph.constants:
        return False
    g = geometry(graph, node, t.axis)
    strip, strip_out = g.size // t.parts, g.out // t.parts
    if g.size % t.parts or g.out % t.parts or strip < g.taps or strip != strip_out * g.stride:
        return False  # strips that do not start where the original's outputs read: all of it would be wrong
    return (strip + g.pad_begin + g.pad_end - g.dilation * (g.taps - 1) - 1) // g.stride + 1 == strip_out


class _Emitter:
    """New nodes and values for a rewrite of `graph`, names fresh, shapes inferred by the ops."""

    def __init__(self, graph: Graph, prefix: str) -> None:
        self.known = dict(graph.values)
        self.taken = set(graph.values) | {n.name for n in graph.nodes}
        self.prefix = prefix
        self.nodes: list[Node] = []
        self.values: list[Value] = []

    def __call__(self, op: Op, inputs: Sequence[str], outputs: int = 1, name: str | None = None,
                 **attrs: Any) -> tuple[str, ...]:
        base = fresh_name(f"{self.prefix}/{op.value}", self.taken)
        self.taken.add(base)
        outs = (name,) if name is not None else (base,) if outputs == 1 else tuple(f"{base}:{i}" for i in range(outputs))
        self.taken.update(outs)
        node = Node(base, op, tuple(inputs), outs, attrs)
        for out, (shape, dtype) in zip(outs, lookup(op).shape(node, [self.known[i] for i in inputs])):
            self.known[out] = Value(out, shape, dtype)
            if name is None or out != name:
                self.values.append(self.known[out])
        self.nodes.append(node)
        return outs

    def slice(self, x: str, axis: int, start: int, stop: int) -> str:
        shape = self.known[x].shape
        starts = tuple(start if i == axis else 0 for i in range(len(shape)))
        ends = tuple(stop if i == axis else n for i, n in enumerate(shape))
        return self(Op.SLICE, [x], starts=starts, ends=ends, steps=(1,) * len(shape))[0]


def _replace(graph: Graph, node: Node, emit: _Emitter) -> Graph:
    kept = [n for n in graph.nodes if n is not node]
    return rebuild(graph, [*kept, *emit.nodes], new_values=emit.values)


def partial(graph: Graph, node: Node, t: SpatialSplit) -> Graph:
    """`graph` with `node` computed by the uncorrected transformation (wrong beside the cuts)."""
    emit = _Emitter(graph, f"{node.name}/{t.name}")
    _partial(graph, node, t, emit, node.outputs[0])
    return _replace(graph, node, emit)


def _partial(graph: Graph, node: Node, t: SpatialSplit, emit: _Emitter, output: str) -> None:
    emit(Op.CONCAT, _strip_outputs(graph, node, t, emit), axis=t.axis, name=output)


def _strip_outputs(graph: Graph, node: Node, t: SpatialSplit, emit: _Emitter) -> tuple[str, ...]:
    """The strips convolved as one batch; the output of each strip, in order along the cut axis."""
    x = node.inputs[0]
    n = graph.values[x].shape[0]
    strips = emit(Op.SPLIT, [x], t.parts, axis=t.axis, split=(graph.values[x].shape[t.axis] // t.parts,) * t.parts)
    (batched,) = emit(Op.CONCAT, strips, axis=0)
    (y,) = emit(Op.CONV, [batched, *node.inputs[1:]], **node.attrs)
    return emit(Op.SPLIT, [y], t.parts, axis=0, split=(n,) * t.parts)


@dataclass(frozen=True)
class Corrected:
    """A verified transformation plus correction of one convolution."""

    name: str
    conv: str  # the convolution node transformed
    graph: Graph
    regions: int
    wrong: tuple[tuple[int, int], ...]  # output intervals along the cut axis that are recomputed
    checks: int  # positions evaluated, both programs, before and after the correction
    correction_flops: int


def correct(graph: Graph, node: Node, t: SpatialSplit, seed: int = 0) -> Corrected | None:
    """The transformation of `node` with its correction, if the corrected program agrees with
    the original at every checked position (else None: it is never offered)."""
    if not applies(graph, node, t):
        return None
    g = geometry(graph, node, t.axis)
    found = regions(g, t.parts)
    rng = np.random.default_rng(seed)
    wrong_regions = _differing(graph, partial(graph, node, t), node, t.axis, found, rng)
    wrong = _merge([found[i] for i in wrong_regions])
    emit = _Emitter(graph, f"{node.name}/{t.name}")
    flops = _corrected(graph, node, t, g, wrong, emit)
    fixed = _replace(graph, node, emit)
    every = [(o, o + 1) for o in range(g.out)]
    if _differing(graph, fixed, node, t.axis, every, rng):
        return None
    checks = 2 * _POINTS_PER_REGION * (len(found) + len(every))
    return Corrected(t.name, node.name, fixed, len(found), tuple(wrong), checks, flops)


def _merge(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def _corrected(graph: Graph, node: Node, t: SpatialSplit, g: Geometry, wrong: Sequence[tuple[int, int]],
               emit: _Emitter) -> int:
    """Emit the partial program, the corrections of `wrong` and the assembly; the corrections' FLOPs."""
    y = node.outputs[0]
    if not wrong:
        _partial(graph, node, t, emit, y)
        return 0
    strip_outputs = _strip_outputs(graph, node, t, emit)
    x, a = node.inputs[0], t.axis - 2
    pieces = []  # (interval, input slice start, end, pad begin, pad end)
    for lo, hi in wrong:
        first, last = g.first_read(lo), g.first_read(hi - 1) + (g.taps - 1) * g.dilation + 1
        start, stop = max(0, first), min(g.size, last)
        pieces.append(((lo, hi), start, stop, start - first, last - stop))
    shapes = {(hi - lo, stop - start, pb, pe) for (lo, hi), start, stop, pb, pe in pieces}
    groups = [pieces] if len(shapes) == 1 else [[p] for p in pieces]  # one shape: one batched kernel
    fixes: dict[tuple[int, int], str] = {}
    n = graph.values[x].shape[0]
    for group in groups:
        _, start, stop, pb, pe = group[0]
        pads = list(node.attrs["pads"])
        pads[a], pads[a + 2] = pb, pe
        halos = [emit.slice(x, t.axis, s, e) for _, s, e, _, _ in group]
        stacked = halos[0] if len(halos) == 1 else emit(Op.CONCAT, halos, axis=0)[0]
        (fixed,) = emit(Op.CONV, [stacked, *node.inputs[1:]], **{**node.attrs, "pads": tuple(pads)})
        parts = [fixed] if len(group) == 1 else emit(Op.SPLIT, [fixed], len(group), axis=0, split=(n,) * len(group))
        fixes.update({interval: part for (interval, *_), part in zip(group, parts)})
    # the output: each strip's right rows (whole strips as they are) and the corrections, in order
    strip_out = g.out // t.parts
    bounds = sorted({0, g.out, *range(strip_out, g.out, strip_out), *(b for w in wrong for b in w)})
    assembled = []
    starts = {first: fix for (first, _), fix in fixes.items()}
    for lo, hi in zip(bounds, bounds[1:]):
        if lo in starts:  # a correction, which may span a cut
            assembled.append(starts[lo])
        elif not any(first <= lo < end for first, end in wrong):
            q = lo // strip_out
            whole = (lo, hi) == (q * strip_out, (q + 1) * strip_out)
            part = strip_outputs[q]
            assembled.append(part if whole else emit.slice(part, t.axis, lo - q * strip_out, hi - q * strip_out))
    emit(Op.CONCAT, assembled, axis=t.axis, name=y)
    out_shape = graph.values[y].shape
    w = graph.values[node.inputs[1]].shape
    per_output = 2 * int(np.prod(w[1:]))
    rows = sum(hi - lo for lo, hi in wrong)
    return per_output * int(np.prod(out_shape)) // out_shape[t.axis] * rows


_POINTS_PER_REGION = 3


def _differing(original: Graph, candidate: Graph, node: Node, axis: int, intervals: Sequence[tuple[int, int]],
               rng: np.random.Generator) -> list[int]:
    """Indices of the `intervals` (along `axis` of `node`'s output) where the two graphs differ
    at some checked position, on one draw of random residues for the convolution's operands
    (its input, weights and bias: whatever computed them, the programs must agree for all)."""
    env = {name: rng.integers(0, PRIME, original.values[name].shape) for name in node.inputs}
    left, right = PointEvaluator(original, env), PointEvaluator(candidate, env)
    output = node.outputs[0]
    shape = original.values[output].shape
    other = 5 - axis  # the other spatial axis: its borders and an inner position
    across = sorted({0, 1, shape[other] // 2, shape[other] - 2, shape[other] - 1} & set(range(shape[other])))
    bad = []
    for i, (lo, hi) in enumerate(intervals):
        along = sorted({lo, hi - 1, int(rng.integers(lo, hi))})
        points = [np.array(v) for v in zip(*[
            (int(rng.integers(shape[0])), int(rng.integers(shape[1])), *((o, c) if axis == 2 else (c, o)))
            for o in along for c in across])]
        if not np.array_equal(left.gather(output, tuple(points)), right.gather(output, tuple(points))):
            bad.append(i)
    return bad


class PointEvaluator:
    """A graph of Split, Slice, Concat and Conv nodes evaluated at chosen output positions only,
    on integer residues modulo PRIME; the values in `env` are leaves, whatever computes them."""

    def __init__(self, graph: Graph, env: dict[str, np.ndarray]) -> None:
        self.graph, self.env = graph, env
        self.producers = graph.producers()

    def gather(self, name: str, index: tuple[np.ndarray, ...]) -> np.ndarray:
        if name in self.env:
            return self.env[name][index]
        node = self.producers.get(name)
        if node is None:
            raise PetError(f"no values for {name}")
        if node.op is Op.SPLIT:
            axis, k = node.attrs["axis"], node.outputs.index(name)
            return self.gather(node.inputs[0], _shift(index, axis, sum(node.attrs["split"][:k])))
        if node.op is Op.SLICE:
            at = node.attrs
            moved = tuple(s + st * i for i, s, st in zip(index, at["starts"], at["steps"]))
            return self.gather(node.inputs[0], moved)
        if node.op is Op.CONCAT:
            return self._concat(node, index)
        if node.op is Op.CONV:
            return self._conv(node, index)
        raise PetError(f"node {node.name}: {node.op} is not evaluated at points")

    def _concat(self, node: Node, index: tuple[np.ndarray, ...]) -> np.ndarray:
        axis = node.attrs["axis"]
        index = tuple(np.broadcast_arrays(*index))
        out = np.zeros(index[0].shape, np.int64)
        start = 0
        for part in node.inputs:
            size = self.graph.values[part].shape[axis]
            inside = (index[axis] >= start) & (index[axis] < start + size)
            if inside.any():
                out[inside] = self.gather(part, _shift(tuple(i[inside] for i in index), axis, -start))
            start += size
        return out

    def _conv(self, node: Node, index: tuple[np.ndarray, ...]) -> np.ndarray:
        n, k, oh, ow = (i.reshape(-1) for i in np.broadcast_arrays(*index))
        shape = np.broadcast(*index).shape
        w = self.env[node.inputs[1]]
        f, cg, kh, kw = w.shape
        at = node.attrs
        g = k // (f // at["group"])
        (sh, sw), (dh, dw), (pt, pl) = at["strides"], at["dilations"], at["pads"][:2]
        c = g[:, None, None, None] * cg + np.arange(cg)[None, :, None, None]
        ih = (oh * sh - pt)[:, None, None, None] + (np.arange(kh) * dh)[None, None, :, None]
        iw = (ow * sw - pl)[:, None, None, None] + (np.arange(kw) * dw)[None, None, None, :]
        height, width = self.graph.values[node.inputs[0]].shape[2:]
        full = np.broadcast_arrays(n[:, None, None, None], c, ih, iw)
        valid = (full[2] >= 0) & (full[2] < height) & (full[3] >= 0) & (full[3] < width)
        x = np.zeros(full[0].shape, np.int64)
        if valid.any():
            x[valid] = self.gather(node.inputs[0], tuple(a[valid] for a in full))
        out = ((x * w[k]) % PRIME).reshape(len(k), -1).sum(axis=1) % PRIME
        if len(node.inputs) > 2:
            out = (out + self.env[node.inputs[2]][k]) % PRIME
        return out.reshape(shape)


def _shift(index: tuple[np.ndarray, ...], axis: int, by: int) -> tuple[np.ndarray, ...]:
    return (*index[:axis], index[axis] + by, *index[axis + 1:])


#: corrected transformations offered per graph: each costs the search one of its graphs and a
#: verification, and ResNet-18 alone has 99 (13 s)
LIMIT = 8


def rewrites(graph: Graph, transforms: Sequence[SpatialSplit] = TRANSFORMS, limit: int = LIMIT
             ) -> Iterator[tuple[str, Graph]]:
    """Corrected, verified transformations of `graph`'s convolutions, named: the costliest
    convolutions first, one of each shape (its twins elsewhere in the model would cost the same),
    at most `limit`."""
    convs: dict[str, tuple[int, Node]] = {}
    for node in graph.nodes:
        if node.op is Op.CONV and len(graph.values[node.inputs[1]].shape) == 4:
            w, out = graph.values[node.inputs[1]].shape, graph.values[node.outputs[0]].shape
            signature = repr((graph.values[node.inputs[0]].shape, w, sorted(node.attrs.items())))
            convs.setdefault(signature, (int(np.prod(out)) * int(np.prod(w[1:])), node))
    offered = 0
    for _, node in sorted(convs.values(), key=lambda fn: -fn[0]):
        for t in transforms:
            fixed = correct(graph, node, t)
            if fixed is not None:
                yield fixed.name, fixed.graph
                offered += 1
                if offered >= limit:
                    return
