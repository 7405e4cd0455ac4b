"""Schedules: how the loops of each compute stage run.

A Schedule holds one Stage per compute operation. Primitives (split, fuse, reorder, tile,
annotations, compute_at/inline, cache_read/cache_write, bind) record *relations* between loop
axes; nothing is lowered until `autosched.lower.lower` walks them. Misuse raises ScheduleError
naming the stage and axis, because a schedule usually comes from a template and a config, and
the user needs to know which knob produced it.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, cast

from autosched.errors import AutoschedError
from autosched.te.expr import Load, Reduce, Var, substitute, transform
from autosched.te.tensor import REDUCE, SPATIAL, ComputeOp, IterVar, PlaceholderOp, Tensor, post_order

THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")
SCOPES = ("global", "shared", "local")
ANNOTATIONS = ("unroll", "vectorize", "parallel")


class ScheduleError(AutoschedError, ValueError):
    """A schedule primitive was used in a way that would change the computation or cannot be lowered."""


@dataclass(frozen=True, eq=False)
class Split:
    """parent = outer * factor + inner; `factor` or `nparts` is fixed, the other derived at lowering.
    The inner loop runs min(factor, parent's extent) iterations, or with `whole` always `factor`.
    With `shift`, a last tile that would overhang starts earlier instead: parent =
    min(outer * factor, extent - factor) + inner, recomputing a few points, unguarded."""
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None
    whole: bool = False
    shift: bool = False


@dataclass(frozen=True, eq=False)
class Fuse:
    """fused = outer * extent(inner) + inner."""
    outer: IterVar
    inner: IterVar
    fused: IterVar


#: the inputs a warp-level m16n8k8 mma takes (each accumulating in fp32)
MMA_PRECISIONS = ("tf32", "fp16", "bf16")


@dataclass(frozen=True, eq=False)
class MmaTile:
    """A reduction's innermost loops (`k`: 8 points of the reduction, `rows`: 2, `cols`: 2) run
    as one warp-level tensor-core `mma.sync` of `shape` with inputs rounded to `precision`.

    Each lane computes what its own scalar loops would have: the rows `lane_row` + 8·rows and
    the columns 2·`lane_col` + cols of a 16 × 8 tile, where `lane_row` (8 values) and
    `lane_col` (4) are the parts of the consumer's fused lane axis (lane = 4·lane_row +
    lane_col), as the PTX ISA lays out the m16n8k8 accumulator; the lowering derives every
    lane's A and B fragments from the scalar loops' loads."""

    k: IterVar
    rows: IterVar
    cols: IterVar
    lane_row: IterVar
    lane_col: IterVar
    shape: str = "m16n8k8"
    precision: str = "tf32"

    @property
    def loops(self) -> tuple[IterVar, IterVar, IterVar]:
        return (self.k, self.rows, self.cols)


@dataclass(frozen=True, eq=False)
class PrefetchAhead:
    """See `Stage.prefetch`."""
    tensor: Tensor
    at: IterVar
    axis: IterVar
    shift: int


class Attach(enum.Enum):
    """Where a stage is computed, other than at a loop of another stage (`ComputeAt`)."""

    ROOT = "root"                # its own loop nest, before its readers
    INLINE = "inline"            # substituted into every reader's expression
    PRECOMPUTED = "precomputed"  # not in the kernel: its values arrive as an argument


@dataclass(frozen=True)
class ComputeAt:
    """Computed inside `stage`'s loop `axis`, once per iteration of it."""
    stage: Stage
    axis: IterVar
    value: ClassVar[str] = "at"  # named like the `Attach` members, for messages


