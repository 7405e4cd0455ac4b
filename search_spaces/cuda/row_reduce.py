"""Row reductions across the threads of a block: what lets a long row (BERT's 768 and 3072) use
hundreds of threads instead of one.

`block_rows` rewrites every reduction inside an op (Softmax's max and sum, LayerNorm's sums)
into a shared-memory tree of `threads` lanes: thread t first reduces the row's elements t,
t + T, t + 2T, … serially (coalesced reads), then log2(T) levels halve the partial results,
each level a shared stage between barriers, until lane 0 holds the row's value. The readers
then read that lane. With `shuffle`, the levels below a warp's 32 lanes exchange registers
instead (`__shfl_xor_sync` butterflies, no shared memory, no barrier): every warp combines its
32 partial results in 5 exchanges, and, for more than 32 threads, the first threads combine the
warps' results the same way, so a row of 256 threads takes 3 shared stages instead of 9.
`schedule_block_rows` gives each row of the output one block: the tree
stages run at the block's loop with all its threads (a level with fewer lanes than threads
leaves the rest idle, still reaching every barrier), each level computed inside the loop of
the level that reads it, and the output's elements are spread over the same threads.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable

from autosched import te
from autosched.codegen.gpu import WARP_REDUCTIONS
from autosched.schedule import Attach, Schedule, Stage
from autosched.te import Expr, IterVar, Load, Reduce, Tensor
from autosched.te.expr import Call, Const, substitute, transform

ROW_TREE_TAG = "row_tree"
#: an output attribute: each element is a row of its own (a reduction that is the op's output,
#: copied out of its own stage), not the output's last axis
ELEMENT_ROWS = "element_rows"
WARP = 32
_WARP_CALL = {combiner: name for name, combiner in WARP_REDUCTIONS.items()}
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


def warp_allreduce(x: Expr, combiner: str, width: int, first: Expr, last: Expr) -> Call:
    """`x` combined over the `width` aligned lanes of the warp holding this thread, every lane
    getting the result (a GPU back end's butterfly of warp shuffles). Only meaningful where lane
    l of the stage is thread l of the block: the stages of `_shuffle_tree`. `first` and `last`
    read the first and last lanes of the row (a superset of the group, without the modulo that
    would blur bounds): the back ends print only `x` and `width`, but bounds inference sees that
    a lane's result needs the others', so every lane of a group is computed (and reaches the
    shuffle) wherever one of them is read."""
    return Call(_WARP_CALL[combiner], (x, Const(width, "int32"), first, last), x.dtype)


def _shuffle_tree(r: Tensor, body: Reduce, threads: int) -> Tensor:
    """`_tree` with the levels of a warp as shuffles: each warp's lanes combined in registers,
    then the warps' results (lane 0, 32, ...) by the first threads' lanes, then lane 0 read."""
    level = _partial(r, body, threads)
    width = min(threads, WARP)
    lanes = level
    def in_warp(*i):
        row = i[:-1]
        return warp_allreduce(lanes[i], body.combiner, width, lanes[row + (0,)], lanes[row + (threads - 1,)])

    level = te.compute(lanes.shape, in_warp, name=f"{r.name}_warps", tag=ROW_TREE_TAG)
    if threads > WARP:
        warps, per_warp = threads // WARP, level

        def across_warps(*i):  # lane w: warp w's result, as its lane 0 holds it
            row, w = i[:-1], i[-1]
            return warp_allreduce(per_warp[row + (w * WARP,)], body.combiner, warps, per_warp[row + (0,)],
                                  per_warp[row + (threads - 1,)])

        level = te.compute(lanes.shape[:-1] + (warps,), across_warps, name=f"{r.name}_block", tag=ROW_TREE_TAG)
    final, n = level, level.shape[-1]
    # lane 0 (a group of one lane: no exchange), reading as if from every lane, so all are computed
    return te.compute(r.shape, lambda *i: warp_allreduce(final[i + (0,)], body.combiner, 1, final[i + (0,)],
                                                         final[i + (n - 1,)]),
                      name=r.name, tag=r.compute_op.tag)


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


def block_rows(out: Tensor, threads: int, shuffle: bool = False) -> Tensor:
    """`out` with every reduction other than its own computed as a `threads`-lane tree, its
    levels within a warp as shuffles with `shuffle`."""
    if threads & (threads - 1):
        raise ValueError(f"a reduction tree needs a power-of-two lane count, not {threads}")
    tree = _shuffle_tree if shuffle else _tree
    return rebuild(out, lambda t, body: tree(t, body, threads))


def schedule_block_rows(s: Schedule, o: Stage, threads: int, own: list[Stage]) -> None:
    """One block per output row (every axis but the last, or each element with ELEMENT_ROWS),
    its `threads` threads along the row; the trees in shared memory at the block, every other
    producer inlined (`own`: the output's stages, when the kernel has other outputs)."""
    if o.op.attrs.get(ELEMENT_ROWS):
        block, last = o.split(o.fuse(*o.op.axes), 1)
    else:
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
