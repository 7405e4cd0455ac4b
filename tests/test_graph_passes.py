"""Each rewriting pass alone, on small hand-built graphs."""

import json

import numpy as np
import pytest
from graph_helpers import built_matches_reference, ops, random_inputs, run_graph, same_results

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import (
    collapse_views,
    divide_by_constant,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    fold_layer_norm,
    fold_pad,
    lift_1d,
    optimize,
    patch_conv,
    reduce_pow,
    remove_identity,
)

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _bn(b, x, channels, name="bn"):
    params = [
        b.constant(f"{name}.scale", RNG.uniform(0.5, 1.5, channels).astype(np.float32)),
        b.constant(f"{name}.bias", _f32(channels)),
        b.constant(f"{name}.mean", _f32(channels)),
        b.constant(f"{name}.var", RNG.uniform(0.5, 1.5, channels).astype(np.float32)),
    ]
    return b.node(Op.BATCH_NORM, [x, *params], name=name, epsilon=1e-5)


CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}


def test_fold_constants_evaluates_constant_subgraphs():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    w = b.node(Op.TRANSPOSE, [b.constant("w", _f32(3, 2))], perm=(1, 0))
    scaled = b.node(Op.MUL, [w, b.constant("two", np.float32(2))])
    b.output(b.node(Op.ADD, [x, scaled], name="out"))
    g = b.build()
    folded = fold_constants(g)
    assert ops(folded) == [Op.ADD]
    assert folded.constants[scaled].shape == (2, 3) and "w" not in folded.constants
    same_results(g, folded)


def test_fold_batchnorm_into_conv_with_and_without_bias():
    for with_bias in (False, True):
        b = GraphBuilder()
        x = b.input("x", (1, 3, 6, 6))
        inputs = [x, b.constant("w", _f32(4, 3, 3, 3))] + ([b.constant("b", _f32(4))] if with_bias else [])
        y = _bn(b, b.node(Op.CONV, inputs, name="conv", **CONV), 4)
        b.output(b.node(Op.RELU, [y]))
        g = b.build()
        folded = fold_batchnorm(g)
        assert ops(folded) == [Op.CONV, Op.RELU]
        assert folded.nodes[0].name == "conv" and len(folded.nodes[0].inputs) == 3
        same_results(g, folded)


def test_fold_batchnorm_into_gemm_respects_trans_b_and_beta():
    for trans_b in (0, 1):
        b = GraphBuilder()
        x = b.input("x", (5, 3))
        w = b.constant("w", _f32(4, 3) if trans_b else _f32(3, 4))
        y = b.node(Op.GEMM, [x, w, b.constant("c", _f32(1, 4))], alpha=1.5, beta=0.5, transA=0, transB=trans_b)
        b.output(_bn(b, y, 4))
        g = b.build()
        folded = fold_batchnorm(g)
        assert ops(folded) == [Op.GEMM]
        same_results(g, folded)


def test_fold_batchnorm_into_matmul_and_its_bias():
    for with_add in (False, True):
        b = GraphBuilder()
        x = b.input("x", (5, 3))
        y = b.node(Op.MATMUL, [x, b.constant("w", _f32(3, 4))])
        if with_add:
            y = b.node(Op.ADD, [b.constant("bias", _f32(4)), y])
        b.output(_bn(b, y, 4))
        g = b.build()
        folded = fold_batchnorm(g)
        assert ops(folded) == [Op.MATMUL, Op.ADD]
        same_results(g, folded)


def test_fold_batchnorm_leaves_shared_or_unfoldable_producers():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    conv = b.node(Op.CONV, [x, b.constant("w", _f32(3, 3, 3, 3))], **CONV)
    y = _bn(b, conv, 3)
    b.output(b.node(Op.ADD, [y, conv]))  # the conv output has a second reader
    b.output(_bn(b, b.node(Op.RELU, [x]), 3, name="bn2"))  # a Relu is not linear
    g = b.build()
    folded = fold_batchnorm(g)
    # neither merges into its producer: both become a per-channel scale and shift instead
    assert ops(folded).count(Op.BATCH_NORM) == 0 and ops(folded).count(Op.CONV) == 1
    assert ops(folded).count(Op.MUL) == 2 and ops(folded).count(Op.ADD) == 3
    assert all(folded.values[n.inputs[1]].shape == (3, 1, 1) for n in folded.nodes if n.op is Op.MUL)
    same_results(g, folded)


