"""Lowering: a Schedule becomes one PrimFunc, a loop nest over flat buffers.

Per stage: leaf extents follow the split/fuse relations forward from the root extents (which,
for a stage computed at another's loop, are the region that consumer needs: bound
inference); root indices follow them backward from the loop variables. Non-divisible splits
and regions that overhang the tensor get guards; index arithmetic is simplified with the loop
ranges in hand.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np

from autosched.lower import arith
from autosched.lower.ir import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Let,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    WarpMma,
    seq,
)
from autosched.lower.tensor_core import mma_statement
from autosched.schedule import ANNOTATIONS, Attach, ComputeAt, Schedule, ScheduleError, Split, Stage
from autosched.te.expr import (
    BinOp,
    Const,
    Expr,
    Load,
    Reduce,
    Var,
    binop,
    free_vars,
    substitute,
    transform,
    walk,
)
from autosched.te.tensor import REDUCE, ComputeOp, IterVar, PlaceholderOp, Tensor

_COMBINE = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}
#: id of a leaf loop -> the (variable, value) pairs bound right inside it: the parts of a fused axis
Lets = dict[int, list[tuple[Var, Expr]]]
#: id of a leaf loop -> what encloses it: the buffers allocated around it and the statements run
#: before it (a pipeline's prologue)
Around = dict[int, tuple[list[Buffer], Stmt]]


#: bytes of a cache line, on every CPU a target names
CACHE_LINE_BYTES = 64
#: prefetches one loop iteration may issue (`Stage.prefetch`): more are a wrong loop, not a hint
MAX_PREFETCH_LINES = 16


def lower(sched: Schedule, args: Sequence[Tensor], name: str = "kernel") -> PrimFunc:
    """The loop nest of `sched`, as a function taking `args` (inputs and outputs) in order."""
    return _Lowerer(sched, list(args), name).run()


class _Lowerer:
    def __init__(self, sched: Schedule, args: list[Tensor], name: str):
        self.sched, self.args, self.name = sched, args, name
        self.buffers: dict[int, Buffer] = {}   # id(stage) or id(placeholder op) -> Buffer
        self.mins: dict[int, list] = {}        # id(stage) -> region minimum per dimension
        self.ranges: dict = {}                 # Var -> (lo, hi) of every loop in scope
        self.attached: dict[int, list[Stage]] = {}  # id(IterVar) -> stages computed at it
        self.block_shared: dict = {}  # Var -> range of loops bound to threadIdx/vthread (one block's threads)
        self.offsets: dict[int, Expr] = {}  # id(stage) -> where its current copy starts in a double buffer

    # --- entry -------------------------------------------------------------------------------
    def run(self) -> PrimFunc:
        params = self._params()
        for st in self.sched.stages:
            if isinstance(st.attach, ComputeAt):
                self.attached.setdefault(id(st.attach.axis), []).append(st)
        needed = self._needed()
        roots = [st for st in self.sched.stages if st.attach is Attach.ROOT and id(st) in needed]
        temps: list[Buffer] = []
        for st in roots:
            if id(st) not in self.buffers:
                self.buffers[id(st)] = Buffer(st.name, st.op.dtype, st.op.shape, st.scope)
                temps.append(self.buffers[id(st)])
            self.mins[id(st)] = [Const(0, "int32")] * len(st.op.shape)
        body = seq(*[self._stage(st, list(st.op.shape)) for st in roots])
        for buf in reversed(temps):
            body = Allocate(buf, body)
        return PrimFunc(self.name, params, _drop_unit_loops(body))

    def _params(self) -> list[Buffer]:
        params: list[Buffer] = []
        for t in self.args:
            st = self.sched.stage_of(t)
            if st is not None and st.attach not in (Attach.ROOT, Attach.PRECOMPUTED):
                raise ScheduleError(f"stage {st.name}: an argument of the function must be computed at root, "
                                    f"not {st.attach.value}")
            key = id(st) if st is not None else id(t.op)
            if key in self.buffers:
                raise ScheduleError(f"tensor {t.name} is passed twice")
            self.buffers[key] = Buffer(t.name, t.dtype, t.shape)
            params.append(self.buffers[key])
        for o in self.sched.outputs:
            if id(self.sched.stage_of(o)) not in self.buffers:
                raise ScheduleError(f"output {o.name} is not among the function's arguments")
        needed = self._needed()
        for st in self.sched.stages:
            if st.attach is Attach.PRECOMPUTED and id(st) in needed and id(st) not in self.buffers:
                raise ScheduleError(f"stage {st.name} is precomputed but not among the function's arguments")
        for t in self._reads():
            if isinstance(t.op, PlaceholderOp) and id(t.op) not in self.buffers:
                raise ScheduleError(f"input {t.name} is read but not among the function's arguments")
        return params

    def _reads(self) -> list[Tensor]:
        """Every tensor the function reads, not looking behind precomputed stages."""
        out, seen, todo = [], set(), list(self.sched.outputs)
        while todo:
            t = todo.pop()
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            out.append(t)
            st = self.sched.stage_of(t)
            if st is not None and st.attach is not Attach.PRECOMPUTED:
                todo.extend(st.op.inputs())
        return out

    def _needed(self) -> set[int]:
        """ids of the stages this function computes or takes precomputed."""
        return {id(st) for st in map(self.sched.stage_of, self._reads()) if st is not None}

    # --- one stage -----------------------------------------------------------------------------
    def _stage(self, st: Stage, region_ext: list[int]) -> Stmt:
        """The loop nest computing `st` over a region of `region_ext` points per output dimension,
        starting at `self.mins[id(st)]`, with the stages attached to its loops inside it."""
        ext = _leaf_extents(st, region_ext)
        self._enter_leaf_loops(st, ext)
        value, lets, guards = self._root_axis_values(st, ext)
        absolute, region_guards = self._absolute_indices(st, region_ext, value)
        guards += region_guards
        body_te = self._expand_inline(substitute(_body_source(st.op), absolute))
        pre, around = self._attached_stages(st, body_te, lets)
        for at, fetches in self._prefetches(st, absolute, lets).items():
            pre[at] = seq(fetches, pre.get(at))
        idx = self._offset(st, self._flat([value[id(a)] for a in st.op.axes], list(self.buffers[id(st)].shape)))
        store = self._store(st, idx, body_te)
        guards = self._live_guards(st, store, guards, lets)
        if st.mma is None:
            return self._loop_nest(st, ext, lets, pre, around, self._guard(store, guards), idx, guards)
        live = [c for c in (arith.simplify(g, self.ranges) for g in guards) if not (isinstance(c, Const) and c.value)]
        if live:
            raise ScheduleError(f"stage {st.name}: a tensorized nest cannot be guarded (every lane of a warp must "
                                f"run it), but it needs {live[0]!r}: pad the computation to whole tiles")
        return self._loop_nest(st, ext, lets, pre, around, mma_statement(store, st.mma, self.ranges, st.name),
                               idx, guards)

    def _enter_leaf_loops(self, st: Stage, ext: dict[int, int]) -> None:
        """Record the range of every leaf loop variable, and which of them index one block's threads."""
        for iv in st.leaf_axes:
            self.ranges[iv.var] = (0, ext[id(iv)] - 1)
            if str(st.annotations.get(iv, "")).startswith(("threadIdx", "vthread")):
                self.block_shared[iv.var] = self.ranges[iv.var]

    def _root_axis_values(self, st: Stage, ext: dict[int, int]) -> tuple[dict[int, Expr], Lets, list[Expr]]:
        """Every axis of the stage as an expression of the leaf loop variables, undoing the splits
        and fuses last to first; returns those values (by id of the axis), the lets that name the
        parts of a fused leaf, and the guards that keep a split which does not divide its axis
        inside that axis."""
        leaves = st.leaf_axes
        value: dict[int, Expr] = {id(iv): iv.var for iv in leaves}
        lets: Lets = {}
        guards: list[Expr] = []
        for rel in reversed(st.relations):
            if isinstance(rel, Split):
                start = value[id(rel.outer)] * ext[id(rel.inner)]
                overhang = ext[id(rel.parent)] % ext[id(rel.inner)]
                if overhang and rel.shift:  # the last tile moved back inside the axis
                    start = binop("min", start, ext[id(rel.parent)] - ext[id(rel.inner)])
                value[id(rel.parent)] = start + value[id(rel.inner)]
                if overhang and not rel.shift:
                    guards.append(value[id(rel.parent)] < ext[id(rel.parent)])
            else:
                fv, k = value[id(rel.fused)], ext[id(rel.inner)]
                outer_v, inner_v = fv // k, fv % k
                if any(fv is iv.var for iv in leaves):
                    leaf = next(iv for iv in leaves if iv.var is fv)
                    for iv, e in ((rel.outer, outer_v), (rel.inner, inner_v)):
                        lets.setdefault(id(leaf), []).append((iv.var, e))
                        self.ranges[iv.var] = (0, ext[id(iv)] - 1)
                        value[id(iv)] = iv.var
                        if leaf.var in self.block_shared:  # a fused thread axis: its parts are thread indices too
                            self.block_shared[iv.var] = self.ranges[iv.var]
                else:
                    value[id(rel.outer)], value[id(rel.inner)] = outer_v, inner_v
        return value, lets, guards

    def _absolute_indices(self, st: Stage, region_ext: list[int], value: dict[int, Expr]) -> tuple[dict, list[Expr]]:
        """The computation's axis variables -> their values in the whole tensor (the region's
        minimum plus the loop position), and the guards that keep a partial or moving region
        inside the tensor."""
        op, mins = st.op, self.mins[id(st)]
        absolute = {a.var: mins[d] + value[id(a)] for d, a in enumerate(op.axes)}
        absolute.update({r.var: value[id(r)] for r in op.reduce_axes})
        guards = [absolute[a.var] < a.extent for d, a in enumerate(op.axes)
                  if region_ext[d] < a.extent or not isinstance(mins[d], Const)]
        return absolute, guards

    def _attached_stages(self, st: Stage, body_te: Expr, lets: Lets) -> tuple[dict[int, Stmt], Around]:
        """id of a leaf loop -> the nests of the stages computed at it, sized to the region of
        `body_te` that the loops inside it cover; and for a loop with pipelined stages, what
        encloses the loop (see `_pipeline`)."""
        leaves = st.leaf_axes
        pre: dict[int, Stmt] = {}
        around: Around = {}
        for k, iv in enumerate(leaves):
            if id(iv) in self.attached:
                inner = {}
                for lv in leaves[k + 1:]:
                    inner[lv.var] = self.ranges[lv.var]
                    inner.update({v: self.ranges[v] for v, _ in lets.get(id(lv), [])})
                stages = self.attached[id(iv)]
                nests = [self._attached(a, body_te, inner) for a in stages]
                piped = [(a, n) for a, n in zip(stages, nests) if a.pipeline_stages]
                plain = [n for a, n in zip(stages, nests) if not a.pipeline_stages]
                pre[id(iv)] = seq(*plain, self._pipeline(st, iv, piped, around) if piped else None)
        return pre, around

    def _prefetches(self, st: Stage, absolute: dict, lets: Lets) -> dict[int, Stmt]:
        """id of a leaf loop -> the prefetches each iteration of it starts with (`Stage.prefetch`):
        one per cache line of what the loops inside it read, at the shifted point. Where the
        loops inside start on the line is not known, so the last element gets a prefetch too."""
        out: dict[int, Stmt] = {}
        leaves = st.leaf_axes
        for p in st.prefetches:
            k = next(i for i, iv in enumerate(leaves) if iv is p.at)
            inner = {v: self.ranges[v] for iv in leaves[k + 1:]
                     for v in [iv.var] + [x for x, _ in lets.get(id(iv), [])]}
            body = self._expand_inline(substitute(_body_source(st.op), {**absolute, p.axis.var:
                                                                        absolute[p.axis.var] + p.shift}))
            reads = {id(x): x for x in walk(body) if isinstance(x, Load) and x.source is p.tensor}
            if not reads:
                raise ScheduleError(f"stage {st.name}: a prefetch of {p.tensor.name}, which it does not read")
            fetches: dict[str, Stmt] = {}
            for load in reads.values():
                flat = cast(Load, self._resolve(load))
                index = flat.indices[0]
                base = arith.simplify(substitute(index, {v: Const(0, v.dtype) for v in inner}), self.ranges)
                offsets = _line_offsets(arith.linear(arith.simplify(index - base, self.ranges)), inner,
                                        CACHE_LINE_BYTES // np.dtype(flat.dtype).itemsize)
                if offsets is None:
                    raise ScheduleError(f"stage {st.name}: the loops inside {p.at.name} read {p.tensor.name} "
                                        "where a prefetch cannot follow (not a sum of their steps)")
                if len(offsets) > MAX_PREFETCH_LINES:
                    raise ScheduleError(f"stage {st.name}: the loops inside {p.at.name} read {len(offsets)} cache "
                                        f"lines of {p.tensor.name}; a prefetch takes at most {MAX_PREFETCH_LINES}")
                for q in offsets:
                    at = arith.simplify(base + q, self.ranges)
                    fetches.setdefault(repr(at), Prefetch(flat.source, at))
            out[id(p.at)] = seq(out.get(id(p.at)), *fetches.values())
        return out

    def _pipeline(self, st: Stage, iv: IterVar, piped: list, around: Around) -> Stmt:
        """The copies of `piped` (stage, Allocate of its nest) run `stages` - 1 iterations of loop
        `iv` ahead: a prologue before the loop issues the first `stages` - 1 iterations' copies,
        one group each; every iteration then waits for its own group, synchronizes the block
        once (its copies visible to all threads; every thread done with the copy it is about to
        overwrite) and issues the copies `stages` - 1 iterations ahead."""
        depth = {a.pipeline_stages for a, _ in piped}
        if len(depth) > 1:
            raise ScheduleError(f"stage {st.name}, axis {iv.name}: the stages pipelined at one loop need one "
                                f"depth, not {sorted(depth)}")
        ahead = depth.pop() - 1
        trips = self.ranges[iv.var][1] + 1
        nests = [alloc.body for _, alloc in piped]
        step = Var(iv.name + ".pre")
        self.ranges[step] = (0, ahead - 1)
        copies_at = [_subst_stmt(seq(*nests), {iv.var: step})]
        prologue = For(step, ahead, ForKind.UNROLL, seq(self._guard(copies_at[0], [step < trips]), AsyncCommit()))
        around[id(iv)] = ([alloc.buffer for _, alloc in piped], prologue)
        later = _subst_stmt(seq(*nests), {iv.var: iv.var + ahead})
        return seq(AsyncWait(ahead - 1), Barrier(), self._guard(later, [iv.var + ahead < trips]), AsyncCommit())

    def _store(self, st: Stage, idx: Expr, body_te: Expr) -> Store:
        """The innermost statement: the stage's value stored, or for a reduction combined into, at `idx`."""
        buf = self.buffers[id(st)]
        value_expr = self._resolve(body_te)
        if isinstance(st.op.body, Reduce):
            old = Load(buf, (idx,), buf.dtype)
            return Store(buf, idx, BinOp(_COMBINE[st.op.body.combiner], old, value_expr))
        return (AsyncCopy if st.pipeline_stages else Store)(buf, idx, value_expr)

    def _live_guards(self, st: Stage, store: Store, guards: list[Expr], lets: Lets) -> list[Expr]:
        """The guards `store` needs. A stage computed at another's loop whose accesses all stay
        inside its buffers keeps only those on reduction loops: a spatial overhang lands in scratch
        rows of a local buffer that no one reads, a reduction's overhang would add terms to the sum."""
        if not (isinstance(st.attach, ComputeAt) and self._in_bounds(store)):
            return guards
        reduce_vars = {v for iv in st.leaf_axes if st.axis_kind(iv) == REDUCE
                       for v in [iv.var] + [x for x, _ in lets.get(id(iv), [])]}
        return [g for g in guards if free_vars(g) & reduce_vars]

    def _loop_nest(self, st: Stage, ext: dict[int, int], lets: Lets, pre: dict[int, Stmt], around: Around,
                   main: Stmt, idx: Expr, guards: list[Expr]) -> Stmt:
        """The leaf loops around `main`, innermost first, each with its lets and attached stages,
        and for a reduction the identity's initialization just outside the first reduction loop.
        A tensorized stage's innermost loops are in `main` already (one instruction)."""
        leaves = st.leaf_axes
        kinds = [self._kind(st, iv) for iv in leaves]
        p = next((k for k, iv in enumerate(leaves) if st.axis_kind(iv) == REDUCE), None)
        for k, iv in enumerate(leaves):
            if kinds[k][0] is ForKind.VECTORIZE and (k != len(leaves) - 1 or id(iv) in pre):
                raise ScheduleError(f"stage {st.name}, axis {iv.name}: only the innermost loop can be vectorized")
        init = self._init_nest(st, leaves[p:], kinds[p:], idx, guards, ext, lets) if p is not None else None

        body = main
        tensorized = {id(iv) for iv in st.mma.loops} if st.mma is not None else set()
        for k in range(len(leaves) - 1, -1, -1):
            iv = leaves[k]
            if k + 1 == p:
                body = seq(init, body)
            if id(iv) in tensorized:
                continue
            body = _enclose(pre.get(id(iv)), body)
            for var, e in reversed(lets.get(id(iv), [])):
                body = Let(var, arith.simplify(e, self.ranges), body)
            kind, thread = kinds[k]
            body = For(iv.var, ext[id(iv)], kind, body, thread, dict(st.pragmas.get(iv, {})))
            if "auto_unroll_max_step" in body.pragmas:
                body.body = _auto_unroll(body.body, int(body.pragmas["auto_unroll_max_step"]))
            if id(iv) in around:
                buffers, prologue = around[id(iv)]
                body = seq(prologue, body)
                for buf in reversed(buffers):
                    body = Allocate(buf, body)
        if p == 0:
            body = seq(init, body)
        return body

    def _kind(self, st: Stage, iv: IterVar) -> tuple[ForKind, str]:
        a = st.annotations.get(iv)
        if a is None:
            return (ForKind.SERIAL, "")
        if a in ANNOTATIONS:
            return (ForKind(a), "")
        return (ForKind.THREAD, a)

    def _init_nest(self, st: Stage, leaves: list, kinds: list, idx: Expr, guards: list[Expr], ext: dict,
                   lets: dict) -> Stmt:
        """Stores the reduction's identity over the spatial loops inside the first reduction loop."""
        spatial = [(iv, kd) for iv, kd in zip(leaves, kinds) if st.axis_kind(iv) != REDUCE]
        fresh: dict = {}
        for iv, _ in spatial:
            for var in [iv.var] + [v for v, _ in lets.get(id(iv), [])]:
                fresh[var] = Var(var.name + ".init")
                self.ranges[fresh[var]] = self.ranges[var]
        reduce_vars = {iv.var for iv in leaves if st.axis_kind(iv) == REDUCE}
        conds = [substitute(g, fresh) for g in guards if not (free_vars(g) & reduce_vars)]
        buf = self.buffers[id(st)]
        reduction = st.op.body
        if not isinstance(reduction, Reduce):  # reduction loops come only from a Reduce body
            raise ScheduleError(f"stage {st.name} has reduction loops but no reduction to initialize")
        stmt = self._guard(Store(buf, substitute(idx, fresh), reduction.identity()), conds)
        for iv, (kind, thread) in reversed(spatial):
            for var, e in reversed(lets.get(id(iv), [])):
                stmt = Let(fresh[var], arith.simplify(substitute(e, fresh), self.ranges), stmt)
            stmt = For(fresh[iv.var], ext[id(iv)], kind, stmt, thread)
        return stmt

    def _in_bounds(self, store: Store) -> bool:
        """Whether every access of `store` stays inside its buffer for every loop value."""
        accesses = [(store.buffer, store.index)]
        accesses += [(x.source, x.indices[0]) for x in walk(store.value) if isinstance(x, Load)]
        for buf, index in accesses:
            b = arith.int_bound(index, self.ranges)
            if b is None or b[0] < 0 or b[1] >= buf.size:
                return False
        return True

    def _guard(self, stmt: Stmt, conds: list[Expr]) -> Stmt:
        live = []
        for c in conds:
            c = arith.simplify(c, self.ranges)
            if not (isinstance(c, Const) and c.value):
                live.append(c)
        if not live:
            return stmt
        cond = live[0]
        for c in live[1:]:
            cond = BinOp("and", cond, c)
        return IfThenElse(cond, stmt)

    # --- compute_at ----------------------------------------------------------------------------
    def _attached(self, st: Stage, consumer_body: Expr, inner: dict) -> Stmt:
        """Bound inference for `st` from the consumer's reads, then its nest in that region.

        A shared buffer serves every thread of a block: its region spans all the block's thread
        indices, not only the reading thread's (each thread's own loops bound to the same axes
        then fill their share of it).
        """
        op = st.op
        if st.scope == "shared":
            inner = {**self.block_shared, **inner}
        lo_hi: list[list] = [[] for _ in op.axes]
        for indices, ranges in self._reads_of(st, consumer_body, inner):
            for d, i in enumerate(indices):  # simplified first: a fused axis's (p // c)·c + p % c is p
                lo_hi[d].append(arith.symbolic_interval(arith.simplify(i, self.ranges), ranges))
        mins, exts = [], []
        for d, a in enumerate(op.axes):
            lo, e = self._cover(lo_hi[d], a.extent)
            mins.append(lo)
            exts.append(e)
        self.mins[id(st)] = mins
        shape = tuple(exts[:-1]) + (exts[-1] + st.storage_pad,) if exts else ()
        copies = 2 if st.double_buffer else st.pipeline_stages
        if copies:  # copies one after the other; the first extent never enters an index
            if not isinstance(st.attach, ComputeAt):
                raise ScheduleError(f"stage {st.name} has {copies} copies but is not computed at a loop to rotate with")
            self.offsets[id(st)] = arith.simplify((st.attach.axis.var % copies) * math.prod(shape), self.ranges)
            shape = (copies * shape[0],) + shape[1:]
        buf = Buffer(st.name, op.dtype, shape, st.scope if st.scope != "global" else "local")
        self.buffers[id(st)] = buf
        nest = self._stage(st, exts)
        if st.scope == "shared" and not st.pipeline_stages:  # a pipeline synchronizes once for all its stages
            nest = seq(nest, Barrier()) if st.double_buffer else seq(Barrier(), nest, Barrier())
        return Allocate(buf, nest)

    def _reads_of(self, st: Stage, body: Expr, inner: dict) -> list[tuple[tuple[Expr, ...], dict]]:
        """The indices at which `body` reads `st`'s tensor, with the ranges of the loops they vary
        over. Where it reads none of them directly, those of the stages it reads that are computed
        at a loop inside the consumer, their bodies read at the consumer's indices of them, their
        reductions over their whole extent: so a stage can be computed at an outer loop of its
        reader's consumer (a matmul's panels packed per parallel iteration, read by the
        accumulator tile computed inside it). Only then: following every nested stage's loads
        of a row op's chain of reductions took minutes."""
        loads = [x for x in walk(body) if isinstance(x, Load) and isinstance(x.source, Tensor)]
        direct = [(x.indices, inner) for x in loads if self.sched.stage_of(x.source) is st]
        if direct:
            return direct
        found: list[tuple[tuple[Expr, ...], dict]] = []
        seen: set = set()
        for x in loads:
            reader = self.sched.stage_of(x.source)
            key = (id(reader), tuple(i.key() for i in x.indices))
            if reader is None or not isinstance(reader.attach, ComputeAt) or key in seen:
                continue
            seen.add(key)
            through = substitute(_body_source(reader.op), {a.var: i for a, i in zip(reader.op.axes, x.indices)})
            ranges = {**inner, **{r.var: (0, r.extent - 1) for r in reader.op.reduce_axes}}
            found += self._reads_of(st, self._expand_inline(through), ranges)
        return found

    def _offset(self, st: Stage | None, index: Expr) -> Expr:
        """`index` in the copy of a double-buffered stage that the current iteration uses."""
        off = self.offsets.get(id(st))
        return index if off is None else arith.simplify(index + off, self.ranges)

    def _cover(self, intervals: list, full: int) -> tuple[Expr, int]:
        """One region [lo, lo + extent) covering every access; extent a constant."""
        if not intervals or any(iv is None for iv in intervals):
            return Const(0, "int32"), full
        lows = [arith.simplify(lo, self.ranges) for lo, _ in intervals]
        highs = [arith.simplify(hi, self.ranges) for _, hi in intervals]
        lo = lows[0]
        for other in lows[1:]:
            d = arith.linear(other).plus(arith.linear(lo), -1)
            if d.is_const():
                lo = other if d.const < 0 else lo
            else:
                return Const(0, "int32"), full
        extent = 0
        for hi in highs:
            e = arith.simplify(hi - lo + 1, self.ranges)
            n = arith.as_int(e)
            if n is None:
                b = arith.int_bound(e, self.ranges)
                if b is None:
                    return Const(0, "int32"), full
                n = b[1]
            extent = max(extent, n)
        return lo, max(1, min(extent, full))

    # --- expressions -----------------------------------------------------------------------------
    def _expand_inline(self, e: Expr) -> Expr:
        def expand(x):
            if isinstance(x, Load) and isinstance(x.source, Tensor):
                st = self.sched.stage_of(x.source)
                if st is not None and st.attach is Attach.INLINE:
                    body = substitute(st.op.body, {a.var: i for a, i in zip(st.op.axes, x.indices)})
                    return self._expand_inline(body)
            return None
        return transform(e, expand)

    def _resolve(self, e: Expr) -> Expr:
        """te loads become flat buffer loads; indices simplified."""
        def res(x):
            if isinstance(x, Load) and isinstance(x.source, Tensor):
                st = self.sched.stage_of(x.source)
                key = id(st) if st is not None else id(x.source.op)
                buf = self.buffers.get(key)
                if buf is None:
                    raise ScheduleError(f"tensor {x.source.name} is read before it is computed "
                                        "(compute_at into a loop that does not enclose its reader?)")
                mins = self.mins.get(key, [Const(0, "int32")] * len(buf.shape))
                rel = [i - m for i, m in zip(x.indices, mins)]
                return Load(buf, (self._offset(st, self._flat(rel, list(buf.shape))),), x.dtype)
            return None
        return arith.simplify(transform(e, res), self.ranges)

    def _flat(self, idx: list[Expr], shape: list[int]) -> Expr:
        flat: Expr = Const(0, "int32")
        for i, n in zip(idx, shape):
            flat = flat * n + i
        return arith.simplify(flat, self.ranges)


def _line_offsets(offset: arith.Linear, inner: dict, per_line: int) -> list[int] | None:
    """Offsets from the base that touch every cache line of `per_line` elements the loops
    `inner` (var -> range) read, wherever the base falls on a line; None unless the offset is a
    sum of non-negative steps of those loops. Steps that continue a contiguous run lengthen it;
    a larger step starts runs of its own, and runs less than a line apart merge: each merged
    run gets a prefetch per line and one at its end."""
    steps = []
    for coeff, atom in offset.terms.values():
        if not isinstance(atom, Var) or atom not in inner or coeff < 0:
            return None
        steps.append((coeff, inner[atom][1]))
    run, starts = 0, [offset.const]
    for coeff, hi in sorted(steps, key=lambda t: t[0]):
        if coeff <= run + 1:
            run += coeff * hi
        else:
            starts = [s + coeff * k for s in starts for k in range(hi + 1)]
    merged: list[list[int]] = []
    for start in sorted(set(starts)):
        if merged and start - merged[-1][1] < per_line:
            merged[-1][1] = start + run
        else:
            merged.append([start, start + run])
    return sorted({q for lo, hi in merged for q in [*range(lo, hi + 1, per_line), hi]})


def _enclose(pre: Stmt | None, body: Stmt) -> Stmt:
    """The nests of the stages computed at a loop, then the loop's body, each buffer's scope
    reaching over everything after its nest: the readers follow the nest, and a buffer too large
    for the stack (heap-allocated in its own block, `codegen/c.py`) must still be theirs."""
    out = body
    for s in reversed(pre.stmts if isinstance(pre, Seq) else (pre,) if pre is not None else ()):
        out = Allocate(s.buffer, seq(s.body, out)) if isinstance(s, Allocate) else seq(s, out)
    return out


def _body_source(op: ComputeOp) -> Expr:
    return op.body.source if isinstance(op.body, Reduce) else op.body


def _leaf_extents(st: Stage, region_ext: list[int]) -> dict[int, int]:
    """id of every axis of the stage (root, split, fused) -> its extent when the stage computes a
    region of `region_ext` points: a split's inner part never exceeds its parent."""
    ext = {id(a): e for a, e in zip(st.op.axes, region_ext)}
    ext.update({id(r): r.extent for r in st.op.reduce_axes})
    for rel in st.relations:
        if isinstance(rel, Split):
            pe = ext[id(rel.parent)]
            f = rel.factor if rel.factor is not None else max(1, -(-pe // cast(int, rel.nparts)))  # one is set
            ext[id(rel.inner)] = f if rel.whole else max(1, min(f, pe))
            ext[id(rel.outer)] = -(-pe // ext[id(rel.inner)])
        else:
            ext[id(rel.fused)] = ext[id(rel.outer)] * ext[id(rel.inner)]
    return ext


def _trip_count(s: Stmt) -> int:
    if isinstance(s, For):
        return s.extent * _trip_count(s.body)
    if isinstance(s, Seq):
        return sum(_trip_count(x) for x in s.stmts)
    if isinstance(s, (Allocate, Let, IfThenElse)):
        return _trip_count(s.body if not isinstance(s, IfThenElse) else s.then)
    return 1


def _auto_unroll(s: Stmt, max_step: int) -> Stmt:
    """Unroll every serial loop whose whole nest runs at most `max_step` iterations."""
    if isinstance(s, For):
        s.body = _auto_unroll(s.body, max_step)
        if s.kind is ForKind.SERIAL and _trip_count(s) <= max_step:
            s.kind = ForKind.UNROLL
        return s
    if isinstance(s, Seq):
        return Seq(tuple(_auto_unroll(x, max_step) for x in s.stmts))
    if isinstance(s, (Allocate, Let)):
        s.body = _auto_unroll(s.body, max_step)
    elif isinstance(s, IfThenElse):
        s.then = _auto_unroll(s.then, max_step)
    return s


def _drop_unit_loops(s: Stmt) -> Stmt:
    """A loop of one iteration is its body with the variable set to 0."""
    if isinstance(s, For):
        body = _drop_unit_loops(s.body)
        if s.extent == 1 and s.kind is not ForKind.THREAD:
            return _subst_stmt(body, {s.var: Const(0, "int32")})
        s.body = body
        return s
    if isinstance(s, Seq):
        return seq(*[_drop_unit_loops(x) for x in s.stmts])
    if isinstance(s, (Allocate, Let)):
        s.body = _drop_unit_loops(s.body)
    elif isinstance(s, IfThenElse):
        s.then = _drop_unit_loops(s.then)
    return s


def _subst_stmt(s: Stmt, m: dict) -> Stmt:
    def ex(e: Expr) -> Expr:
        return arith.simplify(substitute(e, m))
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _subst_stmt(s.body, m), s.thread, s.pragmas)
    if isinstance(s, Store):  # an AsyncCopy stays one
        return type(s)(s.buffer, ex(s.index), ex(s.value))
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, ex(s.index))
    if isinstance(s, WarpMma):
        return WarpMma(s.shape, s.precision, tuple(ex(x) for x in s.a), tuple(ex(x) for x in s.b), s.acc,
                       tuple(ex(x) for x in s.c), None if s.a_rows is None else ex(s.a_rows))
    if isinstance(s, IfThenElse):
        return IfThenElse(ex(s.cond), _subst_stmt(s.then, m), s.orelse and _subst_stmt(s.orelse, m))
    if isinstance(s, Let):
        return Let(s.var, ex(s.value), _subst_stmt(s.body, m))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _subst_stmt(s.body, m))
    if isinstance(s, Seq):
        return Seq(tuple(_subst_stmt(x, m) for x in s.stmts))
    return s


__all__ = ["lower"]
