"""Copy kernels against numpy: pad, transpose, reshape, concat, strided slice, layout transforms."""
import re

import numpy as np
import pytest
from isa import ISAS, runs_here
from ops_helpers import rand, run
from task_helpers import assert_matches_reference, multi_output_task

from autosched import ops, te
from autosched.compile.kernel import source
from autosched.compile.model import default_kernel
from autosched.graph.ir import Op
from autosched.graph.layout import convert
from autosched.ops import conv_nchwc


@pytest.mark.parametrize("shape, widths, value", [
    ((7,), [(2, 3)], 0.0),
    ((3, 5), [(0, 0), (1, 2)], -1.5),
    ((2, 3, 4, 5), [(0, 0), (1, 0), (2, 1), (0, 3)], 7.0),
    ((1, 1), [(0, 0), (0, 0)], 0.0),
])
def test_pad_constant(shape, widths, value, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(ops.pad(x, widths, value), [x], [data], ops.schedule_injective, cpu_target)
    np.testing.assert_array_equal(got, np.pad(data, widths, constant_values=value))


def test_pad_rejects_negative_widths():
    with pytest.raises(ValueError, match="non-negative"):
        ops.pad(te.placeholder((3,)), [(-1, 0)])


@pytest.mark.parametrize("shape, axes", [
    ((3, 5), None),
    ((2, 3, 4), (0, 2, 1)),
    ((2, 3, 4, 5), (0, 2, 3, 1)),
    ((7, 1, 127), (2, 0, 1)),
    ((16, 32), (1, 0)),
])
def test_transpose(shape, axes, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(ops.transpose(x, axes), [x], [data], ops.schedule_injective, cpu_target)
    np.testing.assert_array_equal(got, np.transpose(data, axes))


@pytest.mark.parametrize("shape, new", [
    ((2, 3, 4), (6, 4)),
    ((2, 3, 4), (4, -1)),
    ((6, 5, 7), (210,)),
    ((127,), (1, 127, 1)),
    ((2, 8, 3, 3), (2, 72)),
    ((4, 6), (3, 8)),
])
def test_reshape(shape, new, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(ops.reshape(x, new), [x], [data], ops.schedule_injective, cpu_target)
    np.testing.assert_array_equal(got, data.reshape(new))


def test_reshape_rejects_wrong_size():
    with pytest.raises(ValueError, match="cannot reshape"):
        ops.reshape(te.placeholder((2, 3)), (4, 2))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_flatten_reshape_folds_to_plain_copy(isa):
    lanes = ISAS[isa][2]
    """The // and % of the row-major round trip cancel: the copy is one vector load per store."""
    x = te.placeholder((2, 8, 4, 4), name="x")
    y = ops.reshape(x, (2, 128))
    code = source(ops.schedule_injective(y, lanes), [x, y], "flatten")
    assert f"(*(f32x{lanes}*)&x[" in code


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (2, 5)], 1),
    ([(1, 4), (3, 4), (2, 4)], 0),
    ([(2, 3, 16), (2, 1, 16), (2, 7, 16)], -2),
    ([(3, 1, 5), (3, 1, 2)], 2),
])
def test_concat(shapes, axis, cpu_target):
    xs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    data = [rand(*s) for s in shapes]
    got = run(ops.concat(xs, axis), xs, data, ops.schedule_injective, cpu_target)
    np.testing.assert_array_equal(got, np.concatenate(data, axis))


def test_concat_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="does not match"):
        ops.concat([te.placeholder((2, 3)), te.placeholder((3, 3))], axis=1)