def test_unfoldable_batchnorm_of_any_rank_is_a_scale_and_shift():
    """BatchNorm1d on [N, C] and [N, C, L] inputs: constants of shape [C] and [C, 1]."""
    for shape in ((4, 5), (2, 5, 7)):
        b = GraphBuilder()
        b.output(_bn(b, b.node(Op.RELU, [b.input("x", shape)]), 5))
        g = b.build()
        folded = fold_batchnorm(g)
        assert ops(folded) == [Op.RELU, Op.MUL, Op.ADD]
        assert folded.values[folded.nodes[1].inputs[1]].shape == (5,) + (1,) * (len(shape) - 2)
        same_results(g, folded)


def test_remove_identity_bypasses_and_keeps_needed_copies():
    b = GraphBuilder()
    x = b.input("x", (4,))
    y = b.node(Op.RELU, [x], name="relu")
    hidden = b.node(Op.DROPOUT, [b.node(Op.IDENTITY, [y])])
    out = b.node(Op.IDENTITY, [b.node(Op.EXP, [hidden], name="exp")], name="result")
    passthrough = b.node(Op.IDENTITY, [x], name="copy_of_input")
    b.output(out, passthrough)
    g = b.build()
    cleaned = remove_identity(g)
    assert ops(cleaned) == [Op.RELU, Op.EXP, Op.IDENTITY]
    exp = next(n for n in cleaned.nodes if n.op is Op.EXP)
    assert exp.inputs == (y,) and exp.outputs == ("result",)
    assert [v.name for v in cleaned.outputs] == ["result", "copy_of_input"]
    same_results(g, cleaned)


def test_a_cast_to_the_type_it_has_is_removed_and_others_stay():
    b = GraphBuilder()
    x = b.input("x", (4,))
    same = b.node(Op.CAST, [x], name="same", to="float32")
    b.output(b.node(Op.RELU, [same], name="relu"), b.node(Op.CAST, [x], name="to_int", to="int32"))
    g = b.build()
    cleaned = remove_identity(g)
    assert ops(cleaned) == [Op.RELU, Op.CAST] and cleaned.nodes[0].inputs == (x,)
    same_results(g, cleaned)


def test_a_pass_through_of_a_value_an_identity_then_outputs_reads_the_output():
    """y = matmul; z = cast(y, own type) + 1; output = identity(y): the matmul now writes the
    output, and the add reads it there."""
    b = GraphBuilder()
    x = b.input("x", (4,))
    y = b.node(Op.RELU, [x], name="y")
    z = b.node(Op.ADD, [b.node(Op.CAST, [y], name="same", to="float32"), b.constant("one", _f32(4))], name="z")
    b.output(z, b.node(Op.IDENTITY, [y], name="scores"))
    g = b.build()
    cleaned = remove_identity(g)
    assert ops(cleaned) == [Op.RELU, Op.ADD] and cleaned.nodes[1].inputs[0] == "scores"
    same_results(g, cleaned)


def test_dead_code_elimination_drops_unused_nodes_and_constants():
    b = GraphBuilder()
    x = b.input("x", (4,))
    b.node(Op.ADD, [x, b.constant("unused", _f32(4))], name="dead")
    b.output(b.node(Op.RELU, [x]))
    g = b.build()
    cleaned = eliminate_dead_code(g)
    assert ops(cleaned) == [Op.RELU] and not cleaned.constants and "dead" not in cleaned.values
    assert [v.name for v in cleaned.inputs] == ["x"]


