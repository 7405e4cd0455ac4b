"""A MatMul of a 2-D B reads A's leading axes as rows (`autosched.graph.passes.matmul_rows`):
torchvision's ViTs feed their attention's input projection tokens-first, (197, 1, 768) @ (768,
2304), which as imported is 197 products of one row each."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from graph_helpers import built_matches_reference, ops, same_results
from onnx import TensorProto, helper, numpy_helper

from autosched.frontend.onnx import import_model
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import matmul_rows, optimize
from autosched.graph.reference import random_inputs, run_graph
from autosched.task import extract_tasks

RNG = np.random.default_rng(3)


def _tokens_first(tokens=7, width=8, out=12, residual=True, second_reader=False):
    """x (1, T, C) turned tokens-first, projected with a bias, a residual of the product's own
    shape added (one computed after the product), a Relu: the chain a 2-D product must keep as
    its epilogue."""
    b = GraphBuilder()
    x = b.node(Op.TRANSPOSE, [b.input("x", (1, tokens, width))], perm=(1, 0, 2))
    y = b.node(Op.MATMUL, [x, b.constant("w", RNG.standard_normal((width, out)).astype(np.float32))])
    if second_reader:
        b.output(b.node(Op.SIGMOID, [y]))
    y = b.node(Op.ADD, [y, b.constant("bias", RNG.standard_normal((1, 1, out)).astype(np.float32))])
    if residual:
        y = b.node(Op.ADD, [b.node(Op.TANH, [b.input("r", (tokens, 1, out))]), y])  # computed after the product
    b.output(b.node(Op.SOFTMAX, [b.node(Op.RELU, [y])], axis=-1))  # read on, as attention's projections are
    return b.build()


def test_a_batch_of_one_row_products_becomes_one_product_with_its_epilogue():
    graph = _tokens_first()
    rows = matmul_rows(graph)
    (matmul,) = [n for n in rows.nodes if n.op is Op.MATMUL]
    assert [rows.values[name].shape for name in matmul.inputs] == [(7, 8), (8, 12)]
    assert ops(rows)[-2:] == [Op.RESHAPE, Op.SOFTMAX]  # back to (7, 1, 12) after the chain, which ran on rows
    assert all(rows.values[n.outputs[0]].shape == (7, 12) for n in rows.nodes if n.op in (Op.ADD, Op.RELU))
    same_results(graph, rows)
    (task,) = [t for t in extract_tasks(optimize(graph)).tasks if t.op == "MatMul"]
    assert task.shapes[:2] == ((7, 8), (8, 12))
    assert [e.op for e in task.epilogue] == ["Add", "Add", "Relu"]


def test_the_chain_stops_where_the_product_has_another_reader():
    graph = _tokens_first(second_reader=True)
    rows = matmul_rows(graph)
    assert [n.op for n in rows.nodes].count(Op.RESHAPE) == 2  # A in, the product out; the Adds stay 3-D
    assert rows.values[next(n for n in rows.nodes if n.op is Op.SIGMOID).inputs[0]].shape == (7, 1, 12)
    same_results(graph, rows)


def test_a_gelu_reading_its_input_twice_stays_in_the_epilogue():
    """Swin's MLP: (1, 56, 56, 96) @ (96, 384), a bias, then GELU as torch exports it."""
    b = GraphBuilder()
    x = b.node(Op.MATMUL, [b.input("x", (1, 4, 4, 6)), b.constant("w", RNG.standard_normal((6, 10)).astype(np.float32))])
    x = b.node(Op.ADD, [x, b.constant("bias", RNG.standard_normal(10).astype(np.float32))])
    erf = b.node(Op.ERF, [b.node(Op.MUL, [x, b.constant("s", np.float32(0.7071))])])
    half = b.node(Op.MUL, [b.node(Op.MUL, [x, b.node(Op.ADD, [erf, b.constant("one", np.float32(1))])]),
                           b.constant("h", np.float32(0.5))])
    b.output(b.node(Op.SOFTMAX, [half], axis=-1))
    graph = b.build()
    rows = matmul_rows(graph)
    assert [rows.values[n.outputs[0]].shape for n in rows.nodes if n.op is Op.ERF] == [(16, 10)]
    same_results(graph, rows)
    (task,) = [t for t in extract_tasks(optimize(graph)).tasks if t.op == "MatMul"]
    assert task.shapes[0] == (16, 6) and [e.op for e in task.epilogue] == ["Add", "Mul", "Erf", "Add", "Mul", "Mul"]


def test_products_of_batched_b_a_batch_of_one_or_ending_in_a_graph_output_stay():
    b = GraphBuilder()
    b.output(b.node(Op.RELU, [b.node(Op.MATMUL, [b.input("x", (1, 5, 4)), b.input("w", (4, 3))])]))
    b.output(b.node(Op.RELU, [b.node(Op.MATMUL, [b.input("p", (2, 5, 4)), b.input("q", (2, 4, 3))])]))
    b.output(b.node(Op.RELU, [b.node(Op.MATMUL, [b.input("s", (2, 5, 4)), b.input("t", (4, 3))])]))
    graph = b.build()
    assert matmul_rows(graph) is graph


def test_a_batched_activation_b_of_two_axes_is_rewritten_too():
    b = GraphBuilder()
    b.output(b.node(Op.SOFTMAX, [b.node(Op.MATMUL, [b.input("x", (3, 2, 5, 4)), b.input("w", (4, 6))])], axis=-1))
    graph = b.build()
    rows = matmul_rows(graph)
    (matmul,) = [n for n in rows.nodes if n.op is Op.MATMUL]
    assert rows.values[matmul.inputs[0]].shape == (30, 4)
    same_results(graph, rows)


def _mha_projection(tokens=9, width=16) -> onnx.ModelProto:
    """The ONNX of nn.MultiheadAttention's input projection as torch.onnx exports a ViT's."""
    w = numpy_helper.from_array(RNG.standard_normal((width, 3 * width)).astype(np.float32), "w")
    bias = numpy_helper.from_array(RNG.standard_normal(3 * width).astype(np.float32), "bias")
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["t", "w"], ["m"]),
             helper.make_node("Add", ["bias", "m"], ["q"]), helper.make_node("Softmax", ["q"], ["y"])]
    graph = helper.make_graph(nodes, "mha_in_proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, 1, 3 * width])], [w, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("tokens", [9, 197])
def test_the_built_projection_matches_onnxruntime(tokens, tmp_path, cpu_target):
    model = _mha_projection(tokens)
    graph = import_model(model)
    (task,) = [t for t in extract_tasks(optimize(graph)).tasks if t.op == "MatMul"]
    assert task.shapes[0] == (tokens, 16)
    built_matches_reference(graph, tmp_path / "m.so", cpu_target)  # and the numpy reference matches onnxruntime:
    feeds = random_inputs(graph.inputs, 1)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(run_graph(graph, feeds)["y"], want, rtol=1e-5, atol=1e-5)
