"""ONNX import: attribute normalization across opsets, constant folding, and bad input."""

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched.errors import FrontendError
from autosched.frontend.onnx import import_model, load_onnx
from autosched.graph.ir import Op
from autosched.graph.reference import random_inputs, run_graph


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _tensor(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _matches_onnxruntime(model, **import_args):
    graph = import_model(model, **import_args)
    inputs = random_inputs(graph.inputs, seed=0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, inputs)
    got = run_graph(graph, inputs)
    for value, expected in zip(graph.outputs, want):
        np.testing.assert_allclose(got[value.name], expected, rtol=1e-5, atol=1e-6)
    return graph


# Normalization --------------------------------------------------------------


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_becomes_explicit_pads(auto_pad):
    w = np.random.default_rng(0).standard_normal((4, 3, 4, 4)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad=auto_pad, strides=[2, 2])
    model = _model([node], [_tensor("x", [1, 3, 9, 9])], [_tensor("y", None)], [_init("w", w)])
    graph = _matches_onnxruntime(model)
    (conv,) = graph.nodes
    expected = {"SAME_UPPER": (1, 1, 2, 2), "SAME_LOWER": (2, 2, 1, 1), "VALID": (0, 0, 0, 0)}[auto_pad]
    assert conv.attrs["pads"] == expected and "auto_pad" not in conv.attrs


def test_clip_bounds_become_attributes():
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["a"], name="both"),
             helper.make_node("Clip", ["a", "", "hi"], ["y"], name="max_only")]
    model = _model(nodes, [_tensor("x", [8])], [_tensor("y", [8])],
                   [_init("lo", np.float32(-0.5)), _init("hi", np.float32(0.5))], opset=13)
    graph = _matches_onnxruntime(model)
    assert [(n.attrs["min"], n.attrs["max"]) for n in graph.nodes] == [(-0.5, 0.5), (None, 0.5)]
    assert all(len(n.inputs) == 1 for n in graph.nodes)


def test_pad_operands_become_attributes():
    node = helper.make_node("Pad", ["x", "pads", "value", "axes"], ["y"], name="pad", mode="constant")
    model = _model([node], [_tensor("x", [2, 3, 4])], [_tensor("y", None)],
                   [_init("pads", np.array([1, 2, 0, 3], np.int64)), _init("value", np.float32(7)),
                    _init("axes", np.array([0, -1], np.int64))], opset=18)
    graph = _matches_onnxruntime(model)
    assert graph.nodes[0].attrs == {"pads": (1, 0, 2, 0, 0, 3), "mode": "constant", "value": 7.0}


def test_reduce_axes_as_attribute_and_as_input_agree():
    before = _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1, 1], keepdims=0)],
                    [_tensor("x", [2, 3, 4])], [_tensor("y", None)], opset=13)
    after = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)],
                   [_tensor("x", [2, 3, 4])], [_tensor("y", None)], [_init("axes", np.array([-1, 1]))], opset=18)
    attrs = [_matches_onnxruntime(m).nodes[0].attrs for m in (before, after)]
    assert attrs[0] == attrs[1] == {"axes": (1, 2), "keepdims": 0}


def test_split_forms_across_opsets():
    v13 = _model([helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1)], [_tensor("x", [2, 5])],
                 [_tensor("a", None), _tensor("b", None)], [_init("sizes", np.array([2, 3]))], opset=13)
    v18 = _model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], [_tensor("x", [2, 5])],
                 [_tensor(n, None) for n in "abc"], opset=18)
    assert _matches_onnxruntime(v13).nodes[0].attrs == {"axis": 1, "split": (2, 3)}
    assert _matches_onnxruntime(v18).nodes[0].attrs == {"axis": 1, "split": (2, 2, 1)}


def test_shape_ops_become_reshape_and_global_pools_reductions():
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Squeeze", ["g", "axes"], ["s"]),
        helper.make_node("Unsqueeze", ["s", "axes0"], ["u"]),
        helper.make_node("Flatten", ["u"], ["y"], axis=-1),
    ]
    model = _model(nodes, [_tensor("x", [2, 3, 4, 4])], [_tensor("y", None)],
                   [_init("axes", np.array([2, 3])), _init("axes0", np.array([0]))])
    graph = _matches_onnxruntime(model)
    assert [n.op for n in graph.nodes] == [Op.REDUCE_MEAN, Op.RESHAPE, Op.RESHAPE, Op.RESHAPE]
    assert graph.outputs[0].shape == (2, 3)