def test_cse_merges_equal_constants_and_nodes():
    b = GraphBuilder()
    x = b.input("x", (4,))
    six_a, six_b = b.constant("six_a", np.float32(6)), b.constant("six_b", np.float32(6))
    first = b.node(Op.CLIP, [b.node(Op.ADD, [x, six_a], name="add_a")], min=0.0, max=6.0)
    second = b.node(Op.CLIP, [b.node(Op.ADD, [x, six_b], name="add_b")], min=0.0, max=6.0)
    other = b.node(Op.CLIP, [x], min=0.0, max=1.0)
    b.output(b.node(Op.MUL, [first, second]), other)
    g = b.build()
    merged = eliminate_common_subexpressions(g)
    assert ops(merged) == [Op.ADD, Op.CLIP, Op.CLIP, Op.MUL]
    assert list(merged.constants) == ["six_a"]
    mul = merged.nodes[-1]
    assert mul.inputs[0] == mul.inputs[1]
    same_results(g, merged)


def test_cse_merges_constants_by_their_bytes():
    """Equal bytes merge, whatever the name; a difference in a middle element, in the sign of a
    zero (1/x tells them apart), or in shape or dtype keeps them apart."""
    b = GraphBuilder()
    x = b.input("x", (6,))
    base = np.arange(6, dtype=np.float32)
    middle, zero = base.copy(), base.copy()
    middle[3] = 9
    zero[0] = -0.0
    arrays = {"a": base, "a_again": base.copy(), "middle": middle, "zero": zero,
              "wide": base.astype(np.float64), "rows": base.reshape(2, 3)}
    consts = {name: b.constant(name, array) for name, array in arrays.items()}
    outs = [b.node(Op.ADD, [x, consts[name]], name=f"add_{name}") for name in ("a", "a_again", "middle", "zero")]
    outs += [b.node(Op.CAST, [consts["wide"]], to="float32"), b.node(Op.RESHAPE, [consts["rows"]], shape=(6,))]
    b.output(b.node(Op.CONCAT, outs, axis=0))
    merged = eliminate_common_subexpressions(b.build())
    assert sorted(merged.constants) == ["a", "middle", "rows", "wide", "zero"]


def test_cse_keeps_duplicates_that_are_graph_outputs():
    b = GraphBuilder()
    x = b.input("x", (4,))
    b.output(b.node(Op.RELU, [x], name="a"), b.node(Op.RELU, [x], name="b"))
    g = b.build()
    assert len(eliminate_common_subexpressions(g).nodes) == 2


def test_optimize_runs_all_passes_and_keeps_results():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    w = b.node(Op.MUL, [b.constant("w", _f32(4, 3, 3, 3)), b.constant("s", np.float32(0.5))])
    y = _bn(b, b.node(Op.IDENTITY, [b.node(Op.CONV, [x, w], **CONV)]), 4)
    b.output(b.node(Op.RELU, [y]))
    g = b.build()
    optimized = optimize(g)
    assert ops(optimized) == [Op.CONV, Op.RELU]
    same_results(g, optimized)


def test_reduce_pow_rewrites_small_constant_exponents_only():
    b = GraphBuilder()
    x = b.input("x", (2, 5))
    square = b.node(Op.POW, [x, b.constant("two", np.float32(2.0))], name="square")
    cube = b.node(Op.POW, [x, b.constant("three", np.array([3.0], np.float32))], name="cube")
    root = b.node(Op.POW, [b.node(Op.MUL, [x, x]), b.constant("half", np.float32(0.5))], name="root")
    other = b.node(Op.POW, [x, b.constant("odd", np.float32(1.7))], name="other")
    per_column = b.node(Op.POW, [x, b.constant("exponents", np.full(5, 2.0, np.float32))], name="per_column")
    b.output(square, cube, root, other, per_column)
    g = b.build()
    reduced = reduce_pow(g)
    assert ops(reduced) == [Op.MUL, Op.MUL, Op.MUL, Op.MUL, Op.SQRT, Op.POW, Op.POW]
    same_results(g, reduced)


