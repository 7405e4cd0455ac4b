"""The numpy reference evaluator against direct loop implementations of ONNX semantics."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autosched.errors import GraphError
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Node, Op, Value
from autosched.graph.reference import eval_node, random_inputs, run_graph
from autosched.graph.shapes import infer
from autosched.opset.window import pooled_size


def _loop_conv(x, w, b, strides, pads, dilations, group):
    n, c, *spatial = x.shape
    m, cg, *kernel = w.shape
    rank = len(spatial)
    out = [pooled_size(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[rank + i], False) for i in range(rank)]
    y = np.zeros((n, m, *out))
    mg = m // group
    for batch, oc in itertools.product(range(n), range(m)):
        g = oc // mg
        for pos in itertools.product(*(range(o) for o in out)):
            total = 0.0 if b is None else b[oc]
            for ic, k in itertools.product(range(cg), itertools.product(*(range(kk) for kk in kernel))):
                src = [pos[i] * strides[i] + k[i] * dilations[i] - pads[i] for i in range(rank)]
                if all(0 <= s < spatial[i] for i, s in enumerate(src)):
                    total += x[(batch, g * cg + ic, *src)] * w[(oc, ic, *k)]
            y[(batch, oc, *pos)] = total
    return y


def _loop_pool(x, kind, kernel, strides, pads, dilations, ceil_mode, count_include_pad):
    n, c, *spatial = x.shape
    rank = len(spatial)
    out = [pooled_size(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[rank + i], ceil_mode) for i in range(rank)]
    y = np.zeros((n, c, *out))
    for batch, ch in itertools.product(range(n), range(c)):
        for pos in itertools.product(*(range(o) for o in out)):
            vals, counted = [], 0
            for k in itertools.product(*(range(kk) for kk in kernel)):
                src = [pos[i] * strides[i] + k[i] * dilations[i] - pads[i] for i in range(rank)]
                inside = all(0 <= s < spatial[i] for i, s in enumerate(src))
                in_explicit = all(-pads[i] <= s < spatial[i] + pads[rank + i] for i, s in enumerate(src))
                if inside:
                    vals.append(x[(batch, ch, *src)])
                if inside or (count_include_pad and in_explicit):
                    counted += 1
            y[(batch, ch, *pos)] = max(vals) if kind == "max" else sum(vals) / counted
    return y


@settings(max_examples=40, deadline=None)
@given(
    rank=st.integers(1, 2),
    group=st.sampled_from([1, 2]),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    pad_begin=st.integers(0, 2),
    pad_end=st.integers(0, 2),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv_matches_direct_loops(rank, group, kernel, stride, dilation, pad_begin, pad_end, bias, seed):
    rng = np.random.default_rng(seed)
    size = 7
    x = rng.standard_normal((2, 2 * group, *([size] * rank)))
    w = rng.standard_normal((3 * group, 2, *([kernel] * rank)))
    b = rng.standard_normal(3 * group) if bias else None
    attrs = {"strides": (stride,) * rank, "pads": (pad_begin,) * rank + (pad_end,) * rank,
             "dilations": (dilation,) * rank, "group": group}
    node = Node("conv", Op.CONV, ("x", "w", "b") if bias else ("x", "w"), ("y",), attrs)
    got = eval_node(node, [x, w] + ([b] if bias else []))[0]
    want = _loop_conv(x, w, b, attrs["strides"], attrs["pads"], attrs["dilations"], group)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    args = [Value("x", x.shape, "float64"), Value("w", w.shape, "float64")] + ([Value("b", b.shape, "float64")] if bias else [])
    assert infer(node, args)[0].shape == want.shape


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["max", "avg"]),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 2),
    pad=st.integers(0, 1),
    ceil_mode=st.booleans(),
    count_include_pad=st.booleans(),
    size=st.integers(4, 8),
    seed=st.integers(0, 2**16),
)
def test_pooling_matches_direct_loops(kind, kernel, stride, dilation, pad, ceil_mode, count_include_pad, size, seed):
    assume(pad < kernel)  # ONNX (and onnxruntime) require pads smaller than the window
    x = np.random.default_rng(seed).standard_normal((1, 2, size, size + 1))
    attrs = {"kernel_shape": (kernel, kernel), "strides": (stride, stride), "dilations": (dilation, dilation),
             "pads": (pad,) * 4, "ceil_mode": int(ceil_mode)}
    op = Op.MAX_POOL
    if kind == "avg":
        op, attrs = Op.AVERAGE_POOL, {**attrs, "count_include_pad": int(count_include_pad)}
    got = eval_node(Node("pool", op, ("x",), ("y",), attrs), [x])[0]
    want = _loop_pool(x, kind, attrs["kernel_shape"], attrs["strides"], attrs["pads"], attrs["dilations"],
                      ceil_mode, kind == "avg" and count_include_pad)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)  # sums in another order: absolute error near 0


def test_gemm_attributes():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((4, 3)), rng.standard_normal((5, 4)), rng.standard_normal((1, 5))
    attrs = {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1}
    got = eval_node(Node("g", Op.GEMM, ("a", "b", "c"), ("y",), attrs), [a, b, c])[0]
    np.testing.assert_allclose(got, 0.5 * a.T @ b.T + 2.0 * c)


def test_integer_division_truncates_toward_zero():
    a, b = np.array([-7, 7, -7, 7], np.int32), np.array([2, 2, -2, -2], np.int32)
    got = eval_node(Node("d", Op.DIV, ("a", "b"), ("y",)), [a, b])[0]
    assert got.tolist() == [-3, 3, 3, -3] and got.dtype == np.int32


def test_softmax_and_layer_norm():
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    soft = eval_node(Node("s", Op.SOFTMAX, ("x",), ("y",), {"axis": 1}), [x])[0]
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-6)
    scale, bias = np.full(4, 2.0, np.float32), np.ones(4, np.float32)
    norm = eval_node(Node("n", Op.LAYER_NORM, ("x", "s", "b"), ("y",), {"axis": 2, "epsilon": 1e-5}), [x, scale, bias])
    assert len(norm) == 1
    np.testing.assert_allclose(norm[0].mean(axis=2), 1.0, atol=1e-5)
    np.testing.assert_allclose(norm[0].std(axis=2), 2.0, rtol=1e-3)


def test_gelu_matches_erf_formula():
    x = np.linspace(-4, 4, 33)
    got = eval_node(Node("g", Op.GELU, ("x",), ("y",), {"approximate": "none"}), [x])[0]
    want = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)  # sums in another order: absolute error near 0


def test_run_graph_checks_inputs_and_can_return_everything():
    b = GraphBuilder()
    x = b.input("x", (2, 2))
    y = b.node(Op.RELU, [x])
    b.output(b.node(Op.EXP, [y]))
    g = b.build()
    with pytest.raises(GraphError, match="no data for graph input 'x'"):
        run_graph(g, {})
    with pytest.raises(GraphError, match=r"expects float32\[2, 2\], got float64\[2, 2\]"):
        run_graph(g, {"x": np.zeros((2, 2))})
    values = run_graph(g, random_inputs(g.inputs, 0), all_values=True)
    assert set(values) == {"x", y, g.outputs[0].name}


def test_random_inputs_are_seeded_and_typed():
    values = [Value("f", (3,), "float16"), Value("i", (2,), "int64"), Value("b", (4,), "bool")]
    first, second = random_inputs(values, 7), random_inputs(values, 7)
    for value in values:
        assert first[value.name].dtype == np.dtype(value.dtype)
        np.testing.assert_array_equal(first[value.name], second[value.name])
