"""Data movement as copy kernels: pad, transpose, reshape, concat, slice.

Each output element reads one input element at an index computed from its own (gather
form), so every op is a single elementwise-shaped stage that fuses and vectorizes like the
others. Reshape goes through the flat (row-major) index with // and %; the simplifier folds
that arithmetic back to plain offsets wherever the two layouts agree.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from autosched import te
from autosched.lower.arith import Linear, linear, simplify
from autosched.ops.util import normalize_axis, vector_width, vectorize_innermost
from autosched.schedule import Schedule, create_schedule
from autosched.te import ComputeOp, Expr, Load, Tensor, Var
from autosched.te.expr import BinOp, Const, Select, children, free_vars, substitute

PAD_TAG = "pad"
INJECTIVE_TAG = "injective"


def pad(x: Tensor, pad_width: Sequence[tuple[int, int]], value: float | Tensor = 0.0, name: str = "pad") -> Tensor:
    """x surrounded by `value`: pad_width holds (before, after) per dimension. A value known only
    at run time (a dynamically quantized input's zero point) is a 0-d tensor of x's dtype."""
    if isinstance(value, Tensor) and (value.shape != () or value.dtype != x.dtype):
        raise ValueError(f"{name}: the padding's value must be one {x.dtype}, got {value.dtype}{list(value.shape)}")
    pad_width = [(int(b), int(a)) for b, a in pad_width]
    if len(pad_width) != x.ndim or any(b < 0 or a < 0 for b, a in pad_width):
        raise ValueError(f"{name}: need a non-negative (before, after) pair for each of {x.ndim} dimensions, "
                         f"got {pad_width}")
    shape = tuple(n + b + a for n, (b, a) in zip(x.shape, pad_width))

    def body(*i):
        src, conds = [], []
        for d, (n, (b, a)) in enumerate(zip(x.shape, pad_width)):
            src.append(i[d] - b if b else i[d])
            if b:
                conds.append(i[d] >= b)
            if a:
                conds.append(i[d] < b + n)
        v = x[tuple(src)]
        if not conds:
            return v
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return te.select(cond, v, value[()] if isinstance(value, Tensor) else te.const(value, x.dtype))

    return te.compute(shape, body, name=name, tag=PAD_TAG)


def transpose(x: Tensor, axes: Sequence[int] | None = None, name: str = "transpose") -> Tensor:
    """out.shape[k] = x.shape[axes[k]]; no axes reverses them, as numpy does."""
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(normalize_axis(a, x.ndim) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"{name}: axes {axes} are not a permutation of {x.ndim} dimensions")

    def body(*i):
        src = [None] * x.ndim
        for k, a in enumerate(perm):
            src[a] = i[k]
        return x[tuple(src)]

    return te.compute(tuple(x.shape[a] for a in perm), body, name=name, tag=INJECTIVE_TAG)


def reshape(x: Tensor, shape: Sequence[int], name: str = "reshape") -> Tensor:
    """The same elements in row-major order under a new shape; one entry may be -1."""
    shape = [int(s) for s in shape]
    size = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise ValueError(f"{name}: at most one dimension may be -1, got {shape}")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = size // known if known and size % known == 0 else -1
    if math.prod(shape) != size or any(s < 1 for s in shape):
        raise ValueError(f"{name}: cannot reshape {x.shape} ({size} elements) to {tuple(shape)}")

    def body(*i):
        return x[unflatten(flatten(i, shape), x.shape)]

    return te.compute(shape, body, name=name, tag=INJECTIVE_TAG)


def flatten(idx: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """The row-major offset of `idx` in `shape` (0 in a 0-d shape)."""
    if not idx:
        return te.const(0, "int32")
    flat = idx[0]
    for i, n in zip(idx[1:], shape[1:]):
        flat = flat * n + i
    return flat


def unflatten(flat: Expr, shape: Sequence[int]) -> tuple:
    """The index in `shape` of a row-major offset, innermost first so the divisions nest
    (x // a) // b the way fused loops do: the simplifier then cancels them pairwise."""
    if not shape:
        return ()
    out = []
    for n in reversed(shape[1:]):
        out.append(flat % n)
        flat = flat // n
    out.append(flat)
    return tuple(reversed(out))


def concat(tensors: Sequence[Tensor], axis: int = 0, name: str = "concat") -> Tensor:
    """The tensors joined along `axis`; every other dimension must agree."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{name}: nothing to concatenate")
    first = tensors[0]
    axis = normalize_axis(axis, first.ndim)
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != axis):
            raise ValueError(f"{name}: {t.name}{list(t.shape)} does not match {first.name}{list(first.shape)} "
                             f"outside axis {axis}")
        if t.dtype != first.dtype:
            raise ValueError(f"{name}: dtypes differ: {first.dtype} and {t.dtype}")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = first.shape[:axis] + (offsets[-1],) + first.shape[axis + 1:]

    def body(*i):
        def part(k: int) -> Expr:
            j = i[axis] - offsets[k] if offsets[k] else i[axis]
            return tensors[k][i[:axis] + (j,) + i[axis + 1:]]

        out = part(len(tensors) - 1)
        for k in range(len(tensors) - 2, -1, -1):
            out = te.select(i[axis] < offsets[k + 1], part(k), out)
        return out

    return te.compute(shape, body, name=name, tag=INJECTIVE_TAG)


def strided_slice(x: Tensor, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None = None,
                  steps: Sequence[int] | None = None, name: str = "slice") -> Tensor:
    """x[start:end:step] along `axes` with Python's rules (negative indices, clamping, negative steps)."""
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    steps = [1] * len(axes) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise ValueError(f"{name}: starts, ends, axes and steps must have one distinct entry per sliced axis")
    if 0 in steps:
        raise ValueError(f"{name}: a step cannot be 0")
    ranges = [range(n) for n in x.shape]
    for a, s, e, st in zip(axes, starts, ends, steps):
        ranges[a] = range(*slice(int(s), int(e), st).indices(x.shape[a]))
    if any(len(r) == 0 for r in ranges):
        raise ValueError(f"{name}: the slice of {x.name}{list(x.shape)} is empty")
    return te.compute(tuple(len(r) for r in ranges), lambda *i: x[tuple(r.start + r.step * v for r, v in zip(ranges, i))],
                      name=name, tag=INJECTIVE_TAG)


def _reads(op: ComputeOp) -> tuple[list[Linear], set[Var]]:
    """The flat index of every element `op`'s body reads, through the stages inlined into it,
    as a linear form of its axes, and the variables read outside load indices (conditions,
    computed values)."""
    ranges = {a.var: (0, a.extent - 1) for a in op.axes}
    loads: list[Linear] = []
    used: set[Var] = set()

    def visit(e: Expr) -> None:
        if isinstance(e, Load) and isinstance(e.source.op, ComputeOp):
            visit(substitute(e.source.op.body, {a.var: i for a, i in zip(e.source.op.axes, e.indices)}))
        elif isinstance(e, Load):
            flat: Expr = te.const(0, "int32")
            for i, n in zip(e.indices, e.source.shape):
                flat = flat * n + i
            loads.append(linear(flat, ranges))
        elif isinstance(e, Var):
            used.add(e)
        elif isinstance(e, Select):  # a concat's choice of input, through reshapes' flat indices
            used.update(free_vars(simplify(e.cond, ranges)))
            visit(e.t)
            visit(e.f)
        else:
            for c in children(e):
                visit(c)

    visit(op.body)
    return loads, used


def copy_suffix(out: Tensor) -> int:
    """The first axis of the longest run of trailing axes of `out` (the innermost one at
    least) along which each element read, through the stages inlined into it, lies at the
    output's own row-major offsets times one scale per read (1 for a copy, a step for a
    strided slice, 0 for a broadcast), and on which no condition or value depends: fused,
    that run is one loop that every load follows at a constant stride. A channel shuffle's
    transpose [0, 2, 1, 3, 4] of 1x2x58x28x28 copied 28-float rows in 4-float vectors (0.051
    ms, AVX-512, 2 threads); fused, its 784-float runs copy in 16-float vectors (0.0097 ms)."""
    if not isinstance(out.op, ComputeOp) or math.prod(out.shape) == 0:
        return out.ndim - 1
    axes = out.op.axes
    loads, used = _reads(out.op)
    strides = [math.prod(a.extent for a in axes[k + 1:]) for k in range(len(axes))]
    start = len(axes) - 1
    for d in range(len(axes) - 1, -1, -1):
        run = {a.var.key(): k for k, a in enumerate(axes) if k >= d and a.extent > 1}
        if any(v.key() in run for v in used) or not all(_follows(lin, run, strides) for lin in loads):
            break
        start = d
    return start


def gathered_axis(out: Tensor, k: int) -> int | None:
    """An axis before `k` along which every element `out` reads lies next to the one before
    (coefficient 1 in the input's flat index), where the run from `k` on reads no load
    contiguously: a transpose that moves the input's innermost axis outward (NHWC to NCHW),
    whose vectors gather lanes a row apart. None where there is none."""
    if not isinstance(out.op, ComputeOp) or math.prod(out.shape) == 0:
        return None
    axes = out.op.axes
    loads, used = _reads(out.op)
    if not loads or used:
        return None

    def coeff(lin: Linear, var: Var) -> int | None:
        found = [c for c, atom in lin.terms.values() if isinstance(atom, Var) and atom.key() == var.key()]
        return found[0] if len(found) == 1 else None

    innermost = axes[-1].var
    if any(coeff(lin, innermost) in (None, 1) for lin in loads):
        return None
    unit = [j for j in range(k) if axes[j].extent > 1 and all(coeff(lin, axes[j].var) == 1 for lin in loads)]
    return unit[-1] if unit else None


def blocked_axis(out: Tensor, k: int) -> tuple[int, int] | None:
    """(axis, block): an axis before `k` that every element `out` reads indexes as `axis // block`
    and `axis % block`, the latter next to the one before (coefficient 1), where the run from
    `k` on reads no load contiguously: a conversion from channel blocks to the plain layout
    (each vector gathers one channel from pixels of `block` channels). None where there is none."""
    if not isinstance(out.op, ComputeOp) or math.prod(out.shape) == 0:
        return None
    axes = out.op.axes
    loads, used = _reads(out.op)
    innermost = axes[-1].var.key()
    if not loads or used or any(lin.terms.get(innermost, [1])[0] == 1 for lin in loads):
        return None
    for j in reversed(range(k)):
        var = axes[j].var.key()
        blocks = {_mod_block(lin, var) for lin in loads}
        block = blocks.pop() if len(blocks) == 1 else None
        if block and axes[j].extent % block == 0 and all(var not in lin.terms for lin in loads):
            return j, block
    return None


def _mod_block(lin: Linear, var: tuple) -> int | None:
    """B where `lin` reads `var % B` with coefficient 1 (and nothing else modulo), else None."""
    mods = [(c, a) for c, a in lin.terms.values() if isinstance(a, BinOp) and a.op == "floormod"]
    if len(mods) != 1 or mods[0][0] != 1:
        return None
    mod = mods[0][1]
    if not (isinstance(mod.a, Var) and mod.a.key() == var and isinstance(mod.b, Const)):
        return None
    return int(mod.b.value)


def _follows(lin: Linear, run: dict, strides: list[int]) -> bool:
    """Whether the flat index `lin` moves by one scale times the output's stride along every
    axis of `run` (variable key -> axis), and depends on those axes in no other way."""
    scales = set()
    for coeff, atom in lin.terms.values():
        if isinstance(atom, Var) and atom.key() in run:
            k = run[atom.key()]
            if coeff % strides[k]:
                return False
            scales.add(coeff // strides[k])
        elif any(v.key() in run for v in free_vars(atom)):
            return False
    found = sum(isinstance(a, Var) and a.key() in run for _, a in lin.terms.values())
    return len(scales) <= 1 and (found == len(run) or not scales)


#: iterations the parallel loop of a copy with a short innermost run needs (threads, and chunks
#: to balance them); the axes inside stay nested loops
PARALLEL_ITERATIONS = 64


def schedule_injective(out: Tensor, vector_lanes: int) -> Schedule:
    """Outer axes fused and parallel, the innermost run of `copy_suffix` fused, split by the
    vector width and vectorized.

    Only that run is fused because copies index their input through it: it stays affine in the
    lane (contiguous or strided loads) where fusing every axis would bury it under // and %.
    Where the run is no longer than a vector, the outer axes are fused only until the parallel
    loop has `PARALLEL_ITERATIONS`, and those inside stay nested loops: a flat loop over every
    outer axis divides its index again for each element. A transposed convolution's
    interleave of its phases (1x64x2x2x17x17 to 1x64x17x2x17x2, pairs of floats) took 0.082 ms
    in DCGAN with 36992 flat iterations (AVX2, 2 threads).
    """
    return schedule_injective_passes(out, vector_lanes, root_tag=None)


def schedule_injective_passes(out: Tensor, vector_lanes: int, root_tag: str | None) -> Schedule:
    """`schedule_injective`, with the stages tagged `root_tag` computed at root first, each its
    own parallel vector loops (a linear Resize's passes before the last, GridSample's taps),
    and every other stage inlined."""
    s = create_schedule(out)
    for st in s.stages:
        if st.op is out.op:
            continue
        if root_tag is not None and st.op.tag == root_tag:
            schedule_injective_stage(s, Tensor(st.op), vector_lanes)
        else:
            s.compute_inline(st)
    schedule_injective_stage(s, out, vector_lanes)
    return s


def schedule_injective_stage(s: Schedule, out: Tensor, vector_lanes: int) -> None:
    """`schedule_injective`'s loops for the stage of `out` in `s`, whatever the other stages do
    (a computation of several injective passes, each at root)."""
    k, st = copy_suffix(out), s[out]
    axes = list(st.op.axes)
    run = math.prod(a.extent for a in axes[k:])
    if axes and run > vector_lanes and (j := gathered_axis(out, k)) is not None:
        # each vector gathers lanes a row of the input apart: the rows of one vector's lanes
        # stay in L1 while the axis that walks along them (the input's innermost) runs inside
        outer, lanes = st.split(st.fuse(*axes[k:]), vector_width(run, vector_lanes))
        st.reorder(*axes[:j], *axes[j + 1:k], outer, axes[j], lanes)
        st.parallel(st.fuse(*axes[:j], *axes[j + 1:k], outer))
        st.vectorize(lanes)
        return
    if axes and run > vector_lanes and (found := blocked_axis(out, k)) is not None:
        # the same, the gathered rows being the lanes of a channel block: its channels run
        # inside, over the pixels one vector gathered (WaveNet's 4 MB output, converted from
        # blocks of 16 channel by channel over whole rows, moved 21 GB/s)
        j, block = found
        jo, ji = st.split(axes[j], block)
        outer, lanes = st.split(st.fuse(*axes[k:]), vector_width(run, vector_lanes))
        st.reorder(*axes[:j], jo, *axes[j + 1:k], outer, ji, lanes)
        st.parallel(st.fuse(*axes[:j], jo, *axes[j + 1:k], outer))
        st.vectorize(lanes)
        return
    if not axes or run > vector_lanes:
        vectorize_innermost(st, vector_lanes, fuse_from=k)
        return
    j = next((j for j in range(1, k + 1) if math.prod(a.extent for a in axes[:j]) >= PARALLEL_ITERATIONS), k)
    _, lanes = st.split(st.fuse(*axes[k:]), vector_width(run, vector_lanes))
    if j:
        st.parallel(st.fuse(*axes[:j]))
    st.vectorize(lanes)


__all__ = ["pad", "transpose", "reshape", "concat", "strided_slice", "schedule_injective", "schedule_injective_stage",
           "flatten", "unflatten", "PAD_TAG", "INJECTIVE_TAG"]