def test_divisions_by_constants_become_multiplications_by_their_reciprocals():
    """The erf GELU's x / sqrt(2), a per-channel divisor shared by two divisions (one reciprocal),
    a power of two (exact); a divisor with a zero, one whose reciprocal would be subnormal, a
    computed divisor and an integer division stay divisions. The products are within 1.5 ulp of
    the quotients."""
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    i = b.input("i", (2, 3, 4), dtype="int32")
    sqrt2 = b.constant("sqrt2", np.float32(np.sqrt(2.0)))
    per_channel = b.constant("per_channel", (1 + RNG.random((3, 1))).astype(np.float32))
    outs = [b.node(Op.DIV, [x, sqrt2], name="gelu_scale"),
            b.node(Op.DIV, [x, per_channel], name="first"),
            b.node(Op.DIV, [b.node(Op.RELU, [x]), per_channel], name="second"),
            b.node(Op.DIV, [x, b.constant("c8", np.float32(8.0))], name="exact"),
            b.node(Op.DIV, [x, b.constant("has_zero", np.array([1.0, 0.0, 2.0, 3.0], np.float32))], name="zero"),
            b.node(Op.DIV, [x, b.constant("too_big", np.float32(1e38))], name="huge"),
            b.node(Op.DIV, [x, b.node(Op.EXP, [x])], name="computed"),
            b.node(Op.DIV, [i, b.constant("c3", np.int32(3))], name="integer")]
    b.output(*outs)
    g = b.build()
    rewritten = divide_by_constant(g)
    kinds = {n.name: n.op for n in rewritten.nodes}
    assert [kinds[n] for n in ("gelu_scale", "first", "second", "exact")] == [Op.MUL] * 4
    assert [kinds[n] for n in ("zero", "huge", "computed", "integer")] == [Op.DIV] * 4
    made = sorted(set(rewritten.constants) - set(g.constants))
    assert made == ["c8_reciprocal", "per_channel_reciprocal", "sqrt2_reciprocal"]  # per_channel's once
    inputs = random_inputs(g.inputs, 0)
    want, got = run_graph(g, inputs), run_graph(rewritten, inputs)
    for name in want:
        if want[name].dtype == np.float32:
            ulps = np.abs(got[name] - want[name]) / np.spacing(np.abs(want[name]).astype(np.float32))
            assert np.nanmax(ulps) <= 1.5, name
        else:
            np.testing.assert_array_equal(got[name], want[name])
    assert np.array_equal(got[rewritten.outputs[3].name], want[g.outputs[3].name])
    assert divide_by_constant(rewritten) is rewritten


def _layer_norm_written_out(b, x, axes=(1,), scale=None, bias=None, eps=1e-6):
    mean = b.node(Op.REDUCE_MEAN, [x], axes=axes, keepdims=1)
    centred = b.node(Op.SUB, [x, mean])
    var = b.node(Op.REDUCE_MEAN, [b.node(Op.POW, [centred, b.constant(f"two{len(b.constants)}", np.float32(2.0))])],
                 axes=axes, keepdims=1)
    y = b.node(Op.DIV, [centred, b.node(Op.SQRT, [b.node(Op.ADD, [var, b.constant(f"eps{len(b.constants)}", np.float32(eps))])])])
    if scale is not None:
        y = b.node(Op.MUL, [y, b.constant(f"scale{len(b.constants)}", scale)])
    if bias is not None:
        y = b.node(Op.ADD, [b.constant(f"bias{len(b.constants)}", bias), y])
    return y