def test_computed_shapes_fold_to_constants():
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero_axis"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("ConstantOfShape", ["target_len"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Constant", [], ["c"], value_floats=[0.5, 0.25]),
    ]
    model = _model(nodes, [_tensor("x", [2, 3, 4])], [_tensor("y", [2, 12]), _tensor("ones", None), _tensor("r", None, TensorProto.INT64), _tensor("c", None)],
                   [_init("zero", np.int64(0)), _init("zero_axis", np.array([0])), _init("minus_one", np.array([-1])),
                    _init("target_len", np.array([3])), _init("start", np.int64(1)), _init("limit", np.int64(7)),
                    _init("delta", np.int64(2))])
    graph = _matches_onnxruntime(model)
    assert [n.op for n in graph.nodes] == [Op.RESHAPE]
    np.testing.assert_array_equal(graph.constants["r"], [1, 3, 5])
    assert "shape" not in graph.values and "target" not in graph.values


def test_dropout_mask_is_a_constant_and_initializer_inputs_are_constants():
    node = helper.make_node("Dropout", ["x", "ratio"], ["y", "mask"])
    model = _model([node], [_tensor("x", [3]), _tensor("ratio", [])], [_tensor("y", [3]), _tensor("mask", [3], TensorProto.BOOL)],
                   [_init("ratio", np.float32(0.3))])
    graph = import_model(model)
    assert [v.name for v in graph.inputs] == ["x"]
    assert graph.constants["mask"].all() and graph.nodes[0].op is Op.DROPOUT


def test_dynamic_dimension_must_be_bound():
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model([relu], [_tensor("x", ["batch", 3])], [_tensor("y", ["batch", 3])])
    with pytest.raises(FrontendError, match=r"dyn.onnx: input 'x' has dynamic dimension 0 \('batch'\)"):
        import_model(model, source="dyn.onnx")
    assert import_model(model, {"x": (5, 3)}).outputs[0].shape == (5, 3)
    with pytest.raises(FrontendError, match="contradicts"):
        import_model(model, {"x": (5, 4)})
    with pytest.raises(FrontendError, match="not model inputs"):
        import_model(model, {"y": (5, 3)})


def test_shape_operand_must_be_constant():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_me")
    model = _model([node], [_tensor("x", [2, 3]), _tensor("shape", [2], TensorProto.INT64)], [_tensor("y", None)])
    with pytest.raises(FrontendError, match=r"m.onnx: node 'reshape_me' \(Reshape\): operand 'shape' must be a constant"):
        import_model(model, source="m.onnx")


def test_declared_shapes_are_checked():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", [2, 3])], [_tensor("y", [3, 2])])
    with pytest.raises(FrontendError, match=r"value 'y' has shape \[2, 3\] but the model declares \[3, 2\]"):
        import_model(model)


def test_older_opsets_are_upgraded():
    """An opset-11 export with the attribute forms opset 13 turned into inputs (Split's split,
    Squeeze's and ReduceSum's axes) imports through onnx's version converter."""
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3]),
             helper.make_node("Squeeze", ["a"], ["s"], axes=[1]),
             helper.make_node("ReduceSum", ["b"], ["r"], axes=[1], keepdims=0),
             helper.make_node("Add", ["s", "r"], ["y"])]
    model = _model(nodes, [_tensor("x", [2, 4, 3])], [_tensor("y", [2, 3])], opset=11)
    graph = _matches_onnxruntime(model, source="old.onnx")
    assert [n.op for n in graph.nodes] == [Op.SPLIT, Op.RESHAPE, Op.REDUCE_SUM, Op.ADD]


def test_op_newer_than_the_models_opset():
    model = _model([helper.make_node("Mish", ["x"], ["y"], name="m")], [_tensor("x", [2])], [_tensor("y", [2])])
    with pytest.raises(FrontendError, match=r"node 'm' \(Mish\): Mish does not exist in opset 17, the model's; "
                                            r"it was added in opset 18"):
        import_model(model)


