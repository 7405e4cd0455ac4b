"""GPU template for every op that is not a matmul or convolution: elementwise ops, layout ops
(Reshape, Transpose, Concat, Pad, Slice, Gather), pooling, reductions, Softmax, LayerNorm.

One thread computes `per_thread` consecutive outputs of the flattened output (or whole rows:
every axis but the last is spread over threads, the last runs serially in the thread).
Producer stages are inlined; a reduction is computed in registers at the thread's loop, so a
row-wise op (Softmax, LayerNorm) reduces each row once a thread, or once per output element
(more work, more parallelism: the tuner weighs the two), or, for long rows, once a block with
all its threads (row_reduce.py: a shared-memory tree between barriers). The knobs:

- `threads`: threads per block;
- `per_thread`: consecutive outputs per thread, unrolled;
- `row_reduce` (ops with an inner reduction stage and at least 2 output dims, and reductions of
  a warp's length or more that are the op's output, moved into a stage of their own so that each
  output element is a row): "thread" keeps the last output axis serial inside a thread,
  "output" spreads it too, "block" (when the output itself does not reduce) gives each row a
  block of `threads` threads that reduce it together through shared memory, "shuffle" the same
  with warp shuffles for every level within a warp (row_reduce.py).
"""
from __future__ import annotations

import math

from autosched import te
from autosched.compute import task_compute
from autosched.schedule import Schedule, Stage, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from autosched.templates import TemplateError
from search_spaces.cuda.common import GpuTemplate, config_near, gpu_caps
from search_spaces.cuda.row_reduce import ELEMENT_ROWS, WARP, block_rows, consumers, rebuild, schedule_block_rows

THREADS = (32, 64, 128, 256, 512, 1024)
PER_THREAD = (1, 2, 4)
THREAD_ROWS, OUTPUT_ROWS, BLOCK_ROWS, SHUFFLE_ROWS = "thread", "output", "block", "shuffle"
MAX_ROW_THREADS = 256  # the fallback's threads for a block a row


def _compute(task: Task, target: Target) -> tuple[list[Tensor], list[Tensor]]:
    """The task's arguments and outputs; several outputs (Split's parts, LayerNorm's Mean and
    InvStdDev) get computations of their own that share no stage, so each is scheduled as a
    one-output op in the same kernel (a reduction two outputs read is computed by each)."""
    # the capabilities only size the CPU panels of matmuls, which no op of this template has
    args, outs = task_compute(task, target.capabilities)
    return args, [_reduction_inside(o) for o in (outs if len(outs) == 1 else [rebuild(o) for o in outs])]


def _reduction_inside(out: Tensor) -> Tensor:
    """An output that is itself a reduction of a warp's length or more (ReduceMax, ReduceSum,
    a log-softmax's max) as a copy of that reduction, computed as its own stage: a row-wise op
    whose rows the threads of a block can share, as Softmax's. Done in place, each output was one
    thread's serial loop over its row: a ReduceMax over 4x128x1000 took 68 us on an H200, a block
    a row 1.8 us."""
    op = out.compute_op
    if not out.ndim or math.prod(a.extent for a in op.reduce_axes) < WARP:
        return out
    inner = Tensor(te.ComputeOp(f"{op.name}_rows", op.axes, op.body, op.tag, op.attrs))
    return te.compute(out.shape, lambda *i: inner[i], name=op.name, tag=op.tag, attrs={ELEMENT_ROWS: True})


def _row_reductions(out: Tensor) -> list[int]:
    """The lengths of the reductions inside an output of the op (not the output's own): a
    row-wise op's rows; none for outputs of fewer than 2 dims, which have no rows to give, unless
    each element is a row."""
    if out.ndim < 2 and not out.compute_op.attrs.get(ELEMENT_ROWS):
        return []
    return [math.prod(a.extent for a in st.op.reduce_axes) for st in create_schedule(out).stages
            if st.op is not out.op and st.op.reduce_axes]