def test_fold_layer_norm_merges_the_written_out_form():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 8))
    y = _layer_norm_written_out(b, x, axes=(2,), scale=_f32(8), bias=_f32(8), eps=1e-5)
    z = _layer_norm_written_out(b, b.node(Op.RELU, [y]), axes=(1, 2))  # two axes, no γ or β
    b.output(z)
    g = b.build()
    folded = fold_layer_norm(reduce_pow(g))
    assert ops(folded) == [Op.LAYER_NORM, Op.RELU, Op.LAYER_NORM]
    first, _, second = folded.nodes
    assert first.attrs == {"axis": 2, "epsilon": float(np.float32(1e-5))} and len(first.inputs) == 3
    assert second.attrs["axis"] == 1 and len(second.inputs) == 2
    np.testing.assert_array_equal(folded.constants[second.inputs[1]], np.ones((3, 8), np.float32))
    same_results(g, folded)


def test_fold_layer_norm_leaves_what_is_not_a_layer_norm():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    leading = _layer_norm_written_out(b, x, axes=(0,))  # statistics over a leading axis
    per_row = _layer_norm_written_out(b, x, scale=_f32(4, 1))  # a per-row "γ" stays a Mul
    mean = b.node(Op.REDUCE_MEAN, [x], axes=(1,), keepdims=1)
    centred = b.node(Op.SUB, [x, mean])
    var = b.node(Op.REDUCE_MEAN, [b.node(Op.MUL, [centred, centred])], axes=(1,), keepdims=1)
    shared = b.node(Op.DIV, [centred, b.node(Op.SQRT, [b.node(Op.ADD, [var, b.constant("e", np.float32(1e-5))])])])
    b.output(leading, per_row, shared, centred)  # the centred values are read outside the pattern
    g = b.build()
    folded = fold_layer_norm(reduce_pow(g))
    assert ops(folded).count(Op.LAYER_NORM) == 1 and Op.MUL in ops(folded)
    assert ops(folded).count(Op.REDUCE_MEAN) == 4
    same_results(g, folded)


def _conv(b, x, cin, cout, kernel, stride, pads=(0, 0, 0, 0), group=1, bias=True):
    inputs = [x, b.constant(f"w{len(b.constants)}", _f32(cout, cin // group, kernel, kernel))]
    if bias:
        inputs.append(b.constant(f"b{len(b.constants)}", _f32(cout)))
    return b.node(Op.CONV, inputs, strides=(stride, stride), pads=pads, dilations=(1, 1), group=group)


def test_patch_conv_turns_a_tiling_convolution_into_a_matmul():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 16, 12))
    b.output(_conv(b, x, 3, 8, 4, 4), _conv(b, x, 3, 8, 2, 2, bias=False))
    g = b.build()
    rewritten = patch_conv(g)
    view_in, view_out = [Op.RESHAPE, Op.TRANSPOSE, Op.RESHAPE], [Op.RESHAPE, Op.TRANSPOSE]
    assert ops(rewritten) == [*view_in, Op.MATMUL, Op.ADD, *view_out, *view_in, Op.MATMUL, *view_out]
    matmul = rewritten.nodes[3]
    assert rewritten.values[matmul.outputs[0]].shape == (2 * 4 * 3, 8)
    same_results(g, rewritten)


def test_patch_conv_leaves_overlapping_padded_grouped_and_pointwise_convolutions():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 16, 16))
    b.output(_conv(b, x, 4, 8, 4, 2), _conv(b, x, 4, 8, 4, 4, pads=(1, 1, 1, 1)), _conv(b, x, 4, 8, 4, 4, group=2),
             _conv(b, x, 4, 8, 1, 1), _conv(b, x, 4, 8, 3, 3))  # the last: 3 does not divide 16
    g = b.build()
    assert patch_conv(g) is g


def test_collapse_views_replaces_an_order_keeping_chain_by_one_reshape():
    b = GraphBuilder()
    x = b.input("x", (6, 4))
    y = b.node(Op.RESHAPE, [b.node(Op.RELU, [x])], shape=(1, 2, 3, 4))
    y = b.node(Op.TRANSPOSE, [y], perm=(0, 3, 1, 2))
    y = b.node(Op.RESHAPE, [y], shape=(1, 4, 6))
    y = b.node(Op.TRANSPOSE, [y], perm=(0, 2, 1))  # back to the flat order: a Reshape
    moved = b.node(Op.TRANSPOSE, [b.node(Op.RESHAPE, [x], shape=(2, 12))], perm=(1, 0))  # really moves elements
    b.output(b.node(Op.RELU, [y]), moved)
    g = b.build()
    collapsed = collapse_views(g)
    assert ops(collapsed) == [Op.RELU, Op.RESHAPE, Op.RESHAPE, Op.TRANSPOSE, Op.RELU]
    assert collapsed.nodes[1].attrs["shape"] == (1, 6, 4)
    same_results(g, collapsed)