def test_opset_range():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", [2])], [_tensor("y", [2])], opset=29)
    with pytest.raises(FrontendError, match="opset 29 is newer than the newest supported, 28"):
        import_model(model, source="new.onnx")
    model = _model([helper.make_node("NoSuchOp", ["x"], ["y"])], [_tensor("x", [2])], [_tensor("y", [2])], opset=9)
    with pytest.raises(FrontendError, match="old.onnx: opset 9 model could not be upgraded to opset 13 .*NoSuchOp"):
        import_model(model, source="old.onnx")


# Bad input ------------------------------------------------------------------


F, I64, U8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8
BAD_NODES = [  # op, inputs (name, shape, type; "" an omitted one), outputs, attributes, opset, the error
    ("Attention", [("q", [1, 4, 8], F), ("k", [1, 4, 8], F), ("v", [1, 4, 8], F)], 1, {}, 23,
     "3-D inputs need the q_num_heads and kv_num_heads attributes"),
    ("Attention", [("q", [1, 3, 4, 8], F), ("k", [1, 2, 4, 8], F), ("v", [1, 2, 4, 8], F)], 1, {}, 23,
     "3 query heads are no multiple of 2 key/value heads"),
    ("Attention", [("q", [1, 2, 4, 8], F), ("k", [1, 2, 4, 8], F), ("v", [1, 2, 4, 8], F), "", ("pk", [1, 2, 3, 8], F)],
     1, {}, 23, "past_key and past_value come together"),
    ("Attention", [("q", [1, 2, 4, 8], F), ("k", [1, 2, 4, 8], F), ("v", [1, 2, 4, 8], F), ("mask", [4, 9], F)], 1,
     {}, 23, "attn_mask 'mask' covers 9 keys, more than the 4 there are"),
    ("RotaryEmbedding", [("x", [1, 2, 4, 8], F), ("cos", [1, 4, 3], F), ("sin", [1, 4, 3], F)], 1,
     {"rotary_embedding_dim": 7}, 23, "rotary_embedding_dim 7 must be even and at most the head size 8"),
    ("RotaryEmbedding", [("x", [1, 2, 4, 8], F), ("cos", [1, 4, 3], F), ("sin", [1, 4, 3], F)], 1, {}, 23,
     r"cos/sin 'cos' has shape \[1, 4, 3\], expected \[batch, sequence, 4\]"),
    ("RMSNormalization", [("x", [2, 8], F), ("scale", [8], F)], 1, {"stash_type": 10}, 23, "stash_type 10"),
    ("TopK", [("x", [2, 8], F), ("count", None, I64)], 2, {}, 18, r"k must be one integer from 1 to 8 .* not \[9\]"),
    ("LpPool", [("x", [1, 1, 5, 5], F)], 1, {"kernel_shape": [3, 3], "p": 0}, 18, "p must be positive, not 0"),
    ("BitShift", [("x", [4], U8), ("y", [4], U8)], 1, {"direction": "UP"}, 18,
     "direction must be LEFT or RIGHT, not 'UP'"),
]


