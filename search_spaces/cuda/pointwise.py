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
- `row_reduce` (ops with an inner reduction stage and at least 2 output dims): "thread" keeps
  the last output axis serial inside a thread, "output" spreads it too, "block" (when the
  output itself does not reduce) gives each row a block of `threads` threads that reduce it
  together.
"""
from __future__ import annotations

import math

from autosched.compute import task_compute
from autosched.schedule import Schedule, create_schedule
from autosched.space import ChoiceKnob, Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.te import Tensor
from search_spaces.cuda.common import GpuTemplate, config_near, gpu_caps
from search_spaces.cuda.row_reduce import block_rows, schedule_block_rows
from search_spaces.registry import TemplateError

THREADS = (32, 64, 128, 256, 512, 1024)
PER_THREAD = (1, 2, 4)
THREAD_ROWS, OUTPUT_ROWS, BLOCK_ROWS = "thread", "output", "block"
LONG_ROW = 256  # reductions at least this long get a block a row in the fallback


def _row_reductions(out: Tensor) -> list[int]:
    """The lengths of the reductions inside the op (not the output's own): a row-wise op's rows."""
    return [math.prod(a.extent for a in st.op.reduce_axes) for st in create_schedule(out).stages
            if st.op is not out.op and st.op.reduce_axes]


def _compute(task: Task, target: Target) -> tuple[list[Tensor], Tensor]:
    # the capabilities only size the CPU panels of matmuls, which no op of this template has
    args, outs = task_compute(task, target.capabilities)
    if len(outs) != 1:
        raise TemplateError(f"{task.op} with {len(outs)} outputs has no GPU template (one output only)")
    return args, outs[0]


class PointwiseTemplate(GpuTemplate):
    name = "pointwise_cuda"

    def space(self, task: Task, target: Target) -> ConfigSpace:
        gpu_caps(target)
        _, out = _compute(task, target)
        size = 1
        for n in out.shape:
            size *= n
        rows = _row_reductions(out) if out.ndim >= 2 else []
        most = max([size] + rows)  # a block a row can use a thread per element of the longest row
        knobs = [ChoiceKnob("threads", tuple(t for t in THREADS if t == THREADS[0] or t <= most)),
                 ChoiceKnob("per_thread", PER_THREAD)]
        if rows:
            ways = (THREAD_ROWS, OUTPUT_ROWS) + (() if out.op.reduce_axes else (BLOCK_ROWS,))
            knobs.append(ChoiceKnob("row_reduce", ways))
        return ConfigSpace(self.name, tuple(knobs))

    def fallback(self, task: Task, target: Target) -> Config:
        """256 threads of one output (or one row) each: enough blocks to fill a GPU for all but
        the smallest tensors; rows of LONG_ROW or more a block each, whose 256 threads share
        the row's reductions."""
        space = self.space(task, target)
        if "row_reduce" not in {k.name for k in space.knobs}:
            return config_near(space, {"threads": 256, "per_thread": 1})
        _, out = _compute(task, target)
        long_rows = BLOCK_ROWS in space.knob("row_reduce").values and max(_row_reductions(out)) >= LONG_ROW
        return config_near(space, {"threads": 256, "per_thread": 1,
                                   "row_reduce": BLOCK_ROWS if long_rows else THREAD_ROWS})

    def _schedule(self, task: Task, config: Config, target: Target) -> tuple[Schedule, list[Tensor]]:
        args, out = _compute(task, target)
        ways = "row_reduce" in {k.name for k in config.space.knobs}
        if ways and config["row_reduce"] == BLOCK_ROWS:
            out = block_rows(out, config["threads"])
            s = create_schedule(out)
            schedule_block_rows(s, s[out], config["threads"])
            return s, args + [out]
        s = create_schedule(out)
        if out.op.reduce_axes:  # pooling, a reduction: accumulate in a register, store once
            acc = s[s.cache_write(out, "local")]
        else:
            acc = None
        o = s[out]
        axes = list(o.op.axes)
        rows = ways and config["row_reduce"] == THREAD_ROWS
        serial = axes[-1:] if rows else []
        lead = axes[:len(axes) - len(serial)]
        rest, elems = o.split(o.fuse(*lead), config["per_thread"])
        blocks, threads = o.split(rest, config["threads"])
        o.reorder(blocks, threads, elems, *serial)
        o.bind(blocks, "blockIdx.x")
        o.bind(threads, "threadIdx.x")
        o.unroll(elems)
        at = serial[-1] if acc is not None and serial else elems
        if acc is not None:
            s.compute_at(acc, o, at)
        for st in reversed(s.stages):  # consumers first: each reduction goes where its reader is
            if st is o or st is acc:
                continue
            if not st.op.reduce_axes:
                s.compute_inline(st)
                continue
            st.set_scope("local")
            direct = [r for r in s.readers(st) if r.attach != ("inline",)]
            if direct in ([], [o]):  # read by the output, maybe also through inlined stages (Softmax's max)
                s.compute_at(st, o, elems)
            elif len(direct) == 1 and direct[0].op.axes:  # inside another reduction (LayerNorm's mean)
                s.compute_at(st, direct[0], direct[0].op.axes[-1])
            else:
                raise TemplateError(f"{task.op}: no GPU schedule for reduction {st.name} read by "
                                    f"{', '.join(r.name for r in direct)}")
        return s, args + [out]


TEMPLATE = PointwiseTemplate()