def test_collapse_views_keeps_a_chain_whose_middle_is_read_elsewhere():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    middle = b.node(Op.TRANSPOSE, [x], perm=(1, 0))
    b.output(b.node(Op.TRANSPOSE, [middle], perm=(1, 0)), middle)
    g = b.build()
    assert collapse_views(g) is g


def test_1d_convolutions_and_pools_run_as_2d_ones_of_height_1():
    """A strided, dilated, padded 1-D Conv (BN folded into it first, its Relu moved inside), a
    depthwise one and a MaxPool and AveragePool over [N, C, L]: 2-D ops of height 1 between
    Reshapes, the same results; one that reads another's result reads its 2-D value."""
    b = GraphBuilder()
    x = b.input("x", (2, 8, 37))
    conv1 = dict(strides=(2,), pads=(3, 2), dilations=(2,), group=1)
    y = b.node(Op.RELU, [_bn(b, b.node(Op.CONV, [x, b.constant("w", _f32(16, 8, 4))], **conv1), 16)])
    y = b.node(Op.CONV, [y, b.constant("dw", _f32(16, 1, 3)), b.constant("db", _f32(16))],
               strides=(1,), pads=(1, 1), dilations=(1,), group=16)
    pool = dict(kernel_shape=(3,), strides=(2,), pads=(1, 1), dilations=(1,), ceil_mode=1)
    m = b.node(Op.MAX_POOL, [y], **pool)
    a = b.node(Op.AVERAGE_POOL, [y], count_include_pad=0, **pool)
    b.output(b.node(Op.ADD, [m, a]))
    g = b.build()
    lifted = lift_1d(fold_batchnorm(g))
    assert all(len(lifted.values[n.inputs[0]].shape) == 4 for n in lifted.nodes
               if n.op in (Op.CONV, Op.MAX_POOL, Op.AVERAGE_POOL))
    relu = next(n for n in lifted.nodes if n.op is Op.RELU)
    assert len(lifted.values[relu.inputs[0]].shape) == 4  # the activation moved inside
    same_results(g, lifted)
    # between the two convolutions, between the second and the pools, and from the pools to
    # their sum, each reads the other's 2-D result: the Reshapes left are the input's and the
    # sum's back to 1-D
    assert ops(eliminate_dead_code(lifted)).count(Op.RESHAPE) == 2


