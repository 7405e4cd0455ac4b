"""Software prefetches (`Stage.prefetch`): where they go, which lines they cover, that they change
no result, and which convolutions the CPU template gives them."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from isa import ISAS, runs_here
from task_helpers import blocked_conv_task

from autosched import te
from autosched.compile.kernel import build_kernel, source
from autosched.lower import arith, lower
from autosched.lower.ir import For, Prefetch, walk_stmts
from autosched.lower.lower import CACHE_LINE_BYTES, _line_offsets
from autosched.schedule import ScheduleError, create_schedule
from autosched.te.expr import Const, Var
from autosched.templates import get_template

BLOCKS, PIXELS, LANES = 6, 20, 8  # a 1x1 convolution of a blocked input, as the template tiles it


def blocked_1x1(tile: int, blocks: int = BLOCKS):
    """y[p, o] = sum over blocks c and lanes l of x[c, p, l] * w[c, l, o]: each block a plane,
    the pixels tiled by `tile`, the reduction's first loop `c`."""
    x = te.placeholder((blocks, PIXELS, LANES), name="x")
    w = te.placeholder((blocks, LANES, 8), name="w")
    c, lane = te.reduce_axis(blocks, "c"), te.reduce_axis(LANES, "l")
    y = te.compute((PIXELS, 8), lambda p, o: te.sum(x[c, p, lane] * w[c, lane, o], (c, lane)), name="y")
    s = create_schedule(y)
    acc = s[s.cache_write(y, "local")]
    po, pi = s[y].split(s[y].op.axes[0], tile)
    s.compute_at(acc, s[y], po)
    (p, o), (c, lane) = acc.op.axes, acc.op.reduce_axes
    acc.reorder(c, lane, p, o)
    acc.vectorize(o)
    s[y].vectorize(s[y].op.axes[1])
    return s, acc, (x, w, y)


def test_each_step_of_the_first_reduction_loop_prefetches_the_next_tiles_lines():
    s, acc, (x, w, y) = blocked_1x1(4)
    acc.prefetch(x, acc.op.reduce_axes[0], acc.op.axes[0], 4)
    func = lower(s, [x, w, y], "k")
    loop = next(f for f in walk_stmts(func.body) if isinstance(f, For) and f.var.name == "c")
    fetches = [f for f in walk_stmts(loop.body) if isinstance(f, Prefetch)]
    # the tile reads 4 pixels x 8 lanes = 32 floats of each plane: 2 lines, and one more where it
    # straddles; 4 pixels on (the next tile)
    offsets = [arith.linear(f.index).const for f in fetches]
    assert offsets == [32, 48, 63] and all(f.buffer.name == "x" for f in fetches)
    assert all(arith.linear(f.index).coeff(loop.var) == PIXELS * LANES for f in fetches)
    assert not any(isinstance(f, Prefetch) for f in walk_stmts(loop.body.stmts[-1]))  # once per step


@pytest.mark.parametrize("isa", ISAS)
def test_prefetching_changes_no_result_and_gcc_emits_the_instruction(isa):
    target, _, _ = ISAS[isa]
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(shape).astype(np.float32) for shape in ((BLOCKS, PIXELS, LANES), (BLOCKS, LANES, 8))]
    want = np.einsum("cpl,clo->po", *data)
    s, acc, (x, w, y) = blocked_1x1(4)
    acc.prefetch(x, acc.op.reduce_axes[0], acc.op.axes[0], 4)
    code = source(s, [x, w, y], "k", target)
    assert code.count("__builtin_prefetch(&x[") == 3
    if runs_here(target):
        out = np.zeros((PIXELS, 8), np.float32)
        build_kernel(s, [x, w, y], "k", target=target)(*data, out)  # the last tile's prefetches point past x
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_prefetch_names_a_loop_of_its_stage_and_a_tensor_it_reads():
    s, acc, (x, w, y) = blocked_1x1(4)
    with pytest.raises(ScheduleError, match="spatial axis"):
        acc.prefetch(x, acc.op.reduce_axes[0], acc.op.reduce_axes[1], 4)
    other = te.placeholder((4,), name="other")
    acc.prefetch(other, acc.op.reduce_axes[0], acc.op.axes[0], 4)
    with pytest.raises(ScheduleError, match="which it does not read"):
        lower(s, [x, w, y], "k")


def test_a_prefetch_of_too_many_lines_is_refused():
    """At a loop outside the blocks, a prefetch covers every plane: 12 of them, 2 lines each."""
    s, acc, (x, w, y) = blocked_1x1(4, blocks=12)
    (p, o), (c, lane) = acc.op.axes, acc.op.reduce_axes
    acc.reorder(p, c, lane, o)
    acc.prefetch(x, p, p, 4)
    with pytest.raises(ScheduleError, match="read 24 cache lines of x"):
        lower(s, [x, w, y], "k")


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), min_size=1, max_size=3),
       start=st.integers(0, 30), base=st.integers(0, 15))
def test_the_prefetched_offsets_touch_every_line_the_loops_read(steps, start, base):
    """Wherever the base falls on a line, each line some loop point reads gets a prefetch."""
    per_line = CACHE_LINE_BYTES // 4
    loops = [Var(f"v{k}", "int32") for k in range(len(steps))]
    offset = arith.Linear(const=start)
    for v, (coeff, _) in zip(loops, steps):
        offset = offset.plus(arith.linear(v * coeff) if coeff else arith.Linear())
    inner = {v: (0, hi) for v, (_, hi) in zip(loops, steps)}
    points = _line_offsets(offset, inner, per_line)
    read = {start}
    for (coeff, hi) in steps:
        read = {r + coeff * k for r in read for k in range(hi + 1)}
    assert {(base + r) // per_line for r in read} <= {(base + q) // per_line for q in points}
    assert len(points) <= 2 * len({(base + r) // per_line for r in read}) + 1


def test_offsets_that_are_no_sum_of_loop_steps_are_refused():
    v = Var("v", "int32")
    assert _line_offsets(arith.linear(v // 2), {v: (0, 3)}, 16) is None
    assert _line_offsets(arith.linear(Const(0, "int32") - v), {v: (0, 3)}, 16) is None


@pytest.mark.parametrize("isa", ISAS)
def test_the_cpu_template_prefetches_for_wide_1x1_convolutions_only(isa):
    """ResNeXt's 256 -> 128 1x1 layer at 56x56 (32 blocks of 8, 3.2 MB) prefetches; MobileNetV2's
    96 -> 576 at 14x14 (an input in L2) and a stride-2 1x1 layer do not."""
    target, _, lanes = ISAS[isa]
    template = get_template("ConvNCHWc", "llvm")

    def prefetches(c, oc, hw, stride, rows=None):
        task = blocked_conv_task((1, c, hw, hw) if rows is None else (1, c, 1, hw * hw), (oc, c, 1, 1), lanes, lanes,
                                 stride)
        code = source(*template.apply(task, template.fallback(task, target), target), "k", target)
        return len(re.findall(r"__builtin_prefetch", code))
    assert prefetches(256, 128, 56, 1) > 0
    assert prefetches(96, 576, 14, 1) == 0
    assert prefetches(256, 512, 56, 2) == 0
    # 800 KiB of input, beyond one core's L2: as an image it stays below the 1 MiB of two, as
    # one row (flatten_pointwise) it streams once per block tile and prefetches
    assert prefetches(256, 512, 28, 1) == 0
    assert prefetches(256, 512, 28, 1, rows=True) > 0
    assert prefetches(128, 512, 28, 1, rows=True) == 0  # 400 KiB: in L2
