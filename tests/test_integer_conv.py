"""Int8 blocked convolutions by `dot4` (`IntegerConvNCHWc`): exact int32 sums from every config
of its template, padding that holds the zero point, vpdpbusd where the target has VNNI (read in
the assembly on any x86-64 host, run where the host has the ISA), and the pass that turns a
quantized CNN's float convolutions into them, checked against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

from autosched.compile.evaluate import onnxruntime_session, sample_inputs
from autosched.compile.kernel import build_kernel
from autosched.compile.model import build_model
from autosched.frontend.onnx import load_onnx
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.layout import to_plain
from autosched.graph.passes import optimize_for
from autosched.opset.conv import conv_reference
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.templates import get_template
from tests.isa import AVX2, byte_dot_registers, runs_here

VNNI_512 = Target.parse("llvm -mcpu=sapphirerapids")
VNNI_256 = Target.parse("llvm -mcpu=alderlake")
#: target -> (the register vpdpbusd uses there or None, the channel block its layout takes)
TARGETS = {"avx512_vnni": (VNNI_512, "zmm", 16), "avx_vnni": (VNNI_256, "ymm", 8), "avx2": (AVX2, None, 8)}
TEMPLATE = get_template("IntegerConvNCHWc", "llvm")
RNG = np.random.default_rng(5)


def _task(channels, size, out_channels, kernel, stride, pad, block, pad_value=9, at_run_time=False):
    """The convolution's task; `at_run_time`: the padding's value an input (a dynamically
    quantized model's zero point), not `pad_value`."""
    b = GraphBuilder()
    x = b.input("x", (1, channels // block, size, size, block), "uint8")
    w = b.constant("w", RNG.integers(-128, 128, (out_channels, channels, kernel, kernel)).astype(np.int8))
    padding = {} if at_run_time else {"pad_value": pad_value}
    operands = [x, w, b.input("pad", (), "uint8")] if at_run_time else [x, w]
    y = b.node(Op.INTEGER_CONV_NCHWC, operands, strides=(stride, stride), pads=(pad,) * 4, dilations=(1, 1), group=1,
               in_block=block, out_block=block, **padding)
    b.output(b.node(Op.CAST, [y], to="float32"))
    graph = b.build()
    (task,) = extract_tasks(graph).tasks
    return task, graph.constants["w"]


def _expected(x, w, stride, pad, block, pad_value):
    """In float64, from the plain layout: the input padded with `pad_value`."""
    plain = to_plain(x, block).astype(np.float64) - pad_value
    attrs = {"pads": (pad,) * 4, "group": 1, "strides": (stride, stride), "dilations": (1, 1)}
    y = conv_reference(attrs, [plain, w.astype(np.float64)])[0] + pad_value * w.astype(np.float64).sum(axis=(1, 2, 3))[
        None, :, None, None]
    n, oc, oh, ow = y.shape
    return y.reshape(n, oc // block, block, oh, ow).transpose(0, 1, 3, 4, 2).astype(np.float32)


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_the_convolution_is_vpdpbusd_where_the_target_has_vnni(isa, tmp_path):
    target, register, block = TARGETS[isa]
    task, _ = _task(64, 14, 64, 3, 1, 1, block)
    kern = build_kernel(*TEMPLATE.apply(task, TEMPLATE.fallback(task, target), target), "k", target=target,
                        cache_dir=tmp_path)
    assert byte_dot_registers(kern.path) == ({register} if register else set())


#: (channels, size, out channels, kernel, stride, pad): a 3x3 layer, a stride-2 one on an odd
#: map no tile divides, a 1x1 projection, a 5x5 unpadded one
SHAPES = [(32, 10, 32, 3, 1, 1), (16, 11, 48, 3, 2, 1), (32, 7, 16, 1, 1, 0), (16, 9, 32, 5, 1, 0)]


@pytest.mark.parametrize("isa", sorted(TARGETS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "_".join(map(str, s)))
def test_every_config_sums_exactly(isa, shape, tmp_path):
    target, _, block = TARGETS[isa]
    if not runs_here(target):
        pytest.skip(f"this host cannot run {isa} code")
    channels, size, out_channels, kernel, stride, pad = shape
    task, w = _task(channels, size, out_channels, kernel, stride, pad, block)
    x = RNG.integers(0, 256, (1, channels // block, size, size, block)).astype(np.uint8)
    expected = _expected(x, w, stride, pad, block, 9)
    space = TEMPLATE.space(task, target)
    configs = [TEMPLATE.fallback(task, target)] + [space.get(int(i)) for i in RNG.integers(0, len(space), 4)]
    for config in configs:
        if not TEMPLATE.valid(task, config, target):
            continue
        kern = build_kernel(*TEMPLATE.apply(task, config, target), "k", target=target, cache_dir=tmp_path)
        out = np.zeros(expected.shape, np.float32)
        kern(x, w, out)
        np.testing.assert_array_equal(out, expected, err_msg=f"config {config}")


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_a_padding_known_at_run_time_is_read_from_its_input(isa, tmp_path):
    target, _, block = TARGETS[isa]
    if not runs_here(target):
        pytest.skip(f"this host cannot run {isa} code")
    channels, size, out_channels, kernel, stride, pad = SHAPES[1]
    task, w = _task(channels, size, out_channels, kernel, stride, pad, block, at_run_time=True)
    assert task.shapes[2] == () and task.dtypes[2] == "uint8"
    kern = build_kernel(*TEMPLATE.apply(task, TEMPLATE.fallback(task, target), target), "k", target=target,
                        cache_dir=tmp_path)
    x = RNG.integers(0, 256, (1, channels // block, size, size, block)).astype(np.uint8)
    for value in (0, 37, 255):
        out = np.zeros(_expected(x, w, stride, pad, block, 0).shape, np.float32)
        kern(x, w, np.array(value, np.uint8), out)
        np.testing.assert_array_equal(out, _expected(x, w, stride, pad, block, value), err_msg=f"padding {value}")


class _Calibration(CalibrationDataReader):
    def __init__(self, shape):
        self.feeds = iter([{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.feeds, None)


def _quantized_cnn(tmp_path, fmt, activations):
    """A first layer (an RGB image's 3 channels, 7x7, stride 2) and a 3x3 convolution of 32
    channels, with biases and a ReLU between, quantized by onnxruntime's `quantize_static`
    (per-channel weights)."""
    inits = {"w1": (RNG.standard_normal((32, 3, 7, 7)) * 0.1).astype(np.float32),
             "b1": RNG.standard_normal(32).astype(np.float32),
             "w2": (RNG.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32),
             "b2": RNG.standard_normal(32).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 6, 6])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    float_path, path = tmp_path / "cnn.onnx", tmp_path / f"cnn_{fmt}_{activations}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), float_path)
    if fmt == "dynamic":  # ConvInteger of DynamicQuantizeLinear's bytes: a zero point known at run time
        quantize_dynamic(str(float_path), str(path), weight_type=QuantType.QInt8, per_channel=True)
        return path
    quantize_static(str(float_path), str(path), _Calibration((1, 3, 24, 24)),
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    activation_type=activations, weight_type=QuantType.QInt8, per_channel=True)
    return path


MODELS = {"qdq_s8": ("qdq", QuantType.QInt8), "qoperator_u8": ("qoperator", QuantType.QUInt8),
          "dynamic": ("dynamic", QuantType.QUInt8)}


@pytest.mark.parametrize("form", sorted(MODELS))
def test_quantized_cnns_convolve_bytes_on_vnni_targets_only(form, tmp_path):
    graph = load_onnx(_quantized_cnn(tmp_path, *MODELS[form]))
    ops = {isa: [n.op for n in optimize_for(graph, target).nodes] for isa, (target, _, _) in TARGETS.items()}
    assert ops["avx512_vnni"].count(Op.INTEGER_CONV_NCHWC) == 2 and ops["avx_vnni"].count(Op.INTEGER_CONV_NCHWC) == 2
    assert Op.INTEGER_CONV_NCHWC not in ops["avx2"] and Op.CONV_NCHWC not in ops["avx512_vnni"]


@pytest.mark.parametrize("form", sorted(MODELS))
def test_quantized_cnns_match_onnxruntime(form, tmp_path):
    """Built for this host (int8 convolutions where it has VNNI), within one step of the
    output's quantization of onnxruntime's integer kernels (the float requantization between
    the two layers may land a value near a half on the other side); a dynamically quantized
    model's float output within float32's rounding."""
    path = _quantized_cnn(tmp_path, *MODELS[form])
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / "cnn.so").library)
    try:
        feeds = sample_inputs(graph, 1)
        ours = next(iter(model.run(feeds).values()))
    finally:
        model.close()
    theirs = onnxruntime_session(path, 2).run(None, feeds)[0]
    if form == "dynamic":  # float outputs: the scales multiplied in another order, a last bit apart
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())
        return
    step = np.abs(np.diff(np.unique(theirs))).min()
    assert np.abs(ours - theirs).max() <= step * 1.01
    assert np.mean(ours != theirs) < 0.01