@pytest.mark.parametrize("op, inputs, outputs, attrs, opset, message", BAD_NODES,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(BAD_NODES)])
def test_bad_attention_and_lookup_nodes_are_clear_errors(op, inputs, outputs, attrs, opset, message):
    """Each names the node and what is wrong with it."""
    given = [i for i in inputs if i]
    values = [_tensor(n, shape, elem) for n, shape, elem in given if shape is not None]
    inits = [_init(n, np.array([9], np.int64)) for n, shape, _ in given if shape is None]
    node = helper.make_node(op, [i[0] if i else "" for i in inputs], [f"y{j}" for j in range(outputs)], name="bad",
                            **attrs)
    model = helper.make_model(helper.make_graph([node], "g", values, [_tensor("y0", None)], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(FrontendError, match=f"m.onnx: node 'bad' \\({op}\\): {message}"):
        import_model(model, source="m.onnx")


def test_unsupported_ops_are_listed_in_one_error():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="fine"),
        helper.make_node("NonZero", ["a"], ["b"], name="nz_1"),
        helper.make_node("NonZero", ["a"], ["c"], name="nz_2"),
        helper.make_node("Unique", ["a"], ["d"], name="top"),
        helper.make_node("FusedConv", ["a"], ["f"], name="vendor", domain="com.microsoft"),
        *(helper.make_node("RoiAlign", ["a", "a", "a"], [f"g{i}"], name=f"roi_{i}") for i in range(8)),
    ]
    model = _model(nodes, [_tensor("x", [4])], [_tensor("b", None)])
    with pytest.raises(FrontendError) as info:
        import_model(model, source="ops.onnx")
    message = str(info.value)
    assert message.startswith("ops.onnx: unsupported operators:")
    for expected in ("NonZero (2 nodes: 'nz_1', 'nz_2')", "Unique (node 'top')", "com.microsoft.FusedConv (node 'vendor')",
                     "RoiAlign (8 nodes: 'roi_0', 'roi_1', 'roi_2', 'roi_3', 'roi_4' and 3 more)"):
        assert expected in message
    assert "Relu" not in message and "roi_5" not in message


def test_missing_file(tmp_path):
    with pytest.raises(FrontendError, match=r"missing.onnx: cannot read model"):
        load_onnx(tmp_path / "missing.onnx")


def test_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a protobuf \x00\xff")
    with pytest.raises(FrontendError, match=r"notes.onnx: not a readable ONNX model"):
        load_onnx(path)
    path.write_bytes(b"")
    with pytest.raises(FrontendError, match=r"notes.onnx: not an ONNX model"):
        load_onnx(path)


def test_truncated_model(tmp_path):
    full = _model([helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", [64])], [_tensor("y", [64])],
                  [_init("unused", np.zeros(256, np.float32))])
    path = tmp_path / "cut.onnx"
    data = full.SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError, match=r"cut.onnx: not a readable ONNX model, truncated"):
        load_onnx(path)


def test_cycle_names_file_and_nodes(tmp_path):
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add_a"), helper.make_node("Relu", ["a"], ["c"], name="relu_c")]
    path = tmp_path / "cycle.onnx"
    onnx.save(_model(nodes, [_tensor("x", [2])], [_tensor("a", [2])]), path)
    with pytest.raises(FrontendError, match=r"cycle.onnx: cycle through nodes") as info:
        load_onnx(path)
    assert "add_a" in str(info.value) and "relu_c" in str(info.value)


def test_dangling_input_names_file_node_and_value(tmp_path):
    path = tmp_path / "dangling.onnx"
    onnx.save(_model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")], [_tensor("x", [2])], [_tensor("y", [2])]), path)
    with pytest.raises(FrontendError, match=r"dangling.onnx: node 'adder' reads 'nowhere'"):
        load_onnx(path)


def test_initializer_with_wrong_raw_size(tmp_path):
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4], raw_data=np.zeros(15, np.float32).tobytes())
    path = tmp_path / "short.onnx"
    onnx.save(_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [_tensor("x", [2, 4])], [_tensor("y", [2, 4])], [weight]), path)
    with pytest.raises(FrontendError, match=r"short.onnx: initializer 'w' holds 60 bytes of raw data, .* needs 64"):
        load_onnx(path)


def test_operands_are_checked_against_the_schema():
    one_input = _model([helper.make_node("Gemm", ["x"], ["y"], name="g1")], [_tensor("x", [2, 2])], [_tensor("y", None)])
    with pytest.raises(FrontendError, match=r"m.onnx: node 'g1' \(Gemm\): has 1 inputs, expected 2 to 3"):
        import_model(one_input, source="m.onnx")
    empty = _model([helper.make_node("Gemm", ["x", ""], ["y"], name="g2")], [_tensor("x", [2, 2])], [_tensor("y", None)])
    with pytest.raises(FrontendError, match=r"node 'g2' \(Gemm\): required input 'B' is empty"):
        import_model(empty)


def test_float_attributes_read_as_written():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.01)
    graph = import_model(_model([node], [_tensor("x", [3])], [_tensor("y", [3])]))
    assert graph.nodes[0].attrs["alpha"] == 0.01


