"""The integer ONNX ops (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
DynamicQuantizeLinear, and onnxruntime's contrib ops QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearAveragePool, QGemm, QLinearConcat, QLinearSigmoid,
QLinearLeakyRelu and QLinearSoftmax) against
onnxruntime's integer kernels: bit for bit where the model is the op alone (QLinearAdd,
QLinearSigmoid and QLinearSoftmax within one step), and within rounding flips of the float ops between them in models that
onnxruntime's own quantizer wrote. Weights lie in [-64, 63] (onnxruntime's `reduce_range`):
on AVX2 cores without VNNI its u8·s8 kernels add pairs in saturating 16-bit lanes, and full-range
weights would make the reference, not autosched, wrong."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched import zoo
from autosched.compile.evaluate import compare, onnxruntime_session, sample_inputs
from autosched.compile.model import build_model
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Op
from autosched.graph.passes import optimize_for
from autosched.graph.passes.divide_by_constant import divide_by_constant
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.templates import get_template

info = helper.make_tensor_value_info
RNG = np.random.default_rng(7)


def _model(tmp_path, name, nodes, inputs, outputs, inits, opset=21):
    path = tmp_path / f"{name}.onnx"
    graph = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    domains = [helper.make_opsetid("", opset)] + [helper.make_opsetid("com.microsoft", 1)] * any(
        n.domain == "com.microsoft" for n in nodes)
    onnx.save(helper.make_model(graph, opset_imports=domains), path)
    return path


def _differences(tmp_path, path, feeds=None, atol=0.0):
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / f"{path.stem}.so").library)
    try:
        return compare(model, onnxruntime_session(path, 2), feeds or sample_inputs(graph, 1), rtol=0, atol=atol)
    finally:
        model.close()


def _integer_outputs(tmp_path, path, feeds):
    """(autosched's, onnxruntime's) first output on `feeds`, as int32: for ops that may differ by a step."""
    model = load_model(build_model(load_onnx(path), tmp_path / f"{path.stem}.so").library)
    try:
        ours = next(iter(model.run(feeds).values())).astype(np.int32)
    finally:
        model.close()
    return ours, onnxruntime_session(path, 2).run(None, feeds)[0].astype(np.int32)


def _weights(*shape):
    return RNG.integers(-64, 64, shape).astype(np.int8)


def _qconv(tmp_path, channels, size, per_channel, out_type, group=1):
    """QLinearConv, 3x3 stride 1, its input of the output's type (as onnxruntime's kernels
    have them): 64 channels on 14x14 is a shape float convolutions take Winograd for."""
    oc = channels
    w_scale = (RNG.random(oc) * 0.01 + 0.002).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    w_zero = np.zeros(oc if per_channel else (), np.int8)
    unsigned = out_type == TensorProto.UINT8
    y_zero, x_zero = (np.array(100, np.uint8), np.array(7, np.uint8)) if unsigned else (np.array(-5, np.int8),
                                                                                        np.array(-9, np.int8))
    inits = {"sx": np.array(0.05, np.float32), "zx": x_zero, "w": _weights(oc, channels // group, 3, 3),
             "sw": w_scale, "zw": w_zero, "sy": np.array(0.6, np.float32), "zy": y_zero,
             "b": RNG.integers(-2000, 2000, oc).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"], pads=[1, 1, 1, 1],
                            group=group)
    return _model(tmp_path, "qconv", [node], [info("x", out_type, [1, channels, size, size])],
                  [info("y", out_type, [1, oc, size, size])], inits)


@pytest.mark.parametrize("channels, size, per_channel, out_type, group", [
    (8, 12, True, TensorProto.UINT8, 1), (64, 14, True, TensorProto.UINT8, 1), (64, 14, False, TensorProto.INT8, 1),
    (32, 14, True, TensorProto.UINT8, 32), (128, 28, True, TensorProto.UINT8, 2)])
def test_qlinear_conv_is_onnxruntimes_bit_for_bit(tmp_path, channels, size, per_channel, out_type, group):
    """Dense, depthwise (MobileNets quantized) and grouped in groups `split_groups` cuts apart."""
    diffs = _differences(tmp_path, _qconv(tmp_path, channels, size, per_channel, out_type, group))
    assert diffs and all(d.ok for d in diffs), diffs


def test_integer_convolutions_are_never_winograd(tmp_path):
    """Winograd rounds between the products: its sums of integers are not the integer sums, and
    a requantized output one step off. The same float convolution does take it. (A target
    without VNNI: with it the integer convolution is an IntegerConvNCHWc, `test_integer_conv.py`.)"""
    target = Target.parse("llvm -mcpu=skylake-avx512")

    def conv_space(path):
        (task,) = [t for t in extract_tasks(optimize_for(load_onnx(path), target)).tasks if t.op.startswith("Conv")]
        return [k.name for k in get_template(task.op, "llvm").space(task, target).knobs]

    integer = conv_space(_qconv(tmp_path, 64, 14, True, TensorProto.UINT8))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    float_path = _model(tmp_path, "fconv", [node], [info("x", TensorProto.FLOAT, [1, 64, 14, 14])],
                        [info("y", TensorProto.FLOAT, [1, 64, 14, 14])], {"w": _weights(64, 64, 3, 3).astype(np.float32)})
    assert "algorithm" in conv_space(float_path) and "algorithm" not in integer


@pytest.mark.parametrize("b_scale, b_zero", [(np.array(0.004, np.float32), np.array(0, np.int8)),
                                             ((RNG.random(24) * 0.01).astype(np.float32), np.zeros(24, np.int8))])
def test_qlinear_matmul_is_onnxruntimes_bit_for_bit(tmp_path, b_scale, b_zero):
    inits = {"sa": np.array(0.05, np.float32), "za": np.array(7, np.uint8), "b": _weights(32, 24), "sb": b_scale,
             "zb": b_zero, "sy": np.array(0.3, np.float32), "zy": np.array(120, np.uint8)}
    path = _model(tmp_path, "qmm", [helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                                                     ["y"])],
                  [info("a", TensorProto.UINT8, [2, 10, 32])], [info("y", TensorProto.UINT8, [2, 10, 24])], inits)
    diffs = _differences(tmp_path, path)
    assert diffs and all(d.ok for d in diffs), diffs


def test_conv_integer_and_matmul_integer_are_exact(tmp_path):
    inits = {"w": _weights(16, 8, 3, 3), "zx": np.array(7, np.uint8), "b": _weights(32, 24),
             "zb": RNG.integers(-3, 4, 24).astype(np.int8)}
    nodes = [helper.make_node("ConvInteger", ["x", "w", "zx"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMulInteger", ["a", "b", "", "zb"], ["m"])]
    path = _model(tmp_path, "integer", nodes, [info("x", TensorProto.UINT8, [1, 8, 12, 12]),
                                                info("a", TensorProto.UINT8, [10, 32])],
                  [info("c", TensorProto.INT32, [1, 16, 12, 12]), info("m", TensorProto.INT32, [10, 24])], inits)
    diffs = _differences(tmp_path, path)
    assert len(diffs) == 2 and all(d.ok for d in diffs), diffs


def test_dynamic_quantization_is_onnxruntimes_bit_for_bit(tmp_path):
    """The pattern onnxruntime's `quantize_dynamic` writes, with every output of
    DynamicQuantizeLinear a model output; an all-zero input (an empty range: scale 1) too."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "b", "xz", "zb"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "sb"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    outputs = [info("y", TensorProto.FLOAT, [1, 10, 24]), info("xq", TensorProto.UINT8, [1, 10, 32]),
               info("xs", TensorProto.FLOAT, []), info("xz", TensorProto.UINT8, [])]
    path = _model(tmp_path, "dynamic", nodes, [info("x", TensorProto.FLOAT, [1, 10, 32])], outputs,
                  {"b": _weights(32, 24), "zb": np.array(3, np.int8), "sb": np.array(0.004, np.float32)})
    for x in (RNG.standard_normal((1, 10, 32)).astype(np.float32) * 3 + 1, np.zeros((1, 10, 32), np.float32)):
        diffs = _differences(tmp_path, path, {"x": x})
        assert len(diffs) == 4 and all(d.ok for d in diffs), diffs


