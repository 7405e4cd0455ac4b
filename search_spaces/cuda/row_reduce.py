"""Row reductions across the threads of a block: what lets a long row (BERT's 768 and 3072) use
hundreds of threads instead of one.

`block_rows` rewrites every reduction inside an op (Softmax's max and sum, LayerNorm's sums)
into a shared-memory tree of `threads` lanes: thread t first reduces the row's elements t,
t + T, t + 2T, … serially (coalesced reads), then log2(T) levels halve the partial results,
each level a shared stage between barriers, until lane 0 holds the row's value. The readers
then read that lane. `schedule_block_rows` gives each row of the output one block: the tree
stages run at the block's loop with all its threads (a level with fewer lanes than threads
leaves the rest idle, still reaching every barrier), each level computed inside the loop of
the level that reads it, and the output's elements are spread over the same threads.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable

from autosched import te
from autosched.schedule import Attach, Schedule, Stage
from autosched.te import Expr, IterVar, Load, Reduce, Tensor
from autosched.te.expr import substitute, transform

ROW_TREE_TAG = "row_tree"
_COMBINE = {"sum": operator.add, "max": te.max, "min": te.min}


def _flat_axes(flat: Expr, axes: tuple[IterVar, ...]) -> dict:
    """The reduction axes' values at position `flat` of their row-major product."""
    values = {}
    for a in reversed(axes):
        values[a.var] = flat % a.extent
        flat = flat // a.extent
    return values


def _partial(r: Tensor, body: Reduce, threads: int) -> Tensor:
    """lane t of the row: the reduction of the row's elements t, t + threads, …"""
    length = math.prod(a.extent for a in body.axes)
    j = te.reduce_axis(-(-length // threads), "j")
    spatial = r.compute_op.axes

    def lane(*idx):
        flat = j * threads + idx[-1]
        source = substitute(body.source, {**{a.var: i for a, i in zip(spatial, idx)},
                                             **_flat_axes(flat, body.axes)})
        if length % threads:
            source = te.select(flat < length, source, body.identity())
        return Reduce(body.combiner, source, (j,), body.dtype)

    return te.compute(r.shape + (threads,), lane, name=f"{r.name}_lanes", tag=ROW_TREE_TAG)


def _halve(prev: Tensor, combine, name: str) -> Tensor:
    """One level of the tree: lane t combines lanes t and t + width/2 of `prev`."""
    half = prev.shape[-1] // 2
    return te.compute(prev.shape[:-1] + (half,), lambda *i: combine(prev[i], prev[i[:-1] + (i[-1] + half,)]),
                      name=f"{name}_tree{half}", tag=ROW_TREE_TAG)


def _tree(r: Tensor, body: Reduce, threads: int) -> Tensor:
    """The reduction `r` (with `body` reading the rewritten producers) as its tree's lane 0."""
    level = _partial(r, body, threads)
    while level.shape[-1] > 1:
        level = _halve(level, _COMBINE[body.combiner], r.name)
    return te.compute(r.shape, lambda *i: level[i + (0,)], name=r.name, tag=r.compute_op.tag)


def rebuild(out: Tensor, reduction: Callable[[Tensor, Reduce], Tensor] | None = None) -> Tensor:
    """A fresh copy of `out`'s computation (its placeholders shared); with `reduction`, each
    reduction other than `out`'s own becomes reduction(tensor, its body reading the copies)."""
    new: dict[int, Tensor] = {}

    def redirect(x):
        return Load(new[id(x.source.op)], x.indices, x.dtype) if isinstance(x, Load) and id(x.source.op) in new \
            else None

    for t in te.post_order([out]):
        if not isinstance(t.op, te.ComputeOp):
            continue
        body = transform(t.op.body, redirect)
        if reduction is not None and isinstance(body, Reduce) and t is not out:
            new[id(t.op)] = reduction(t, body)
        else:
            new[id(t.op)] = Tensor(te.ComputeOp(t.op.name, t.op.axes, body, t.op.tag, t.op.attrs))
    return new[id(out.op)]


def block_rows(out: Tensor, threads: int) -> Tensor:
    """`out` with every reduction other than its own computed as a `threads`-lane tree."""
    if threads & (threads - 1):
        raise ValueError(f"a reduction tree needs a power-of-two lane count, not {threads}")
    return rebuild(out, lambda t, body: _tree(t, body, threads))


def schedule_block_rows(s: Schedule, o: Stage, threads: int, own: list[Stage]) -> None:
    """One block per output row (every axis but the last), its `threads` threads along the row;
    the trees in shared memory at the block, every other producer inlined (`own`: the output's
    stages, when the kernel has other outputs)."""
    *lead, last = o.op.axes
    block = o.fuse(*lead)
    serial, lane = o.split(last, threads)
    o.reorder(block, lane, serial)
    o.bind(block, "blockIdx.x")
    o.bind(lane, "threadIdx.x")
    for st in own:
        if st is not o and st.op.tag != ROW_TREE_TAG:
            s.compute_inline(st)
    for st in reversed(own):  # readers first: each level goes inside the level that reads it
        if st.op.tag != ROW_TREE_TAG:
            continue
        st.set_scope("shared")
        outer, lane = st.split(st.fuse(*st.op.axes), threads)
        st.bind(lane, "threadIdx.x")
        readers = consumers(s, st)
        if o in readers:  # a tree's last level (the output may share it with other trees' lanes)
            s.compute_at(st, o, block)
        else:  # the next level, or the lanes of a tree over values made from this one (LayerNorm's)
            s.compute_at(st, readers[0], readers[0].leaf_axes[0])


def consumers(s: Schedule, st: Stage) -> list[Stage]:
    """The stages that read `st`, directly or through inlined stages."""
    out = []
    for r in s.readers(st):
        out += consumers(s, r) if r.attach is Attach.INLINE else [r]
    return out
