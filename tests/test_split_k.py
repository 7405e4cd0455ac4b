"""Split-K on GPU targets: which products are split, that the split graph computes the same, and
that a split model built for CUDA matches onnxruntime in the emulation (no GPU here)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched.cli import main
from autosched.frontend.onnx import import_model
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, split_k
from autosched.graph.passes.split_k import parts
from autosched.graph.reference import random_inputs, run_graph
from autosched.target import Target
from autosched.task import extract_tasks
from tests.cuda_markers import needs_nvcc

BLOCKS = Target.parse("cuda").gpu_blocks


@pytest.mark.parametrize("rows, cols, k, expected", [
    (128, 768, 3072, 4),  # BERT-base's FFN down: 24 blocks of 64 × 64, four times as deep as wide
    (128, 3072, 768, 1),  # FFN up: 96 blocks fill the GPU already
    (128, 768, 768, 1),  # QKV and the output projection: not deep
    (64, 64, 2048, 8),  # one block: as many parts as allowed, each 256 deep
    (64, 64, 640, 2),  # parts at least 256 deep and dividing K
    (1, 4096, 16384, 1),  # a row of 64 blocks: fills half the GPU
])
def test_deep_products_too_small_for_the_gpu_are_split(rows, cols, k, expected):
    assert parts(rows, cols, k, BLOCKS) == expected
    assert Target.parse("llvm").gpu_blocks is None  # CPU targets never split


def _model(lead: tuple[int, ...], k: int, n: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])]
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*lead, n])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("lead", [(64,), (1, 64), (2, 1, 32)])
def test_the_split_graph_computes_the_product(lead):
    graph = import_model(_model(lead, 2048, 48), source="deep")
    split = split_k(graph, BLOCKS)
    assert [n.op for n in split.nodes].count(Op.REDUCE_SUM) == 1
    inputs = random_inputs(graph.inputs, seed=1)
    want, got = run_graph(graph, inputs), run_graph(split, inputs)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
    # on the GPU the parts are one batched MatMul reading x through its views, then the sum
    tasks = extract_tasks(optimize(graph, None, BLOCKS)).tasks
    assert [t.op for t in tasks] == ["MatMul", "ReduceSum", "Add"]
    assert tasks[0].shapes[0] == (*lead, 2048) and tasks[0].shapes[1][0] == 8
    assert [t.op for t in extract_tasks(optimize(graph, Target.parse("llvm").layout_lanes)).tasks] == ["MatMul"]


@needs_nvcc
def test_a_split_model_built_for_cuda_matches_onnxruntime(tmp_path, capsys):
    path = tmp_path / "deep.onnx"
    onnx.save(_model((1, 64), 2048, 48), path)
    assert main(["check", str(path), "--target", "cuda -arch=sm_80", "--emulate", "--no-shipped",
                 "--db", str(tmp_path / "t.db")]) == 0
    assert "ok" in capsys.readouterr().out


def test_a_deep_convolution_is_split_into_whole_input_channels():
    assert parts(512, 49, 512 * 9, BLOCKS, 9) == 8  # ResNet-18's last stage: 8 tiles of 64 × 64, K = 4608
    assert parts(256, 196, 256 * 9, BLOCKS, 9) == 4
    assert parts(128, 784, 128 * 9, BLOCKS, 9) == 1  # layer2: K is not twice the 784 pixels
    assert parts(32, 16, 36 * 9, BLOCKS, 9) == 1  # parts of 18 channels would be 162 deep (< 256)
    assert parts(32, 16, 60 * 9, BLOCKS, 9) == 2  # 60 channels split in 2 and not 4 (4 does not divide 60)


def _conv_model(c: int, o: int, hw: int, bias: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal((o, c, 3, 3)).astype(np.float32), "w")]
    if bias:
        init.append(numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"][:2 + bias], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["p"], ["y"])]
    graph = helper.make_graph(nodes, "deep_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, hw, hw])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("bias", [True, False])
def test_the_split_convolution_computes_the_convolution(bias):
    graph = import_model(_conv_model(128, 32, 4, bias), source="deep_conv")
    split = split_k(graph, BLOCKS)
    [conv] = [n for n in split.nodes if n.op is Op.CONV]
    assert conv.attrs["group"] == 4 and split.constants[conv.inputs[1]].shape == (128, 32, 3, 3)
    if bias:  # the bias once, in the first part
        np.testing.assert_array_equal(split.constants[conv.inputs[2]][32:], 0)
    inputs = random_inputs(graph.inputs, seed=1)
    np.testing.assert_allclose(run_graph(split, inputs)["y"], run_graph(graph, inputs)["y"], rtol=1e-4, atol=1e-4)
    tasks = extract_tasks(optimize(graph, None, BLOCKS)).tasks
    assert [t.op for t in tasks] == ["Conv", "ReduceSum", "Relu"]  # the Reshape no kernel: the sum reads the conv's bytes
    assert "ReduceSum" not in [t.op for t in extract_tasks(optimize(graph, Target.parse("llvm").layout_lanes)).tasks]


@needs_nvcc
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_split_convolution_built_for_cuda_matches_onnxruntime(tmp_path, capsys, precision):
    """The parts as one grouped convolution: direct at fp32, an implicit GEMM batched over the
    groups on tensor cores."""
    path = tmp_path / "deep_conv.onnx"
    onnx.save(_conv_model(128, 32, 4, True), path)
    assert main(["check", str(path), "--target", f"cuda -arch=sm_80 -precision={precision}", "--emulate",
                 "--no-shipped", "--db", str(tmp_path / "t.db")]) == 0
    assert "ok" in capsys.readouterr().out