def test_a_rounded_quotient_keeps_its_division(tmp_path):
    """x / 3 rounded stays a division (its reciprocal's product can land on the other side of a
    half); x / 3 elsewhere becomes a product."""
    three = {"three": np.array(3.0, np.float32)}
    nodes = [helper.make_node("Div", ["x", "three"], ["q"]), helper.make_node("Round", ["q"], ["r"]),
             helper.make_node("Div", ["x2", "three"], ["e"])]
    path = _model(tmp_path, "div", nodes, [info("x", TensorProto.FLOAT, [4]), info("x2", TensorProto.FLOAT, [4])],
                  [info("r", TensorProto.FLOAT, [4]), info("e", TensorProto.FLOAT, [4])], three)
    graph = divide_by_constant(load_onnx(path))
    producers = {n.outputs[0]: n.op for n in graph.nodes}
    assert producers["q"] is Op.DIV and producers["e"] is Op.MUL


def test_models_quantized_by_onnxruntime_match_it(tmp_path):
    """A BERT layer quantized dynamically (MatMulInteger) and a convolutional block statically in
    the QOperator format (QLinearConv), by onnxruntime's quantizer. Between the integer ops run
    float ones (LayerNorm, softmax, residual adds) whose last-place differences flip an
    occasional rounding, so the outputs agree within a small share of their range, not bit for bit
    (what those flips amount to, measured: 0.14% of max |y| on a BERT layer)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    bert = tmp_path / "bert.onnx"
    onnx.save(zoo.bert_layer(seq=16, hidden=128, heads=2), bert)
    quantization.quantize_dynamic(bert, tmp_path / "bert_int8.onnx", weight_type=quantization.QuantType.QInt8)
    block = tmp_path / "block.onnx"
    onnx.save(zoo.resnext_block(size=16), block)
    x = load_onnx(block).inputs[0]

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{x.name: np.random.default_rng(s).standard_normal(x.shape).astype(np.float32)}
                                 for s in range(3)])

        def get_next(self):
            return next(self.batches, None)

    quantization.quantize_static(block, tmp_path / "block_int8.onnx", Calibration(),
                                 quant_format=quantization.QuantFormat.QOperator, op_types_to_quantize=["Conv"],
                                 per_channel=True, reduce_range=True)
    for name, op in (("bert_int8", "MatMulInteger"), ("block_int8", "QLinearConv")):
        path = tmp_path / f"{name}.onnx"
        assert op in {n.op_type for n in onnx.load(path).graph.node}
        graph = load_onnx(path)
        feeds = sample_inputs(graph, 1)
        reference = onnxruntime_session(path, 2).run(None, feeds)[0]
        diffs = _differences(tmp_path, path, feeds, atol=0.01 * float(np.abs(reference).max()))
        assert diffs and all(d.ok for d in diffs), diffs


def _contrib(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, domain="com.microsoft", **attrs)


def _binary_inits():
    return {"sa": np.array(0.031, np.float32), "za": np.array(120, np.uint8), "sb": np.array(0.047, np.float32),
            "zb": np.array(131, np.uint8), "sc": np.array(0.06, np.float32), "zc": np.array(128, np.uint8)}


@pytest.mark.parametrize("b_shape", [[1, 32, 14, 14], [1, 32, 1, 1]], ids=["same", "per-channel"])
def test_qlinear_mul_is_onnxruntimes_bit_for_bit_and_add_within_one_step(tmp_path, b_shape):
    """QLinearMul as onnxruntime's kernel; QLinearAdd, computed as the contrib op's formula
    (and onnxruntime's x86 kernel's steps), differs from onnxruntime by one step at some exact
    halves, 0.5% of random inputs: its kernels round those differently on different ISAs."""
    names = ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"]
    shape = [1, 32, 14, 14]
    feeds = {"a": RNG.integers(0, 256, shape).astype(np.uint8), "b": RNG.integers(0, 256, b_shape).astype(np.uint8)}
    inputs = [info("a", TensorProto.UINT8, shape), info("b", TensorProto.UINT8, b_shape)]
    mul = _model(tmp_path, "qmul", [_contrib("QLinearMul", names, ["c"])], inputs, [info("c", TensorProto.UINT8, shape)],
                 _binary_inits())
    diffs = _differences(tmp_path, mul, feeds)
    assert diffs and all(d.ok for d in diffs), diffs
    add = _model(tmp_path, "qadd", [_contrib("QLinearAdd", names, ["c"])], inputs, [info("c", TensorProto.UINT8, shape)],
                 _binary_inits())
    ours, theirs = _integer_outputs(tmp_path, add, feeds)
    assert np.abs(ours - theirs).max() <= 1 and np.mean(ours != theirs) < 0.01


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool_is_onnxruntimes_bit_for_bit(tmp_path, channels_last):
    shape, out = ([1, 7, 7, 48], [1, 1, 1, 48]) if channels_last else ([1, 48, 7, 7], [1, 48, 1, 1])
    inits = {"sx": np.array(0.031, np.float32), "zx": np.array(3, np.int8), "sy": np.array(0.017, np.float32),
             "zy": np.array(-7, np.int8)}
    path = _model(tmp_path, "qgap", [_contrib("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"],
                                              channels_last=channels_last)],
                  [info("x", TensorProto.INT8, shape)], [info("y", TensorProto.INT8, out)], inits)
    diffs = _differences(tmp_path, path)
    assert diffs and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("quantized", [True, False], ids=["uint8-out", "float-out"])
def test_qgemm_is_onnxruntimes_bit_for_bit(tmp_path, quantized):
    """A classifier as onnxruntime's quantizer writes it (B transposed, per-column scales, an
    int32 C), its output requantized or in float (with alpha)."""
    inits = {"sa": np.array(0.03, np.float32), "za": np.array(120, np.uint8), "w": _weights(40, 64),
             "sw": (RNG.random(40) * 0.01 + 0.002).astype(np.float32), "zw": np.zeros(40, np.int8),
             "c": RNG.integers(-3000, 3000, 40).astype(np.int32)}
    names = ["a", "sa", "za", "w", "sw", "zw", "c"]
    if quantized:
        inits.update({"sy": np.array(0.3, np.float32), "zy": np.array(128, np.uint8)})
        names += ["sy", "zy"]
    node = _contrib("QGemm", names, ["y"], transB=1, **({} if quantized else {"alpha": 0.5}))
    path = _model(tmp_path, "qgemm", [node], [info("a", TensorProto.UINT8, [3, 64])],
                  [info("y", TensorProto.UINT8 if quantized else TensorProto.FLOAT, [3, 40])], inits)
    diffs = _differences(tmp_path, path)
    assert diffs and all(d.ok for d in diffs), diffs


def test_a_cnn_quantized_with_the_defaults_matches_onnxruntime(tmp_path):
    """onnxruntime's `quantize_static` in the QOperator format with its default op types writes
    its contrib ops for the residual add, the global pool and the classifier; the model's
    output agrees with onnxruntime's within one step of its quantization."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    f = TensorProto.FLOAT
    inits = {"w1": (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
             "w2": (RNG.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
             "fc": (RNG.standard_normal((10, 16)) * 0.3).astype(np.float32), "bias": np.zeros(10, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["v"]), helper.make_node("Gemm", ["v", "fc", "bias"], ["y"], transB=1)]
    path = _model(tmp_path, "cnn", nodes, [info("x", f, [1, 8, 16, 16])], [info("y", f, [1, 10])], inits, opset=17)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.default_rng(s).standard_normal((1, 8, 16, 16)).astype(np.float32)}
                                 for s in range(3)])

        def get_next(self):
            return next(self.batches, None)

    quantized = tmp_path / "cnn_int8.onnx"
    quantization.quantize_static(path, quantized, Calibration(), quant_format=quantization.QuantFormat.QOperator,
                                 reduce_range=True)
    model = onnx.load(quantized)
    assert {"QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= {n.op_type for n in model.graph.node
                                                                   if n.domain == "com.microsoft"}
    last = next(n for n in model.graph.node if n.output[0] == "y")
    step = float(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == last.input[1])))
    diffs = _differences(tmp_path, quantized, atol=step * 1.001)
    assert diffs and all(d.ok for d in diffs), diffs