def test_operator_errors_name_the_node():
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="bad_conv")
    model = _model([node], [_tensor("x", [1, 3, 8, 8])], [_tensor("y", None)], [_init("w", np.zeros((4, 2, 3, 3), np.float32))])
    with pytest.raises(FrontendError, match=r"bad.onnx: node 'bad_conv' \(Conv\): input channels 3 do not match"):
        import_model(model, source="bad.onnx")


@pytest.mark.parametrize("attrs, message", [
    ({"mode": "lanczos"}, "mode 'lanczos' is not one of nearest, linear, cubic"),
    ({"mode": "cubic", "antialias": 1}, "antialias"),
    ({"mode": "nearest", "nearest_mode": "sideways"}, "nearest_mode 'sideways'"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, "tf_crop_and_resize"),
    ({"mode": "linear", "antialias": 1}, "antialias"),
])
def test_unsupported_resize_attributes_are_named(tmp_path, attrs, message):
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="up", **attrs)
    model = _model([node], [_tensor("x", [1, 2, 3, 3])], [_tensor("y", None)],
                   [_init("s", np.array([1, 1, 2, 2], np.float32))], opset=19)
    path = tmp_path / "resize.onnx"
    onnx.save(model, path)
    with pytest.raises(FrontendError, match=re.escape("node 'up' (Resize): ") + ".*" + re.escape(message)):
        load_onnx(path)