def test_a_built_1d_network_matches_the_reference(tmp_path):
    """Three 1-D convolutions with ReLUs and a pool, compiled: the tensors between them in
    channel blocks, no conversion or copy between the convolutions."""
    b = GraphBuilder()
    y = b.input("x", (1, 16, 50))
    for i, (cout, k) in enumerate(((32, 9), (32, 5), (48, 3))):
        conv = dict(strides=(1,), pads=(k // 2, k // 2), dilations=(1,), group=1)
        w = b.constant(f"w{i}", 0.2 * _f32(cout, b.values[y].shape[1], k))
        y = b.node(Op.RELU, [b.node(Op.CONV, [y, w, b.constant(f"b{i}", _f32(cout))], **conv)])
    b.output(b.node(Op.MAX_POOL, [y], kernel_shape=(2,), strides=(2,), pads=(0, 0), dilations=(1,), ceil_mode=0))
    manifest = built_matches_reference(b.build(), tmp_path / "conv1d.so", "llvm")
    ops_built = [t["key"].split('"op":"')[1].split('"')[0] for t in manifest["tasks"]]
    assert ops_built.count("ConvNCHWc") == 3 and "Conv" not in ops_built and ops_built.count("LayoutTransform") <= 2


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_reductions_over_the_length_of_a_lifted_convolution_keep_its_channel_blocks(tmp_path, target):
    """PointNet's max over points, a mean and a sum over the length (with and without keepdims)
    reduce the convolution's 2-D value in channel blocks: the only conversions left are of the
    [1, C, 1, 1] results, not of the [1, C, 1, L] map (a 4 MB transform, 0.35 ms of PointNet's
    1.75). A sum over channels stays on the 1-D value."""
    def net(channel_sum):
        b = GraphBuilder()
        conv = dict(strides=(1,), pads=(0, 0), dilations=(1,), group=1)
        x, w = b.input("x", (1, 16, 200)), b.constant("w", 0.2 * _f32(64, 16, 1))
        y = b.node(Op.RELU, [b.node(Op.CONV, [x, w], **conv)])
        outs = [b.node(Op.REDUCE_MAX, [y], axes=(2,), keepdims=0), b.node(Op.REDUCE_MEAN, [y], axes=(2,), keepdims=1),
                b.node(Op.REDUCE_SUM, [y], axes=(2,), keepdims=0)]
        b.output(*outs, *([b.node(Op.REDUCE_SUM, [y], axes=(1,), keepdims=1)] if channel_sum else []))
        return b.build()

    graph = net(channel_sum=True)
    lifted = lift_1d(graph)
    same_results(graph, lifted)
    reduced = [n for n in lifted.nodes if n.op in (Op.REDUCE_MAX, Op.REDUCE_MEAN, Op.REDUCE_SUM)]
    assert [len(lifted.values[n.inputs[0]].shape) for n in reduced] == [4, 4, 4, 3]
    manifest = built_matches_reference(net(channel_sum=False), tmp_path / "pointnet.so", target)
    keys = [json.loads(t["key"]) for t in manifest["tasks"]]
    converted = [k["in"][0][0] for k in keys if k["op"] == "LayoutTransform"]
    assert all(shape[2:4] == [1, 1] for shape in converted if len(shape) == 5), converted


def test_zero_pads_of_spatial_axes_that_only_convolutions_read_fold_into_their_padding():
    """A causal pad before a 1-D convolution and an uneven one before a 2-D convolution (on top
    of its own) go; a pad with a nonzero fill, one of the channels, one that crops, and one a
    ReLU also reads stay."""
    b = GraphBuilder()
    seq = b.input("seq", (1, 4, 30))
    conv1 = dict(strides=(1,), dilations=(2,), group=1)
    causal = b.node(Op.PAD, [seq], pads=(0, 0, 4, 0, 0, 0), mode="constant", value=0.0)
    y1 = b.node(Op.CONV, [causal, b.constant("w1", _f32(6, 4, 3))], pads=(0, 0), **conv1)
    img = b.input("img", (1, 4, 9, 9))
    conv2 = dict(strides=(2, 2), dilations=(1, 1), group=1)
    w2 = b.constant("w2", _f32(5, 4, 3, 3))
    uneven = b.node(Op.PAD, [img], pads=(0, 0, 0, 1, 0, 0, 1, 0), mode="constant", value=0.0)
    y2 = b.node(Op.CONV, [uneven, w2], pads=(1, 1, 1, 1), **conv2)
    kept = [b.node(Op.PAD, [img], pads=(0, 0, 1, 1, 0, 0, 1, 1), mode="constant", value=1.0),
            b.node(Op.PAD, [img], pads=(0, 1, 0, 0, 0, 1, 0, 0), mode="constant", value=0.0),
            b.node(Op.PAD, [img], pads=(0, 0, -1, 0, 0, 0, 0, 0), mode="constant", value=0.0)]
    shared = b.node(Op.PAD, [img], pads=(0, 0, 1, 1, 0, 0, 1, 1), mode="constant", value=0.0)
    w3 = b.constant("w3", _f32(5, 6, 3, 3))
    outs = [b.node(Op.CONV, [p, w3 if i == 1 else w2], pads=(0, 0, 0, 0), **conv2) for i, p in enumerate(kept)]
    outs += [b.node(Op.CONV, [shared, w2], pads=(0, 0, 0, 0), **conv2), b.node(Op.RELU, [shared])]
    b.output(y1, y2, *outs)
    graph = b.build()
    folded = fold_pad(graph)
    same_results(graph, folded)
    assert ops(folded).count(Op.PAD) == 4
    convs = {n.outputs[0]: n for n in folded.nodes if n.op is Op.CONV}
    assert convs[y1].inputs[0] == seq and convs[y1].attrs["pads"] == (4, 0)
    assert convs[y2].inputs[0] == img and convs[y2].attrs["pads"] == (1, 2, 2, 1)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_a_gated_1d_block_runs_in_channel_blocks_from_end_to_end(tmp_path, target):
    """WaveNet's layer: a causal pad, a dilated 1-D convolution, its output cut in two along
    channels (tanh of one half times the sigmoid of the other), a 1x1 convolution and the
    residual sum: the pad folds into the convolution, the cut, the gate and the sum run on the
    lifted 2-D values in channel blocks (slices of whole blocks), so the build converts only the
    input and the output (WaveNet against onnxruntime: 1.31 -> 0.87)."""
    b = GraphBuilder()
    x = b.input("x", (1, 32, 300))
    h = b.node(Op.CONV, [x, b.constant("w_in", 0.3 * _f32(32, 32, 1))], strides=(1,), pads=(0, 0), dilations=(1,), group=1)
    for i, d in enumerate((1, 2, 4)):
        padded = b.node(Op.PAD, [h], pads=(0, 0, d, 0, 0, 0), mode="constant", value=0.0)
        y = b.node(Op.CONV, [padded, b.constant(f"wf{i}", 0.2 * _f32(64, 32, 2))], strides=(1,), pads=(0, 0),
                   dilations=(d,), group=1)
        a = b.node(Op.SLICE, [y], starts=(0, 0, 0), ends=(1, 32, 300), steps=(1, 1, 1))
        g = b.node(Op.SLICE, [y], starts=(0, 32, 0), ends=(1, 64, 300), steps=(1, 1, 1))
        z = b.node(Op.MUL, [b.node(Op.TANH, [a]), b.node(Op.SIGMOID, [g])])
        o = b.node(Op.CONV, [z, b.constant(f"wo{i}", 0.2 * _f32(32, 32, 1))], strides=(1,), pads=(0, 0),
                   dilations=(1,), group=1)
        h = b.node(Op.ADD, [h, o])
    b.output(h)
    manifest = built_matches_reference(b.build(), tmp_path / "gated.so", target)
    built = [json.loads(t["key"])["op"] for t in manifest["tasks"]]
    assert "Pad" not in built and "Slice" not in built
    assert sum(t["weight"] for t in manifest["tasks"] if json.loads(t["key"])["op"] == "LayoutTransform") <= 2


def test_a_view_chain_that_ends_where_it_began_is_no_node():
    b = GraphBuilder()
    x = b.node(Op.RELU, [b.input("x", (2, 3, 4))])
    back = b.node(Op.RESHAPE, [b.node(Op.RESHAPE, [x], shape=(2, 3, 1, 4))], shape=(2, 3, 4))
    b.output(b.node(Op.EXP, [back]), b.node(Op.RESHAPE, [b.node(Op.RESHAPE, [x], shape=(6, 4))], shape=(2, 3, 4)))
    g = b.build()
    collapsed = collapse_views(g)
    exp = next(n for n in collapsed.nodes if n.op is Op.EXP)
    assert exp.inputs == (x,)
    # a chain ending in a graph output keeps one Reshape: the output is a buffer of its own
    assert ops(collapsed).count(Op.RESHAPE) == 1
    same_results(g, collapsed)
