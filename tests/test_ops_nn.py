"""Batch norm, pooling, softmax and layer norm against numpy formulas."""
import numpy as np
import pytest
from isa import ISAS
from ops_helpers import rand, run

from autosched import ops, te
from autosched.compile.kernel import source

# --- batch norm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis", [((2, 3, 5, 7), 1), ((4, 16, 8, 8), 1), ((127, 3), 1), ((3,), 0)])
def test_batch_norm(shape, axis, cpu_target):
    c = shape[axis]
    x = te.placeholder(shape, name="x")
    stats = [te.placeholder((c,), name=n) for n in ("gamma", "beta", "mean", "var")]
    data = rand(*shape)
    gamma, beta, mean = rand(c), rand(c), rand(c)
    var = rand(c, low=0.1, high=2.0)
    got = run(ops.batch_norm(x, *stats, epsilon=1e-3, axis=axis), [x] + stats, [data, gamma, beta, mean, var],
              ops.schedule_batch_norm, cpu_target)
    bc = [1] * len(shape)
    bc[axis] = c
    want = (data - mean.reshape(bc)) / np.sqrt(var.reshape(bc) + 1e-3) * gamma.reshape(bc) + beta.reshape(bc)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_batch_norm_rejects_wrong_statistics_shape():
    x = te.placeholder((2, 3, 4, 4))
    good, bad = te.placeholder((3,)), te.placeholder((4,), name="bad")
    with pytest.raises(ValueError, match="bad"):
        ops.batch_norm(x, good, good, good, bad)


# --- pooling -----------------------------------------------------------------------------------------

def _pool_ref(x, kind, kernel, stride, pads, dilation, out_hw, count_include_pad=False):
    """Window by window over the unpadded input; cells outside it are skipped, and for the
    average counted in the divisor only when inside the stated padding and count_include_pad."""
    n, c, h, w = x.shape
    top, left, bottom, right = pads
    out = np.zeros((n, c) + out_hw, np.float64)
    for oy in range(out_hw[0]):
        for ox in range(out_hw[1]):
            ys = [oy * stride[0] - top + k * dilation[0] for k in range(kernel[0])]
            xs = [ox * stride[1] - left + k * dilation[1] for k in range(kernel[1])]
            vy = [y for y in ys if 0 <= y < h]
            vx = [z for z in xs if 0 <= z < w]
            cells = x[:, :, vy][:, :, :, vx]
            if kind == "max":
                out[:, :, oy, ox] = cells.max(axis=(2, 3))
            else:
                if count_include_pad:
                    count = sum(-top <= y < h + bottom for y in ys) * sum(-left <= z < w + right for z in xs)
                else:
                    count = len(vy) * len(vx)
                out[:, :, oy, ox] = cells.sum(axis=(2, 3)) / count
    return out


POOL_CASES = [
    # shape, kernel, stride, padding (top, left, bottom, right), dilation, ceil_mode, output spatial shape
    ((2, 3, 7, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, (4, 4)),
    ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, (4, 4)),
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 1, 1, 1), (1, 1), True, (3, 3)),
    ((2, 3, 8, 9), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True, (4, 5)),
    ((1, 2, 7, 6), (3, 2), (2, 3), (1, 0, 0, 1), (1, 1), True, (4, 2)),
    ((1, 2, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (2, 2), True, (4, 4)),
    ((1, 3, 6, 33), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, (6, 33)),
    ((1, 1, 1, 127), (1, 3), (1, 2), (0, 0, 0, 0), (1, 1), False, (1, 63)),
    ((1, 16, 16, 16), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, (8, 8)),
]