@pytest.mark.parametrize("equation, shapes", [
    ("bhid,bhjd->bhij", [(2, 3, 5, 4), (2, 3, 6, 4)]),  # attention scores
    ("bhij,bhjd->bhid", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    ("bij,jk->bik", [(2, 5, 4), (4, 3)]),  # a dense layer
    ("...ij,...jk->...ik", [(2, 3, 5, 4), (2, 3, 4, 2)]),
    ("i,j->ij", [(3,), (4,)]),  # an outer product: nothing contracted
    ("bij,bij->bi", [(2, 3, 4), (2, 3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ijk->i", [(3, 4, 5)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: the subscripts seen once, sorted
])
def test_einsum_imports_as_matmuls(equation, shapes):
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    model = _model([node], [_tensor(n, list(s)) for n, s in zip(names, shapes)], [_tensor("y", None)])
    graph = _matches_onnxruntime(model)
    assert Op.MATMUL in [n.op for n in graph.nodes] or len(shapes) == 1


def test_einsum_with_a_diagonal_is_refused_by_name():
    node = helper.make_node("Einsum", ["x"], ["y"], equation="ii->i", name="trace")
    model = _model([node], [_tensor("x", [3, 3])], [_tensor("y", None)])
    with pytest.raises(FrontendError, match=r"node 'trace' \(Einsum\): term 'ii' repeats a subscript"):
        import_model(model)


def test_recurrent_layers_refuse_what_they_cannot_unroll_by_name():
    w, r = _init("w", np.zeros((1, 8, 3), np.float32)), _init("r", np.zeros((1, 8, 2), np.float32))
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2, activations=["Sigmoid", "Elu", "Tanh"],
                            name="lstm")
    model = _model([node], [_tensor("x", [4, 1, 3])], [_tensor("y", None)], [w, r])
    with pytest.raises(FrontendError, match=r"node 'lstm' \(LSTM\): activations \['Elu'\] are not supported"):
        import_model(model)
    node = helper.make_node("LSTM", ["x", "w", "r", "", "lens"], ["y"], hidden_size=2, name="lstm")
    model = _model([node], [_tensor("x", [4, 1, 3]), _tensor("lens", [1], TensorProto.INT32)], [_tensor("y", None)], [w, r])
    with pytest.raises(FrontendError, match=r"node 'lstm' \(LSTM\): operand 'lens' must be a constant"):
        import_model(model)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters_of_constants_are_their_values(reduction):
    """A scatter whose data, indices and updates are all constants (or computed from constants
    only) imports as its value, with the same last-update-wins and folding rules as the compiled
    scatter: repeated and negative indices, both ScatterND and ScatterElements."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 4)).astype(np.float32)
    nd_at = np.array([[1], [4], [1], [-1], [0], [4]], np.int64)
    nd_new = rng.standard_normal((6, 4)).astype(np.float32)
    el_at = np.array([[0, 3], [2, 2], [1, 0], [3, -1], [0, 0], [1, 1]], np.int64)
    el_new = rng.standard_normal((6, 2)).astype(np.float32)
    shift = numpy_helper.from_array(np.array([0], np.int64), "shift")
    nodes = [helper.make_node("Add", ["nd_at", "shift"], ["nd_at2"]),  # indices computed from constants
             helper.make_node("ScatterND", ["data", "nd_at2", "nd_new"], ["nd"], reduction=reduction),
             helper.make_node("ScatterElements", ["data", "el_at", "el_new"], ["el"], axis=1, reduction=reduction),
             helper.make_node("Add", ["x", "nd"], ["y"]), helper.make_node("Mul", ["x", "el"], ["z"])]
    model = _model(nodes, [_tensor("x", [6, 4])], [_tensor("y", [6, 4]), _tensor("z", [6, 4])],
                   [_init("data", data), _init("nd_at", nd_at), _init("nd_new", nd_new), _init("el_at", el_at),
                    _init("el_new", el_new), shift], opset=18)
    graph = _matches_onnxruntime(model)
    assert {n.op for n in graph.nodes} <= {Op.ADD, Op.MUL, Op.RESHAPE}  # no match of rows against updates


def test_a_scatter_of_constants_beyond_the_compiled_size_is_folded():
    """BEiT builds its relative position index with index_put: a ScatterND of 38,416 updates into
    76,832 rows, whose all-pairs match would be 3e9 comparisons. Its operands are constants, so
    the importer computes it."""
    n, k = 20000, 9000
    rng = np.random.default_rng(4)
    at = rng.permutation(n)[:k].reshape(k, 1).astype(np.int64)
    nodes = [helper.make_node("ScatterND", ["data", "at", "new"], ["s"]), helper.make_node("Add", ["x", "s"], ["y"])]
    model = _model(nodes, [_tensor("x", [n])], [_tensor("y", [n])],
                   [_init("data", np.zeros(n, np.float32)), _init("at", at),
                    _init("new", rng.standard_normal(k).astype(np.float32))])
    _matches_onnxruntime(model)


@pytest.mark.parametrize("scale, bias, steps", [(1.0, 0.0, set()), (1.0, 0.5, {Op.ADD}), (2.0, 0.0, {Op.MUL}),
                                                (2.0, 0.5, {Op.MUL, Op.ADD})])
def test_an_instance_norm_of_unit_scale_and_zero_bias_is_no_more_than_the_norm(scale, bias, steps):
    """torch writes GroupNorm as an instance norm of its groups with scale 1 and bias 0, then the
    layer's own affine: the instance norm's identity steps import as nothing (PoolFormer's 24 group
    norms each ran them as a kernel), a real scale or bias as its step."""
    channels = 4
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    model = _model([node], [_tensor("x", [2, channels, 5, 3])], [_tensor("y", [2, channels, 5, 3])],
                   [_init("s", np.full(channels, scale, np.float32)), _init("b", np.full(channels, bias, np.float32))])
    graph = _matches_onnxruntime(model)
    assert {n.op for n in graph.nodes} - {Op.RESHAPE, Op.LAYER_NORM} == steps


@pytest.mark.parametrize("read", [("y",), ("y", "running_mean", "running_var")])
def test_a_batch_norm_in_training_mode_normalizes_by_the_batch(read):
    """training_mode=1: the batch's own mean and biased variance per channel, then scale and
    bias; the running statistics, where read, moved towards the batch's by 1 - momentum. BiT
    standardizes its convolutions' weights with it (its statistics outputs named, read by
    nothing)."""
    outputs = ("y", "running_mean", "running_var")
    rng = np.random.default_rng(5)
    channels = 3
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs), training_mode=1,
                            momentum=0.8, epsilon=1e-3)
    params = [_init(name, rng.standard_normal(channels).astype(np.float32)) for name in ("s", "b", "m")]
    params.append(_init("v", np.abs(rng.standard_normal(channels)).astype(np.float32)))
    model = _model([node], [_tensor("x", [2, channels, 4, 5])], [_tensor(name, None) for name in read], params,
                   opset=15)
    _matches_onnxruntime(model)