class PointwiseTemplate(GpuTemplate):
    name = "pointwise_cuda"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        gpu_caps(target)
        _, outs = _compute(task, target)
        rows = [n for o in outs for n in _row_reductions(o)]
        most = max([math.prod(o.shape) for o in outs] + rows)  # a block a row: a thread per element
        knobs = [ChoiceKnob("threads", tuple(t for t in THREADS if t == THREADS[0] or t <= most)),
                 ChoiceKnob("per_thread", PER_THREAD)]
        if rows:
            own = any(o.compute_op.reduce_axes for o in outs)
            blocks = () if own else (BLOCK_ROWS, SHUFFLE_ROWS)
            knobs.append(ChoiceKnob("row_reduce", (THREAD_ROWS, OUTPUT_ROWS) + blocks))
        return ConfigSpace(self.name, tuple(knobs))

    def fallback(self, task: Task, target: Target) -> Config:
        """256 threads of one output each: enough blocks to fill a GPU for all but the smallest
        tensors. Rows of a warp's length or more get a block each, whose threads (a power of two
        up to the row's length, 32 to 256) share the row's reductions, warps by shuffles; shorter
        reductions (a pool's window) are computed by each output's thread. A thread a row read
        BERT's 1536 attention rows of 128 in 6 blocks, uncoalesced, 81 µs of the layer's 180 on
        an H200, and made an LRN's 5-channel window sum one block of 32 threads, each summing
        1024 outputs (230 µs)."""
        space = self.space(task, target)
        if "row_reduce" not in {k.name for k in space.knobs}:
            return config_near(space, {"threads": 256, "per_thread": 1})
        _, outs = _compute(task, target)
        longest = max(n for o in outs for n in _row_reductions(o))
        if SHUFFLE_ROWS not in space.knob("row_reduce").values or longest < WARP:
            return config_near(space, {"threads": 256, "per_thread": 1, "row_reduce": OUTPUT_ROWS})
        threads = min(MAX_ROW_THREADS, 1 << (longest.bit_length() - 1))
        return config_near(space, {"threads": threads, "per_thread": 1, "row_reduce": SHUFFLE_ROWS})

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        args, outs = _compute(task, target)
        way = config.get("row_reduce")
        threads = config["threads"]
        by_rows = [way is not None and bool(_row_reductions(o)) for o in outs]
        if way in (BLOCK_ROWS, SHUFFLE_ROWS):
            outs = [block_rows(o, threads, way == SHUFFLE_ROWS) if rows else o for o, rows in zip(outs, by_rows)]
        s = create_schedule(outs)
        stages = [[s[t] for t in te.post_order([o]) if isinstance(t.op, te.ComputeOp)] for o in outs]
        for out, own, rows in zip(outs, stages, by_rows):
            if rows and way in (BLOCK_ROWS, SHUFFLE_ROWS):
                schedule_block_rows(s, s[out], threads, own)
            else:
                whole_rows = rows and way == THREAD_ROWS and not out.compute_op.attrs.get(ELEMENT_ROWS)
                _schedule_flat(s, out, own, threads, config["per_thread"], whole_rows)
        return s, args + outs


def _schedule_flat(s: Schedule, out: Tensor, own: list[Stage], threads: int, per_thread: int, rows: bool) -> None:
    """`per_thread` consecutive outputs a thread (whole rows with `rows`), `threads` a block;
    `own` (the output's producers) inlined, or, reductions, computed in registers where read."""
    acc = s[s.cache_write(out, "local")] if out.compute_op.reduce_axes else None  # pooling: accumulate, store once
    o = s[out]
    axes = list(o.op.axes)
    serial = axes[-1:] if rows else []
    lead = axes[:len(axes) - len(serial)]
    rest, elems = o.split(o.fuse(*lead), per_thread)
    blocks, lanes = o.split(rest, threads)
    o.reorder(blocks, lanes, elems, *serial)
    o.bind(blocks, "blockIdx.x")
    o.bind(lanes, "threadIdx.x")
    o.unroll(elems)
    at = serial[-1] if acc is not None and serial else elems
    if acc is not None:
        s.compute_at(acc, o, at)
    for st in reversed(own):  # consumers first: each reduction goes where its reader is
        if st is o or st is acc or st.op is out.op:
            continue
        if not st.op.reduce_axes:
            s.compute_inline(st)
            continue
        st.set_scope("local")
        direct = list({id(r): r for r in consumers(s, st)}.values())
        if o in direct:  # read by the output (maybe also by reductions computed there: Softmax's max)
            s.compute_at(st, o, elems)
        elif len(direct) == 1 and direct[0].op.axes:  # inside another reduction (LayerNorm's mean)
            s.compute_at(st, direct[0], direct[0].op.axes[-1])
        else:
            raise TemplateError(f"{out.name}: no GPU schedule for reduction {st.name} read by "
                                f"{', '.join(r.name for r in direct)}")


TEMPLATE = PointwiseTemplate()