@pytest.mark.parametrize("shape, starts, ends, axes, steps", [
    ((10,), [2], [9], None, [3]),
    ((7, 9), [1, -4], [6, 100], [0, 1], [2, 1]),
    ((5, 6, 7), [4], [-100], [2], [-2]),
    ((4, 127), [-1, 0], [-5, 127], [0, 1], [-1, 2]),
    ((3, 5), [0], [1], [1], None),
])
def test_strided_slice(shape, starts, ends, axes, steps, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(ops.strided_slice(x, starts, ends, axes, steps), [x], [data], ops.schedule_injective, cpu_target)
    index = [slice(None)] * len(shape)
    for k, a in enumerate(axes if axes is not None else range(len(starts))):
        index[a] = slice(starts[k], ends[k], steps[k] if steps else 1)
    np.testing.assert_array_equal(got, data[tuple(index)])


def test_slice_rejects_empty_and_zero_step():
    with pytest.raises(ValueError, match="empty"):
        ops.strided_slice(te.placeholder((4,)), [3], [1])
    with pytest.raises(ValueError, match="step"):
        ops.strided_slice(te.placeholder((4,)), [0], [4], steps=[0])


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_concat_on_an_outer_axis_picks_whole_vectors(isa):
    lanes = ISAS[isa][2]
    """One condition for all lanes: a C conditional between vector loads, so the load of the
    part not taken (out of its tensor's bounds) is never executed."""
    xs = [te.placeholder((2, 3, 16), name="x0"), te.placeholder((2, 5, 16), name="x1")]
    y = ops.concat(xs, axis=1)
    code = source(ops.schedule_injective(y, lanes), xs + [y], "cat")
    assert f"? (*(f32x{lanes}*)&x0[" in code and "sel_" not in code


@pytest.mark.parametrize("shape, src, dst", [
    ((1, 64, 7, 9), 0, 16),
    ((1, 8, 7, 9, 8), 8, 4),
    ((1, 4, 5, 3, 4), 4, 8),
    ((2, 8, 7, 9, 8), 8, 0),
    ((1, 3, 4, 5, 16), 16, 8),
    ((1, 2, 5, 19, 16), 16, 0),
    ((2, 3, 7, 7, 8), 8, 0),
])
def test_layout_transform_matches_the_graph_conversion(shape, src, dst, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    got = run(conv_nchwc.layout_transform(x, src, dst), [x], [data], conv_nchwc.schedule_layout_transform,
              cpu_target)
    np.testing.assert_array_equal(got, convert(data, src, dst))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_layout_transform_rows_step_by_constants(isa):
    """Blocks of 8 to blocks of 4 channels: the loop along a row indexes both tensors by constant
    strides, the division and modulo that pick the source block are the row's, outside it."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 8, 7, 9, 8), name="x")
    y = conv_nchwc.layout_transform(x, 8, 4)
    code = source(conv_nchwc.schedule_layout_transform(y, lanes), [x, y], "lt")
    assert code.count("#pragma omp parallel for") == 1
    row = re.search(r"for \(int32_t (\w+) = 0; \1 < 9; \+\+\1\) \{\n(.*?)\n\s*\}", code, re.S)
    assert row, code
    var, body = row.groups()
    assert "*(f32x4*)&layout_transform[" in body and f"({var} * 4)" in body and f"({var} * 8)" in body
    divided = re.findall(r"([\w.]+|\([^()]*\))\s*[/%]", body)
    assert divided and not any(var in d for d in divided), body


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_conversion_to_the_plain_layout_walks_the_blocks_channels_inside_the_columns(isa):
    """Blocks of 16 to plain: for each vector of columns the block's 16 channels run innermost,
    reading the same 16-channel pixels from L1, with no division or modulo in their indices
    (channel by channel over whole rows, WaveNet's 4 MB output converted at 21 GB/s)."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 4, 3, 48, 16), name="x")
    y = conv_nchwc.layout_transform(x, 16, 0)
    code = source(conv_nchwc.schedule_layout_transform(y, lanes), [x, y], "lt")
    loops = re.findall(r"for \(int32_t (\w+) = 0; \1 < (\d+);", code)
    assert [extent for _, extent in loops][-2:] == [str(48 // lanes), "16"], loops
    inner = re.sub(r"/\*.*?\*/", "", code[code.index(f"{loops[-1][0]} < 16"):].split("}")[0])
    assert not re.search(r"[/%]", inner), inner


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_conversion_to_the_plain_layout_of_rows_no_vector_fills_runs_the_whole_map_as_one_row(isa):
    """19 columns: the map's 361 pixels are one run in both layouts, so each channel has one
    partial vector at the end of the map, not one per row (0.12 -> 0.067 ms for 1024 channels,
    AVX-512, 2 threads)."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 4, 19, 19, 16), name="x")
    y = conv_nchwc.layout_transform(x, 16, 0)
    code = source(conv_nchwc.schedule_layout_transform(y, lanes), [x, y], "lt")
    assert "< 361" in code and "< 19)" not in code, code


@pytest.mark.parametrize("make, expect, shape, suffix", [
    # a channel shuffle: the two innermost axes keep their order, one 784-float run
    (lambda x: ops.transpose(x, (0, 2, 1, 3, 4)), lambda a: a.transpose(0, 2, 1, 3, 4), (1, 2, 58, 28, 28), 3),
    (lambda x: ops.transpose(x, (0, 2, 1)), lambda a: a.transpose(0, 2, 1), (4, 5, 6), 2),
    # a transpose that moves a unit axis only is one flat copy
    (lambda x: ops.transpose(x, (1, 0, 2, 3)), lambda a: a.transpose(1, 0, 2, 3), (1, 8, 5, 6), 0),
    # a part of the channels: contiguous throughout
    (lambda x: ops.strided_slice(x, [2], [6], axes=[1]), lambda a: a[:, 2:6], (1, 8, 6, 6), 0),
    # every other column: the flat index is twice the output's, still one strided run
    (lambda x: ops.strided_slice(x, [0], [6], axes=[3], steps=[2]), lambda a: a[..., ::2], (1, 8, 6, 6), 0),
    # every other row: the columns alone follow the output
    (lambda x: ops.strided_slice(x, [0], [6], axes=[2], steps=[2]), lambda a: a[:, :, ::2], (1, 8, 6, 6), 3),
    # the padded axes are conditions: only the axes after them fuse
    (lambda x: ops.pad(x, [(0, 0), (1, 1), (0, 0), (0, 0)]), lambda a: np.pad(a, [(0, 0), (1, 1), (0, 0), (0, 0)]),
     (1, 3, 5, 5), 2),
    (lambda x: ops.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)]), lambda a: np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)]),
     (1, 3, 5, 5), 3),
    (lambda x: ops.reshape(ops.transpose(x, (0, 2, 1)), (4, 30)), lambda a: a.transpose(0, 2, 1).reshape(4, 30),
     (4, 5, 6), 1),
])
def test_copy_suffix_fuses_the_axes_every_read_follows(make, expect, shape, suffix, cpu_target):
    x = te.placeholder(shape, name="x")
    y = make(x)
    assert ops.transform.copy_suffix(y) == suffix
    data = rand(*shape)
    np.testing.assert_array_equal(run(y, [x], [data], ops.schedule_injective, cpu_target), expect(data))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_channel_shuffle_copies_whole_vectors(isa):
    """ShuffleNetV2's transpose of 28x28 planes copied 4-float vectors with a division and a
    modulo per vector (0.051 ms, AVX-512, 2 threads); fused planes copy whole vectors (0.0097)."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 2, 58, 28, 28), name="x")
    y = ops.transpose(x, (0, 2, 1, 3, 4))
    code = source(ops.schedule_injective(y, lanes), [x, y], "shuffle")
    assert f"*(f32x{lanes}*)&transpose[" in code and "f32x4" not in code


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_an_interleave_of_pairs_nests_its_loops_inside_a_parallel_one(isa, cpu_target):
    """A transposed convolution's phases interleaved (1x64x2x2x17x17 to 1x64x17x2x17x2): the
    copy's run is a pair of floats. Fused into one flat parallel loop of 36992 pairs, each pair
    divided its index again (0.082 ms in DCGAN, AVX2, 2 threads; UNet's 1x64x2x2x28x28 0.43 ms).
    The parallel loop now covers the 64 channels and the other axes are nested loops (0.016 and
    0.058 ms)."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 64, 2, 2, 17, 17), name="x")
    y = ops.transpose(x, (0, 1, 4, 2, 5, 3))
    code = source(ops.schedule_injective(y, lanes), [x, y], "spread")
    body = code[code.index("#pragma omp parallel for"):]
    assert re.search(r"parallel for\s+for \(int32_t \w+ = 0; \w+ < 64;", body), body
    loops = body.split("return")[0]
    assert loops.count("for (int32_t") == 4 and " / " not in loops and " % " not in loops, body
    data = rand(1, 64, 2, 2, 17, 17)
    got = run(y, [x], [data], ops.schedule_injective, cpu_target)
    np.testing.assert_array_equal(got, np.transpose(data, (0, 1, 4, 2, 5, 3)))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_gather_of_one_vector_a_pixel_nests_its_loops_too(isa, cpu_target):
    """Channels last, one vector's worth of them (1xLx64x28 to 1x64x28xL, each vector gathered
    across strides of the image): one vector a pixel, so a flat loop over every pixel would
    divide its index for each; the parallel loop covers the 64 rows and the columns are a
    nested loop."""
    lanes = ISAS[isa][2]
    x = te.placeholder((1, lanes, 64, 28), name="x")
    y = ops.transpose(x, (0, 2, 3, 1))
    code = source(ops.schedule_injective(y, lanes), [x, y], "last")
    loops = code[code.index("#pragma omp parallel for"):].split("return")[0]
    assert re.search(r"parallel for\s+for \(int32_t \w+ = 0; \w+ < 64;", loops), loops
    assert loops.count("for (int32_t") == 2 and " / " not in loops and " % " not in loops, loops
    data = rand(1, lanes, 64, 28)
    np.testing.assert_array_equal(run(y, [x], [data], ops.schedule_injective, cpu_target), np.transpose(data, (0, 2, 3, 1)))


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_a_transpose_to_channels_first_walks_the_channels_inside_each_vector_of_pixels(isa, cpu_target):
    """ConvNeXt's NHWC -> NCHW (1x56x56x96): each vector gathers a pixel row apart. With the
    channels outermost every pass reread the rows from L2 (0.22 ms, AVX2, 1 thread); the
    parallel loop now runs over the vectors of pixels and the channels inside, so a vector's
    rows stay in L1 (0.074 ms). Attention's K transposed ([..., 128, 64] -> [..., 64, 128])
    likewise; a copy whose vectors read contiguously keeps its loops."""
    lanes = ISAS[isa][2]
    for shape, perm, vectors, inner in (((1, 56, 56, 96), (0, 3, 1, 2), 56 * 56 // lanes, 96),
                                        ((1, 12, 128, 64), (0, 1, 3, 2), 12 * 128 // lanes, 64)):
        x = te.placeholder(shape, name="x")
        y = ops.transpose(x, perm)
        code = source(ops.schedule_injective(y, lanes), [x, y], "t")
        loops = code[code.index("#pragma omp parallel for"):].split("return")[0]
        assert re.search(rf"parallel for\s+for \(int32_t \w+ = 0; \w+ < {vectors};", loops), loops
        assert re.search(rf"for \(int32_t \w+ = 0; \w+ < {inner};", loops), loops
        data = rand(*shape)
        np.testing.assert_array_equal(run(y, [x], [data], ops.schedule_injective, cpu_target), np.transpose(data, perm))
    assert ops.transform.gathered_axis(ops.transpose(te.placeholder((1, 2, 58, 28, 28), name="x"), (0, 2, 1, 3, 4)),
                                       2) is None


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_split_parts_are_parallel_vector_copies(isa):
    """A ShuffleNetV2 unit's split of 1x116x28x28 in two: each part one parallel loop of whole
    vectors. At the root with only its outermost (unit) loop parallel, it ran on one thread in
    scalar code (0.059 ms in the model, AVX-512)."""
    target, _, lanes = ISAS[isa]
    task = multi_output_task(Op.SPLIT, (1, 116, 28, 28), 2, axis=1, split=(58, 58))
    schedule, args = default_kernel(task, target)
    code = source(schedule, args, "split", target)
    assert code.count("#pragma omp parallel for") == 2 and code.count(f"*(f32x{lanes}*)&split") == 2
    if runs_here(target):
        assert_matches_reference(task, schedule, args, target)