@pytest.mark.parametrize("shape, kernel, stride, pads, dilation, ceil_mode, out_hw", POOL_CASES)
def test_max_pool2d(shape, kernel, stride, pads, dilation, ceil_mode, out_hw, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    y = ops.max_pool2d(x, kernel, stride, pads, dilation, ceil_mode)
    assert y.shape == shape[:2] + out_hw
    got = run(y, [x], [data], ops.schedule_pool2d, cpu_target)
    np.testing.assert_array_equal(got, _pool_ref(data, "max", kernel, stride, pads, dilation, out_hw).astype(np.float32))


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("shape, kernel, stride, pads, dilation, ceil_mode, out_hw",
                         [c for c in POOL_CASES if c[4] == (1, 1)])
def test_avg_pool2d(shape, kernel, stride, pads, dilation, ceil_mode, out_hw, count_include_pad, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    y = ops.avg_pool2d(x, kernel, stride, pads, dilation, ceil_mode, count_include_pad)
    assert y.shape == shape[:2] + out_hw
    got = run(y, [x], [data], ops.schedule_pool2d, cpu_target)
    want = _pool_ref(data, "avg", kernel, stride, pads, dilation, out_hw, count_include_pad)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _blocked(data: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = data.shape
    return np.ascontiguousarray(data.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape, kernel, stride, pads, dilation, ceil_mode, out_hw",
                         [c for c in POOL_CASES if c[4] == (1, 1)])
def test_blocked_pools_read_the_input_in_place(kind, shape, kernel, stride, pads, dilation, ceil_mode, out_hw,
                                               cpu_target):
    """Pools of a channel-blocked input (ResNet-18's MaxPool after conv1) test their windows'
    bounds in place of a padded copy: the copy of a 112x112x64 input was written and read
    again, 0.185 ms of the kernel's 0.185; reading in place it took 0.058 (Xeon, 2 threads,
    in the model). Padded cells, ceil_mode's overhang included, never count."""
    block = cpu_target.capabilities.lanes(4)
    full = (shape[0], block * shape[1], *shape[2:])
    x = te.placeholder((full[0], shape[1], *shape[2:], block), name="x")
    data = rand(*full)
    if kind == "max":
        y = ops.max_pool2d(x, kernel, stride, pads, dilation, ceil_mode)
        want = _pool_ref(data, "max", kernel, stride, pads, dilation, out_hw)
    else:
        y = ops.avg_pool2d(x, kernel, stride, pads, dilation, ceil_mode)
        want = _pool_ref(data, "avg", kernel, stride, pads, dilation, out_hw)
    code = source(ops.schedule_pool2d(y, block), [x, y], "pool")
    assert "pool2d_pad" not in code and f"f32x{block}" in code
    got = run(y, [x], [_blocked(data, block)], ops.schedule_pool2d, cpu_target)
    np.testing.assert_allclose(got, _blocked(want.astype(np.float32), block), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_max_pool_vectorizes_output_columns(isa):
    lanes = ISAS[isa][2]
    x = te.placeholder((1, 4, 18, 34), name="x")
    y = ops.max_pool2d(x, 3, 1, 0)
    assert f"f32x{lanes}" in source(ops.schedule_pool2d(y, lanes), [x, y], "pool")


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 5, 1, 1), (1, 2, 3, 127)])
def test_global_pools(shape, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape)
    avg = run(ops.global_avg_pool2d(x), [x], [data], ops.schedule_reduce, cpu_target)
    mx = run(ops.global_max_pool2d(x), [x], [data], ops.schedule_reduce, cpu_target)
    np.testing.assert_allclose(avg, data.mean(axis=(2, 3), keepdims=True), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(mx, data.max(axis=(2, 3), keepdims=True))


def test_pool_rejects_window_larger_than_input():
    with pytest.raises(ValueError, match="does not fit"):
        ops.max_pool2d(te.placeholder((1, 1, 2, 2)), 3)


# --- softmax -------------------------------------------------------------------------------------------

def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape, axis", [
    ((1,), 0), ((127,), -1), ((3, 7), 1), ((3, 7), 0), ((2, 3, 5, 7), 1), ((2, 3, 5, 7), 2), ((4, 1000), -1),
    ((2, 16, 32), 1),
])
def test_softmax(shape, axis, cpu_target):
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=-10.0, high=10.0)
    got = run(ops.softmax(x, axis), [x], [data], ops.schedule_softmax, cpu_target)
    np.testing.assert_allclose(got, _softmax_ref(data.astype(np.float64), axis), rtol=1e-4, atol=1e-6)


def test_softmax_is_stable_for_large_inputs(cpu_target):
    x = te.placeholder((2, 5), name="x")
    data = np.array([[1000.0, 999.0, 998.0, -1000.0, 0.0], [88.0, 89.0, 90.0, 91.0, 92.0]], np.float32)
    got = run(ops.softmax(x), [x], [data], ops.schedule_softmax, cpu_target)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, _softmax_ref(data.astype(np.float64), -1), rtol=1e-5, atol=1e-7)


