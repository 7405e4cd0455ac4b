"""Operator fusion on hand-built graphs."""

import numpy as np

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import fuse
from autosched.opset.record import OpKind

RNG = np.random.default_rng(0)
CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _summary(groups):
    return [(g.anchor.op, [n.op for n in g.epilogue]) for g in groups]


def _conv(b, x, name):
    return b.node(Op.CONV, [x, b.constant(f"{name}.w", _f32(4, 4, 3, 3)), b.constant(f"{name}.b", _f32(4))], name=name, **CONV)


def test_anchor_absorbs_bias_activation_and_residual_add():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = b.node(Op.RELU, [_conv(b, x, "conv1")])
    z = b.node(Op.RELU, [b.node(Op.ADD, [_conv(b, y, "conv2"), x])])
    b.output(b.node(Op.MAX_POOL, [z], kernel_shape=(2, 2), strides=(2, 2), pads=(0,) * 4, dilations=(1, 1), ceil_mode=0))
    groups = fuse(b.build())
    assert _summary(groups) == [(Op.CONV, [Op.RELU]), (Op.CONV, [Op.ADD, Op.RELU]), (Op.MAX_POOL, [])]
    assert groups[1].inputs == (y, "conv2.w", "conv2.b", x)
    assert groups[1].outputs == (z,) and groups[2].kind is OpKind.POOL


def test_value_with_two_readers_ends_the_group():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = b.node(Op.RELU, [_conv(b, x, "conv1")])
    b.output(_conv(b, y, "conv2"), b.node(Op.SIGMOID, [y]))
    groups = fuse(b.build())
    assert _summary(groups) == [(Op.CONV, [Op.RELU]), (Op.CONV, []), (Op.SIGMOID, [])]
    assert groups[0].outputs == (y,)


def _swiglu(rows):
    """Llama's MLP gate, in its exporter's order: silu(x @ gate) * (x @ up)."""
    b = GraphBuilder()
    x = b.input("x", (1, rows, 16))
    gate = b.node(Op.MATMUL, [x, b.constant("gate", _f32(16, 24))])
    silu = b.node(Op.MUL, [gate, b.node(Op.SIGMOID, [gate])])
    b.output(b.node(Op.MUL, [silu, b.node(Op.MATMUL, [x, b.constant("up", _f32(16, 24))])]))
    return b.build()


def test_a_sigmoid_stays_out_of_a_matrix_product_with_rows_to_spare():
    assert _summary(fuse(_swiglu(16))) == [(Op.MATMUL, []), (Op.MATMUL, []), (Op.SIGMOID, [Op.MUL, Op.MUL])]
    # one row (a decode step): the extra kernel would cost more than the epilogue does
    assert _summary(fuse(_swiglu(1))) == [(Op.MATMUL, []), (Op.MATMUL, [Op.SIGMOID, Op.MUL, Op.MUL])]


def test_a_convolution_keeps_its_sigmoid():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = _conv(b, x, "conv")
    b.output(b.node(Op.MUL, [y, b.node(Op.SIGMOID, [y])]))
    assert _summary(fuse(b.build())) == [(Op.CONV, [Op.SIGMOID, Op.MUL])]


def test_erf_gelu_diamond_fuses_into_matmul():
    b = GraphBuilder()
    x = b.input("x", (8, 16))
    h = b.node(Op.ADD, [b.node(Op.MATMUL, [x, b.constant("w", _f32(16, 32))]), b.constant("bias", _f32(32))])
    erf = b.node(Op.ERF, [b.node(Op.DIV, [h, b.constant("sqrt2", np.float32(2**0.5))])])
    shifted = b.node(Op.ADD, [erf, b.constant("one", np.float32(1))])
    out = b.node(Op.MUL, [b.node(Op.MUL, [h, shifted]), b.constant("half", np.float32(0.5))])
    b.output(out)
    groups = fuse(b.build())
    assert _summary(groups) == [(Op.MATMUL, [Op.ADD, Op.DIV, Op.ERF, Op.ADD, Op.MUL, Op.MUL])]
    assert groups[0].outputs == (out,)
    assert groups[0].inputs == (x, "w", "bias", "sqrt2", "one", "half")


def test_intermediate_read_outside_is_not_swallowed():
    b = GraphBuilder()
    x = b.input("x", (8, 16))
    h = b.node(Op.MATMUL, [x, b.constant("w", _f32(16, 16))])
    t = b.node(Op.TANH, [h])
    b.output(b.node(Op.MUL, [h, t]), b.node(Op.SOFTMAX, [t], axis=1))
    groups = fuse(b.build())
    # Fusing the Tanh would leave the MatMul result needed outside the group.
    assert _summary(groups) == [(Op.MATMUL, []), (Op.TANH, []), (Op.MUL, []), (Op.SOFTMAX, [])]


def test_elementwise_chain_between_anchors_is_one_group():
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    s = b.node(Op.SOFTMAX, [x], axis=1)
    chain = b.node(Op.SQRT, [b.node(Op.EXP, [b.node(Op.MUL, [s, b.constant("k", np.float32(3))])])])
    b.output(b.node(Op.MATMUL, [chain, b.constant("w", _f32(8, 4))]))
    groups = fuse(b.build())
    assert _summary(groups) == [(Op.SOFTMAX, []), (Op.MUL, [Op.EXP, Op.SQRT]), (Op.MATMUL, [])]
    assert groups[1].kind is OpKind.ELEMWISE


def test_broadcast_that_grows_the_output_is_not_fused():
    b = GraphBuilder()
    x = b.input("x", (1, 8))
    y = b.node(Op.MATMUL, [x, b.constant("w", _f32(8, 8))])
    b.output(b.node(Op.ADD, [y, b.input("wide", (4, 8))]))
    assert _summary(fuse(b.build())) == [(Op.MATMUL, []), (Op.ADD, [])]


def test_graph_output_in_the_middle_stops_fusion():
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    y = b.node(Op.MATMUL, [x, b.constant("w", _f32(8, 8))])
    r = b.node(Op.RELU, [y])
    b.output(r, b.node(Op.EXP, [r]))
    assert _summary(fuse(b.build())) == [(Op.MATMUL, [Op.RELU]), (Op.EXP, [])]


def test_reductions_and_data_movement_stand_alone():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.node(Op.TRANSPOSE, [x], perm=(0, 2, 1))
    m = b.node(Op.REDUCE_MEAN, [t], axes=(2,), keepdims=1)
    parts = b.node(Op.SPLIT, [m], name="split", outputs=2, axis=1, split=(1, 3))
    b.output(b.node(Op.RELU, [parts]), "split:1")
    groups = fuse(b.build())
    assert [g.kind for g in groups] == [OpKind.INJECTIVE, OpKind.REDUCE, OpKind.INJECTIVE, OpKind.ELEMWISE]
    assert groups[2].outputs == ("split:0", "split:1")


def test_groups_come_in_dependency_order():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    main = _conv(b, x, "main")
    # The shortcut conv is listed after the main conv but the residual add,
    # fused into the main conv's group, needs it first.
    shortcut = _conv(b, x, "shortcut")
    b.output(b.node(Op.ADD, [main, shortcut], name="residual"))
    g = b.build()
    groups = fuse(g)
    position = {out: i for i, group in enumerate(groups) for out in group.outputs}
    for i, group in enumerate(groups):
        assert all(position.get(name, -1) < i for name in group.inputs)