def test_check_says_why_a_quantized_model_differs(tmp_path, capsys):
    """`check` of a QDQ convolution at zero tolerance: the float sums differ from onnxruntime's
    in their last places, and the verdict names quantization's rounding as what to expect."""
    from autosched.cli.app import main
    inits = {"s": np.array(0.05, np.float32), "z": np.array(3, np.uint8), "w": (RNG.standard_normal((8, 4, 3, 3))
                                                                              * 0.3).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Conv", ["d", "w"], ["y"], pads=[1, 1, 1, 1])]
    path = _model(tmp_path, "qdq", nodes, [info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
                  [info("y", TensorProto.FLOAT, [1, 8, 9, 9])], inits)
    assert main(["check", str(path), "--rtol", "0", "--atol", "0"]) == 1
    assert "the model quantizes" in capsys.readouterr().out
    assert main(["check", str(path)]) == 0
    assert "the model quantizes" not in capsys.readouterr().out


def test_qlinear_concat_requantizes_each_operand_as_onnxruntime_does(tmp_path):
    """One operand quantized as the output (copied), one with a scale and zero point of its own."""
    inits = {"sy": np.array(0.05, np.float32), "zy": np.array(128, np.uint8), "s1": np.array(0.05, np.float32),
             "z1": np.array(128, np.uint8), "s2": np.array(0.031, np.float32), "z2": np.array(100, np.uint8)}
    node = _contrib("QLinearConcat", ["sy", "zy", "a", "s1", "z1", "b", "s2", "z2"], ["y"], axis=1)
    path = _model(tmp_path, "qcat", [node], [info("a", TensorProto.UINT8, [1, 16, 7, 7]),
                                             info("b", TensorProto.UINT8, [1, 24, 7, 7])],
                  [info("y", TensorProto.UINT8, [1, 40, 7, 7])], inits)
    diffs = _differences(tmp_path, path)
    assert diffs and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("op, attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_activations_are_within_one_step_of_onnxruntime(tmp_path, op, attrs):
    """Every one of the 256 inputs (onnxruntime tabulates the op for them): LeakyRelu bit for
    bit, the sigmoid (onnxruntime's own approximation) within one step."""
    inits = {"sx": np.array(0.05, np.float32), "zx": np.array(-3, np.int8), "sy": np.array(1 / 256, np.float32),
             "zy": np.array(-128, np.int8)}
    if op == "QLinearLeakyRelu":
        inits.update({"sy": np.array(0.04, np.float32), "zy": np.array(-20, np.int8)})
    path = _model(tmp_path, "qact", [_contrib(op, ["x", "sx", "zx", "sy", "zy"], ["y"], **attrs)],
                  [info("x", TensorProto.INT8, [256])], [info("y", TensorProto.INT8, [256])], inits)
    x = np.arange(-128, 128).astype(np.int8)
    ours, theirs = _integer_outputs(tmp_path, path, {"x": x})
    assert np.abs(ours - theirs).max() <= (1 if op == "QLinearSigmoid" else 0)


@pytest.mark.parametrize("pads, count_include_pad", [([1, 1, 1, 1], 0), ([1, 1, 1, 1], 1), ([0, 0, 0, 0], 0)])
def test_qlinear_average_pool_is_onnxruntimes_bit_for_bit(tmp_path, pads, count_include_pad):
    """Inception's 3x3 stride-1 pool branch (as onnxruntime's quantizer writes it) and a strided one."""
    inits = {"sx": np.array(0.031, np.float32), "zx": np.array(100, np.uint8), "sy": np.array(0.029, np.float32),
             "zy": np.array(90, np.uint8)}
    strides = [1, 1] if pads[0] else [2, 2]
    out = 14 if pads[0] else 6
    node = _contrib("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"], kernel_shape=[3, 3], pads=pads,
                    strides=strides, count_include_pad=count_include_pad)
    path = _model(tmp_path, "qpool", [node], [info("x", TensorProto.UINT8, [1, 16, 14, 14])],
                  [info("y", TensorProto.UINT8, [1, 16, out, out])], inits)
    diffs = _differences(tmp_path, path)
    assert diffs and all(d.ok for d in diffs), diffs


def test_qlinear_softmax_is_within_one_step_of_onnxruntime(tmp_path):
    """Attention's probabilities as onnxruntime's quantizer writes them (scale 1/256, zero point
    0) over the last axis; onnxruntime's table of exponentials rounds some halves apart."""
    inits = {"sx": np.array(0.08, np.float32), "zx": np.array(128, np.uint8), "sy": np.array(1 / 256, np.float32),
             "zy": np.array(0, np.uint8)}
    shape = [2, 4, 16, 16]
    path = _model(tmp_path, "qsoftmax", [_contrib("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], axis=-1,
                                                  opset=13)],
                  [info("x", TensorProto.UINT8, shape)], [info("y", TensorProto.UINT8, shape)], inits)
    x = RNG.integers(0, 256, shape).astype(np.uint8)
    ours, theirs = _integer_outputs(tmp_path, path, {"x": x})
    assert np.abs(ours - theirs).max() <= 1 and np.mean(ours != theirs) < 0.05


def test_quantize_then_dequantize_drops_the_integer_round_trip(tmp_path):
    """QuantizeLinear's integers (rounded, shifted by the zero point, clipped to int8) cast back to
    float for DequantizeLinear: the two Casts go, the values do not change. A Cast pair on values
    not known to be integers (one that truncates fractions, one after a Clip to bounds that are
    not integers) stays. The inputs stay within int8 (a cast beyond it is undefined in C)."""
    inits = {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8), "lo": np.array(-100.5, np.float32),
             "hi": np.array(100.5, np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
             helper.make_node("Cast", ["x"], ["t"], to=TensorProto.INT8),
             helper.make_node("Cast", ["t"], ["truncated"], to=TensorProto.FLOAT),
             helper.make_node("Round", ["x"], ["r"]), helper.make_node("Clip", ["r", "lo", "hi"], ["c"]),
             helper.make_node("Cast", ["c"], ["w"], to=TensorProto.INT8),
             helper.make_node("Cast", ["w"], ["clipped"], to=TensorProto.FLOAT)]
    outputs = [info(n, TensorProto.FLOAT, [64]) for n in ("y", "truncated", "clipped")]
    path = _model(tmp_path, "roundtrip", nodes, [info("x", TensorProto.FLOAT, [64])], outputs, inits)
    graph = optimize_for(load_onnx(path), Target.parse("llvm"))
    casts = [n for n in graph.nodes if n.op is Op.CAST]
    assert len(casts) == 4 and "q" not in {i for n in graph.nodes for i in n.inputs}
    x = np.clip(RNG.standard_normal(64) * 40, -120, 120).astype(np.float32)
    diffs = _differences(tmp_path, path, {"x": x})
    assert len(diffs) == 3 and all(d.ok for d in diffs), diffs


def test_the_check_of_a_rounding_kernel_allows_a_few_one_step_flips():
    """A kernel that rounds (a quantized model's) may differ from the reference by one step where
    its sums, added in another order, land on the other side of a half; a share of such flips
    passes, more do not, and a NaN never does."""
    from autosched.measure.local import ROUNDING_OUTLIERS
    from autosched.measure.worker import compare_outputs

    want = (np.arange(1000) * 0.5).astype(np.float32)
    flipped = want.copy()
    flipped[::250] += 0.5  # 4 of 1000
    assert compare_outputs([flipped], [want], 1e-3, 1e-4, ROUNDING_OUTLIERS) is None
    assert compare_outputs([flipped], [want], 1e-3, 1e-4)["error"] == "WRONG_ANSWER"
    many = want.copy()
    many[::20] += 0.5  # 50 of 1000
    assert compare_outputs([many], [want], 1e-3, 1e-4, ROUNDING_OUTLIERS)["error"] == "WRONG_ANSWER"
    broken = flipped.copy()
    broken[1] = np.nan
    assert compare_outputs([broken], [want], 1e-3, 1e-4, ROUNDING_OUTLIERS)["error"] == "WRONG_ANSWER"


def test_a_qdq_convolution_can_be_tuned(tmp_path):
    """The tasks of a QDQ convolution round in their epilogue; the runner measures their
    Winograd and direct configs, where an exact check rejected the default (a one-step flip in
    some of the 200,704 outputs, on random data)."""
    from autosched.measure import MeasureInput
    from autosched.measure.interface import build_then_run
    from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions, rounds

    inits = {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8),
             "w": (RNG.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "sy": np.array(0.02, np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Conv", ["d", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "sy", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "z"], ["y"])]
    path = _model(tmp_path, "qdqconv", nodes, [info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                  [info("y", TensorProto.FLOAT, [1, 64, 56, 56])], inits)
    target = Target.parse("llvm")
    task = next(t for t in extract_tasks(optimize_for(load_onnx(path), target)).tasks if t.op == "ConvNCHWc")
    assert rounds(task)
    template = get_template(task.op, target.kind)
    fallback = template.fallback(task, target)
    direct = template.space(task, target).from_values({**{k.name: fallback[k.name] for k in fallback.space.knobs},
                                                       "algorithm": "direct"})
    with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=1.0, threads=2)) as runner:
        results = build_then_run(LocalBuilder(cache_dir=tmp_path), runner,
                                 [MeasureInput(task, target, c) for c in (fallback, direct)])
    assert all(r.ok for r in results), [r.error_msg for r in results]