def _random_row_configs(n: int, seed: int) -> list[tuple[tuple[int, ...], int]]:
    """(shape, vector lanes) pairs whose last axis has a vector-width divisor: the row form."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lanes = int(rng.choice([4, 8, 16]))
        rows = tuple(int(v) for v in rng.integers(1, 6, size=int(rng.integers(1, 4))))
        out.append((rows + (int(rng.choice([2, 4, 8, 16, 32])) * int(rng.integers(1, 9)),), lanes))
    return out


@pytest.mark.parametrize("shape, lanes", _random_row_configs(20, 12) + [((3, 197), 8), ((2, 13), 8), ((4, 11), 4),
                                                                       ((1, 2, 9), 16), ((5, 17), 16), ((3, 100), 16),
                                                                       ((2, 20), 16)])
def test_softmax_rows_random(shape, lanes, cpu_target):
    """The row form (vector partial reductions) at any vector width the shape allows."""
    x = te.placeholder(shape, name="x")
    data = rand(*shape, low=-30.0, high=30.0)
    y = ops.softmax(x, -1, lanes=lanes)
    got = run(y, [x], [data], ops.schedule_softmax, cpu_target, vector_lanes=lanes)
    np.testing.assert_allclose(got, _softmax_ref(data.astype(np.float64), -1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_softmax_rows_reduce_in_vectors(isa):
    """The row form reduces each row in the ISA's vectors, in one parallel loop."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((12, 128, 128), name="x")
    y = ops.softmax(x, -1, lanes=lanes)
    assert "width" in y.op.attrs
    code = source(ops.schedule_softmax(y, lanes), [x, y], "k", target)
    assert code.count("#pragma omp parallel") == 1
    assert f"max_f32x{lanes}(" in code and f"vexp_f32x{lanes}(" in code


@pytest.mark.parametrize("isa", sorted(ISAS))
@pytest.mark.parametrize("tokens", [197, 1500, 100, 50])
def test_softmax_rows_of_odd_length_stay_vector_code(isa, tokens):
    """197 tokens (a ViT's): the last chunk overlaps the one before it instead of running in scalar
    code, and the exponentials and quotients shift their last vector back: no scalar exp at all.
    Rows a narrower vector divides (Whisper's 1500 frames, 4 lanes) take whole vectors the same
    way: the encoder's softmax over 4x1500x1500 scores went from 5.2 to 3.6 ms."""
    target, _, lanes = ISAS[isa]
    x = te.placeholder((2, tokens, tokens), name="x")
    y = ops.softmax(x, -1, lanes=lanes)
    assert y.op.attrs["width"] == lanes
    code = source(ops.schedule_softmax(y, lanes), [x, y], "k", target)
    assert "expf(" not in code and f"vexp_f32x{lanes}(" in code


def test_softmax_with_masked_entries(cpu_target):
    """-inf scores (attention masks) give exact zeros; a row of one finite value gives one."""
    x = te.placeholder((2, 16), name="x")
    data = np.full((2, 16), -np.inf, np.float32)
    data[0, :8] = np.linspace(-3, 3, 8)
    data[1, 5] = 7.0
    got = run(ops.softmax(x, -1, lanes=8), [x], [data], ops.schedule_softmax, cpu_target, vector_lanes=8)
    assert np.all(got[0, 8:] == 0) and got[1, 5] == 1.0 and np.sum(got[1]) == 1.0
    np.testing.assert_allclose(got[0, :8], _softmax_ref(data[0, :8].astype(np.float64), -1), rtol=1e-5)