@dataclass(eq=False)
class Stage:
    op: ComputeOp
    scope: str = "global"
    leaf_axes: list = field(default_factory=list)
    relations: list = field(default_factory=list)
    annotations: dict = field(default_factory=dict)  # IterVar -> "unroll" | "vectorize" | "parallel" | thread tag
    pragmas: dict = field(default_factory=dict)      # IterVar -> {name: value}
    attach: Attach | ComputeAt = Attach.ROOT
    double_buffer: bool = False  # a shared tile kept twice, alternating with its loop (see `double_buffered`)
    pipeline_stages: int = 0  # copies of a shared tile filled ahead by asynchronous copies (see `pipelined`)
    storage_pad: int = 0  # elements added to the innermost dimension of the stage's buffer (see `pad_storage`)
    mma: MmaTile | None = None  # the innermost loops as a tensor-core instruction (see `tensorize`)
    prefetches: list = field(default_factory=list)  # PrefetchAhead, in order (see `prefetch`)

    def __post_init__(self):
        self.leaf_axes = list(self.op.axes) + list(self.op.reduce_axes)

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def root_axes(self) -> list:
        return list(self.op.axes) + list(self.op.reduce_axes)

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    # --- helpers -------------------------------------------------------------------------
    def _err(self, msg: str, axis: IterVar | None = None) -> ScheduleError:
        where = f"stage {self.name}" + (f", axis {axis.name}" if axis is not None else "")
        return ScheduleError(f"{where}: {msg}")

    def _leaf(self, iv: IterVar) -> int:
        if not isinstance(iv, IterVar):
            raise self._err(f"expected an IterVar, got {type(iv).__name__}")
        for k, a in enumerate(self.leaf_axes):
            if a is iv:
                return k
        if any(iv is a for s in self.relations for a in _rel_axes(s)):
            raise self._err("the axis was already split or fused away; use the axes that replaced it", iv)
        raise self._err("the axis does not belong to this stage", iv)

    def axis_kind(self, iv: IterVar) -> str:
        """Spatial or reduce, following the relations back to the root."""
        for rel in reversed(self.relations):
            if isinstance(rel, Split) and iv in (rel.outer, rel.inner):
                return self.axis_kind(rel.parent)
            if isinstance(rel, Fuse) and iv is rel.fused:
                return self.axis_kind(rel.outer)
        return iv.kind

    # --- loop structure --------------------------------------------------------------------
    def split(self, iv: IterVar, factor: int | None = None, nparts: int | None = None,
              whole: bool = False, shift: bool = False) -> tuple[IterVar, IterVar]:
        """outer, inner with parent = outer · factor + inner. An inner loop longer than what the
        parent has left runs only that, unless `whole` (factor= only): then it keeps `factor`
        iterations, the surplus guarded, so a loop bound to a warp's lanes keeps all 32.

        With `shift` (factor= only), a factor that does not divide the axis gives no guarded
        last tile: that tile moves back to end at the axis's end (Halide's ShiftInwards), so a
        vector loop stays vector code where a guard would make the C back end run its last tile
        in scalar. The points it shares with the tile before are computed twice, which only a
        stage without reductions can afford (each point is written whole, twice the same)."""
        k = self._leaf(iv)
        if (factor is None) == (nparts is None):
            raise self._err("split takes exactly one of factor= or nparts=", iv)
        if (whole or shift) and factor is None:
            raise self._err(f"a {'whole' if whole else 'shifted'} split takes factor=", iv)
        if shift and (whole or self.op.reduce_axes):
            raise self._err("a shifted split recomputes points: only a stage without reductions, and not whole", iv)
        n = int(factor if factor is not None else cast(int, nparts))  # exactly one is given (checked above)
        if n < 1:
            raise self._err(f"split {'factor' if factor is not None else 'nparts'} must be >= 1, got {n}", iv)
        f = n if factor is not None else max(1, -(-iv.extent // n))
        outer = IterVar(Var(iv.name + ".o"), -(-iv.extent // f), iv.kind)
        inner = IterVar(Var(iv.name + ".i"), f, iv.kind)
        self.relations.append(Split(iv, outer, inner, int(factor) if factor is not None else None,
                                    int(nparts) if nparts is not None else None, whole, shift))
        self.leaf_axes[k:k + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        if len(ivs) < 2:
            if len(ivs) == 1:
                self._leaf(ivs[0])
                return ivs[0]
            raise self._err("fuse needs at least one axis")
        pos = [self._leaf(iv) for iv in ivs]
        if pos != list(range(pos[0], pos[0] + len(ivs))):
            raise self._err("fuse needs adjacent axes, outermost first: " + ", ".join(i.name for i in ivs))
        kinds = {self.axis_kind(iv) for iv in ivs}
        if len(kinds) > 1:
            raise self._err("cannot fuse a spatial axis with a reduction axis", ivs[0])
        fused = ivs[0]
        for iv in ivs[1:]:
            new = IterVar(Var(f"{fused.name}.{iv.name}.f"), fused.extent * iv.extent, iv.kind)
            self.relations.append(Fuse(fused, iv, new))
            fused = new
        self.leaf_axes[pos[0]:pos[-1] + 1] = [fused]
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        pos = [self._leaf(iv) for iv in ivs]
        if len(set(pos)) != len(pos):
            raise self._err("reorder names an axis twice")
        for p, iv in zip(sorted(pos), ivs):
            self.leaf_axes[p] = iv

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # --- annotations -------------------------------------------------------------------------
    def _annotate(self, iv: IterVar, what: str) -> None:
        self._leaf(iv)
        if what in ("vectorize", "parallel") and self.axis_kind(iv) == REDUCE:
            reason = "loop-carried dependency" if what == "vectorize" else "race on the accumulator"
            raise self._err(f"cannot {what} a reduction axis ({reason})", iv)
        if iv in self.annotations and self.annotations[iv] != what:
            raise self._err(f"axis is already marked {self.annotations[iv]}, cannot also {what} it", iv)
        self.annotations[iv] = what

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, "unroll")

    def vectorize(self, iv: IterVar) -> None:
        self._annotate(iv, "vectorize")

    def parallel(self, iv: IterVar) -> None:
        self._annotate(iv, "parallel")

    def bind(self, iv: IterVar, thread: str) -> None:
        if thread not in THREAD_TAGS:
            raise self._err(f"unknown thread axis {thread!r}; one of {', '.join(THREAD_TAGS)}", iv)
        if self.axis_kind(iv) == REDUCE and thread.startswith("blockIdx"):
            raise self._err("cannot bind a reduction axis to blocks", iv)
        self._annotate(iv, thread)

    def pragma(self, iv: IterVar, name: str, value: int | str) -> None:
        if name not in ("auto_unroll_max_step",):
            raise self._err(f"unknown pragma {name!r}", iv)
        self._leaf(iv)
        self.pragmas.setdefault(iv, {})[name] = value

    def set_scope(self, scope: str) -> None:
        if scope not in SCOPES:
            raise self._err(f"unknown memory scope {scope!r}; one of {', '.join(SCOPES)}")
        self.scope = scope

    def double_buffered(self) -> None:
        """Keep two copies of this shared tile, the loop it is computed at alternating between them:
        writing one while slower threads may still read the other needs no barrier before the
        write, only the one after it (half the block-wide waits of a k loop)."""
        if self.scope != "shared":
            raise self._err(f"only a shared-memory stage can be double buffered, not a {self.scope} one")
        self.double_buffer = True

    def pipelined(self, stages: int) -> None:
        """Fill this shared tile with asynchronous copies `stages` - 1 iterations of its loop ahead,
        in `stages` rotating copies: the copies for iteration i + stages - 1 are in flight while
        iteration i computes, and each iteration waits once (one barrier) for its own."""
        if self.scope != "shared":
            raise self._err(f"only a shared-memory stage can be pipelined, not a {self.scope} one")
        if not 2 <= stages <= 8:
            raise self._err(f"a pipeline has 2 to 8 stages, not {stages}")
        if self.double_buffer:
            raise self._err("a stage is either double buffered or pipelined, not both")
        self.pipeline_stages = stages

    def pad_storage(self, elements: int) -> None:
        """Lengthen the innermost dimension of this stage's buffer by `elements` unused ones: rows
        that start on different shared-memory banks, so a column read is free of bank conflicts."""
        if self.scope != "shared":
            raise self._err(f"only a shared-memory stage's rows are padded, not a {self.scope} one")
        if elements < 0:
            raise self._err(f"padding cannot be negative, got {elements}")
        self.storage_pad = elements

    def prefetch(self, tensor: Tensor, at: IterVar, axis: IterVar, shift: int) -> None:
        """At the start of each iteration of the leaf loop `at`, ask the caches for the lines of
        `tensor` that the loops inside `at` read, as they would read them `shift` points further
        along this stage's axis `axis`: the next tile's input, on its way while this tile
        computes. For an input read from many places at once (a 1x1 convolution's channel
        blocks, each its own plane), too many streams for the hardware prefetchers to follow."""
        self._leaf(at)
        if not any(axis is a for a in self.op.axes):
            raise self._err("prefetches shift a spatial axis of the computation", axis)
        self.prefetches.append(PrefetchAhead(tensor, at, axis, shift))

    def tensorize(self, tile: MmaTile) -> None:
        """Run the innermost loops `tile.loops` (the last three leaves, in that order) as one
        warp-level tensor-core instruction (see `MmaTile`)."""
        if [self._leaf(iv) for iv in tile.loops] != list(range(len(self.leaf_axes) - 3, len(self.leaf_axes))):
            raise self._err("tensorize needs its k, rows and cols loops innermost, in that order", tile.k)
        if self.axis_kind(tile.k) != REDUCE or REDUCE in (self.axis_kind(tile.rows), self.axis_kind(tile.cols)):
            raise self._err("tensorize needs a reduction k loop and spatial rows and cols loops", tile.k)
        if tile.precision not in MMA_PRECISIONS:
            raise self._err(f"no m16n8k8 mma with {tile.precision} inputs; there are {', '.join(MMA_PRECISIONS)}", tile.k)
        self.mma = tile


def _rel_axes(rel) -> tuple:
    return (rel.parent, rel.outer, rel.inner) if isinstance(rel, Split) else (rel.outer, rel.inner, rel.fused)


class Schedule:
    """The stages of a computation, producers first, with the primitives that move them."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        for t in post_order(self.outputs):
            if isinstance(t.op, ComputeOp):
                st = Stage(t.op)
                self.stages.append(st)
                self._by_op[id(t.op)] = st

    def __getitem__(self, t: Tensor) -> Stage:
        st = self._by_op.get(id(t.op))
        if st is None:
            kind = "an input (placeholder)" if isinstance(t.op, PlaceholderOp) else "not part of this schedule"
            raise ScheduleError(f"tensor {t.name} is {kind}; it has no stage")
        return st

    def stage_of(self, t: Tensor) -> Stage | None:
        """The stage that produces `t` now (after cache_write moved it), or None for an input."""
        return self._by_op.get(id(t.op))

    def readers(self, st: Stage) -> list[Stage]:
        return [s for s in self.stages if any(self.stage_of(t) is st for t in s.op.inputs())]

    # --- placement ---------------------------------------------------------------------------
    def compute_at(self, st: Stage | Tensor, parent: Stage | Tensor, iv: IterVar) -> None:
        st, parent = self._st(st), self._st(parent)
        parent._leaf(iv)
        if not isinstance(st.op, ComputeOp) or st is parent:
            raise st._err(f"cannot compute_at into itself ({parent.name})")
        readers = [r for r in self.readers(st) if r is not parent and r.attach is not Attach.INLINE]
        nested = [r for r in readers if self._nested_in(r, parent, iv)]
        if st not in self._consumed_by(parent) and not nested:
            raise st._err(f"compute_at target {parent.name} does not read this stage's tensor, "
                          "nor does a stage computed inside that loop", iv)
        others = [r for r in readers if r not in nested]
        if others:
            raise st._err(f"compute_at {parent.name}: the tensor is also read by {others[0].name}, "
                          "which could not see a buffer local to that loop", iv)
        st.attach = ComputeAt(parent, iv)

    def _nested_in(self, st: Stage, parent: Stage, iv: IterVar) -> bool:
        """Whether `st` is computed inside `parent`'s loop `iv` (attached there, at a loop inside
        it, or to a stage that is): a buffer made at `iv` is alive wherever it runs. Readers
        attach first, so a producer that several nested stages share (one reduction's result
        read by the next reduction and by the output) can still live in that loop."""
        while isinstance(st.attach, ComputeAt):
            if st.attach.stage is parent:
                return parent.leaf_axes.index(st.attach.axis) >= parent.leaf_axes.index(iv)
            st = st.attach.stage
        return False

    def compute_inline(self, st: Stage | Tensor) -> None:
        st = self._st(st)
        if st.op.reduce_axes:
            raise st._err("a reduction cannot be inlined into its consumers")
        if any(o.op is st.op or self.stage_of(o) is st for o in self.outputs):
            raise st._err("an output of the computation cannot be inlined")
        st.attach = Attach.INLINE

    def compute_root(self, st: Stage | Tensor) -> None:
        self._st(st).attach = Attach.ROOT

    def precompute(self, st: Stage | Tensor) -> None:
        """The stage's values arrive as an argument, computed ahead of time.

        For stages that read only constants (weights repacked into a kernel's layout): a model
        build computes them once, and the kernel neither computes them nor needs their inputs.
        """
        st = self._st(st)
        if any(self.stage_of(o) is st for o in self.outputs):
            raise st._err("an output of the computation cannot be precomputed")
        st.attach = Attach.PRECOMPUTED

    def _consumed_by(self, parent: Stage) -> list[Stage]:
        """Stages whose tensors `parent` reads, looking through inlined stages."""
        out: list[Stage] = []
        todo = list(parent.op.inputs())
        while todo:
            st = self.stage_of(todo.pop())
            if st is None or st in out:
                continue
            out.append(st)
            if st.attach is Attach.INLINE:
                todo.extend(st.op.inputs())
        return out

    def parallel_outermost(self) -> None:
        """Run every stage's outermost loop in parallel where it has more than one iteration: the
        whole schedule of kernels no template tunes (weight packing, several-output kernels)."""
        for st in self.stages:
            if st.op.axes and st.op.axes[0].extent > 1:
                st.parallel(st.op.axes[0])

    def _st(self, x: Stage | Tensor) -> Stage:
        return x if isinstance(x, Stage) else self[x]

    # --- caching -------------------------------------------------------------------------------
    def cache_write(self, t: Tensor, scope: str) -> Tensor:
        """Compute `t` into a new buffer of `scope`; `t`'s stage becomes a copy out of it.

        The usual use: a register-tiled accumulator (scope local) computed at a tile loop.
        """
        st = self[t]
        if st.relations or st.annotations or st.attach is not Attach.ROOT:
            raise st._err("cache_write must come before any other primitive on the stage")
        if scope not in SCOPES:
            raise st._err(f"unknown memory scope {scope!r}")
        op = st.op
        axes = tuple(IterVar(Var(a.name), a.extent, SPATIAL) for a in op.axes)
        raxes = tuple(IterVar(Var(a.name), a.extent, REDUCE) for a in op.reduce_axes)
        mapping = {a.var: b.var for a, b in zip(op.axes + op.reduce_axes, axes + raxes)}
        ax_map = dict(zip(op.reduce_axes, raxes))

        def fresh(x):
            if isinstance(x, Reduce):
                return Reduce(x.combiner, x.source, tuple(ax_map.get(a, a) for a in x.axes), x.dtype)
            return None

        body = transform(substitute(op.body, mapping), fresh)
        cache_op = ComputeOp(f"{op.name}_{scope}", axes, body, op.tag, dict(op.attrs))
        cache = Tensor(cache_op)
        copy_axes = tuple(IterVar(Var(a.name), a.extent, SPATIAL) for a in op.axes)
        copy_op = ComputeOp(op.name, copy_axes, cache[tuple(a.var for a in copy_axes)], op.tag, dict(op.attrs))
        cache_stage = Stage(cache_op, scope=scope)
        st.op = copy_op
        st.leaf_axes = list(copy_axes)
        self._by_op[id(copy_op)] = st
        self._by_op[id(cache_op)] = cache_stage
        self.stages.insert(self.stages.index(st), cache_stage)
        return cache

    def cache_read(self, t: Tensor, scope: str, readers: Iterable[Stage | Tensor]) -> Tensor:
        """Copy `t` into a buffer of `scope` that the given readers load from instead."""
        reading = [self._st(r) for r in readers]
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read of {t.name}: unknown memory scope {scope!r}")
        src = self.stage_of(t)
        cache_op_t = _copy_compute(t, f"{t.name}_{scope}")
        cache_stage = Stage(cache_op_t.compute_op, scope=scope)
        self._by_op[id(cache_op_t.op)] = cache_stage
        for r in reading:
            if not any(self.stage_of(i) is src and (src is not None or i.op is t.op) for i in r.op.inputs()):
                raise r._err(f"cache_read: this stage does not read {t.name}")
            r.op = _redirect(r.op, t, cache_op_t, self)
            self._by_op[id(r.op)] = r
        first = min(self.stages.index(r) for r in reading)
        self.stages.insert(first, cache_stage)
        return cache_op_t


def _copy_compute(t: Tensor, name: str) -> Tensor:
    axes = tuple(IterVar(Var(f"ax{k}"), n, SPATIAL) for k, n in enumerate(t.shape))
    return Tensor(ComputeOp(name, axes, t[tuple(a.var for a in axes)], "copy"))


def _redirect(op: ComputeOp, old: Tensor, new: Tensor, sched: Schedule) -> ComputeOp:
    """`op` with reads of `old` (or of whatever now produces it) turned into reads of `new`."""
    target = sched.stage_of(old)

    def swap(x):
        if isinstance(x, Load) and (x.source.op is old.op or (target is not None and sched.stage_of(x.source) is target)):
            return Load(new, x.indices, x.dtype)
        return None

    return ComputeOp(op.name, op.axes, transform(op.body, swap), op.tag, op.attrs)


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    return Schedule([outputs] if isinstance(outputs, Tensor) else list(outputs))


__all__ = ["MMA_PRECISIONS", "MmaTile", "Schedule", "Stage", "ScheduleError", "Split", "Fuse", "create_schedule", "THREAD_TAGS", "SCOPES"]