# --- layer norm ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis, affine", [
    ((3, 7), -1, True),
    ((2, 5, 127), -1, True),
    ((2, 3, 4, 5), 2, True),
    ((2, 3, 4), 0, False),
    ((4, 768), 1, True),
    ((1, 16), -1, False),
])
def test_layer_norm(shape, axis, affine, cpu_target):
    x = te.placeholder(shape, name="x")
    inner = shape[axis:]
    gamma, beta = te.placeholder(inner, name="gamma"), te.placeholder(inner, name="beta")
    data, g, b = rand(*shape, low=-3.0, high=5.0), rand(*inner), rand(*inner)
    y = ops.layer_norm(x, gamma if affine else None, beta if affine else None, axis, epsilon=1e-5)
    inputs, arrays = ([x, gamma, beta], [data, g, b]) if affine else ([x], [data])
    got = run(y, inputs, arrays, ops.schedule_layer_norm, cpu_target)
    axes = tuple(range(axis % len(shape), len(shape)))
    d = data.astype(np.float64)
    want = (d - d.mean(axis=axes, keepdims=True)) / np.sqrt(d.var(axis=axes, keepdims=True) + 1e-5)
    if affine:
        want = want * g + b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_layer_norm_keeps_precision_with_a_large_mean(cpu_target):
    """Two-pass variance: with values 1024 + k/128 every step of it is exact in float32, while
    E[x²] - E[x]² would lose every digit of the spread (E[x²] ≈ 1e6 has an ulp of 1/16)."""
    x = te.placeholder((2, 64), name="x")
    data = (1024.0 + np.random.default_rng(1).integers(-8, 9, size=(2, 64)) / 128.0).astype(np.float32)
    got = run(ops.layer_norm(x), [x], [data], ops.schedule_layer_norm, cpu_target)
    d = data.astype(np.float64)
    want = (d - d.mean(axis=1, keepdims=True)) / np.sqrt(d.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _random_layer_norm_configs(n: int, seed: int) -> list[tuple[tuple[int, ...], int, int]]:
    """(shape, axis, vector lanes) with the normalized size a multiple of 2."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        inner = tuple(int(v) for v in rng.integers(1, 9, size=int(rng.integers(1, 3))))
        if np.prod(inner) % 2:
            inner = inner[:-1] + (inner[-1] * 2,)
        rows = tuple(int(v) for v in rng.integers(1, 5, size=int(rng.integers(1, 3))))
        out.append((rows + inner, len(rows), int(rng.choice([4, 8, 16]))))
    return out


def _layer_norm_matches_numpy(shape, axis, lanes, cpu_target):
    x = te.placeholder(shape, name="x")
    inner = shape[axis:]
    gamma, beta = te.placeholder(inner, name="gamma"), te.placeholder(inner, name="beta")
    data, g, b = rand(*shape, low=-3.0, high=5.0), rand(*inner), rand(*inner)
    y = ops.layer_norm(x, gamma, beta, axis, epsilon=1e-5, lanes=lanes)
    got = run(y, [x, gamma, beta], [data, g, b], ops.schedule_layer_norm, cpu_target, vector_lanes=lanes)
    axes = tuple(range(axis, len(shape)))
    d = data.astype(np.float64)
    want = (d - d.mean(axis=axes, keepdims=True)) / np.sqrt(d.var(axis=axes, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, axis, lanes", _random_layer_norm_configs(20, 5))
def test_layer_norm_by_lanes_random(shape, axis, lanes, cpu_target):
    """Row sums as vector partial sums, at any vector width, over one or more normalized axes."""
    _layer_norm_matches_numpy(shape, axis, lanes, cpu_target)


@pytest.mark.parametrize("shape, axis, lanes", [((3, 37), 1, 16), ((2, 3199), 1, 8), ((2, 3, 7), 1, 4),
                                                ((5, 17), 1, 16), ((1, 2, 9), 2, 8)])
def test_layer_norm_rows_no_width_divides_sum_in_vectors_and_a_tail(shape, axis, lanes, cpu_target):
    """A normalized size no vector width divides (wav2vec2's instance norms over 3199 samples)
    sums its whole chunks in vectors, then the lanes and the elements past the last chunk."""
    _layer_norm_matches_numpy(shape, axis, lanes, cpu_target)


@pytest.mark.parametrize("isa", sorted(ISAS))
@pytest.mark.parametrize("width", [768, 3199])
def test_layer_norm_sums_in_vectors(isa, width):
    target, _, lanes = ISAS[isa]
    x, g, b = (te.placeholder((128, width), name="x"), te.placeholder((width,), name="g"),
               te.placeholder((width,), name="b"))
    y = ops.layer_norm(x, g, b, -1, lanes=lanes)
    code = source(ops.schedule_layer_norm(y, lanes), [x, g, b, y], "k", target)
    assert code.count(f"float layer_norm_sum_lanes[{lanes}]") == 1 and code.count("#pragma omp parallel") == 1


@pytest.mark.parametrize("op, attrs", [
    ("AveragePool", dict(kernel_shape=[40, 40], strides=[40, 40], ceil_mode=1)),  # HF EfficientNet's pooler
    ("AveragePool", dict(kernel_shape=[12, 9], strides=[1, 1], pads=[3, 1, 3, 1], count_include_pad=1)),
    ("MaxPool", dict(kernel_shape=[9, 9], strides=[9, 9], ceil_mode=1)),
])
def test_a_window_wider_than_the_map_reduces_only_the_taps_inside_it(op, attrs, tmp_path):
    """Taps no window ever reads inside the input add nothing (zeros to a sum, -inf to a max), so
    the reduction covers only the others: EfficientNet's 2560x2560 pooler over a 7x7 map took
    440 ms with every tap bounds-tested; the divisors still count the whole window's cells."""
    import onnx
    from graph_helpers import built_matches_onnxruntime
    from onnx import TensorProto, helper

    from autosched.compute import task_compute
    from autosched.frontend.onnx import load_onnx
    from autosched.ops.nn import POOL_TAG
    from autosched.target import Target
    from autosched.task import extract_tasks

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 7, 7))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    (task,) = extract_tasks(load_onnx(path)).tasks
    _, (out,) = task_compute(task, Target.parse("llvm").cpu_capabilities)
    window = next(t for t in te.post_order([out]) if getattr(t.op, "tag", "") == POOL_TAG)
    (kh, kw), (ry, rx) = attrs["kernel_shape"], window.op.reduce_axes
    assert ry.extent < kh and rx.extent < kw
    built_matches_onnxruntime(path, tmp_path / "wide.so", rtol=1e-5, atol=1e-6)
