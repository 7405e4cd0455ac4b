"""Int8 products by `dot4` (`IntegerMatMul`): exact int32 sums from every config of its
template, vpdpbusd where the target has VNNI (read in the assembly for several -mcpu on any
x86-64 host, run where the host has the ISA), and the pass that turns a quantized model's float
MatMuls into them, checked against onnxruntime's integer kernels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

from autosched.compile.evaluate import compare, onnxruntime_session, sample_inputs
from autosched.compile.kernel import build_kernel
from autosched.compile.model import build_model
from autosched.frontend.onnx import load_onnx
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize_for
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.templates import get_template
from tests.isa import AVX2, byte_dot_registers, runs_here

VNNI_512 = Target.parse("llvm -mcpu=sapphirerapids")
VNNI_256 = Target.parse("llvm -mcpu=alderlake")  # AVX-VNNI on 256-bit vectors, no AVX-512
#: target -> the register that vpdpbusd should use there (None: the target has no VNNI)
TARGETS = {"avx512_vnni": (VNNI_512, "zmm"), "avx_vnni": (VNNI_256, "ymm"), "avx2": (AVX2, None)}
TEMPLATE = get_template("IntegerMatMul", "llvm")
RNG = np.random.default_rng(3)


def _task(a_shape, n, bias=False):
    """IntegerMatMul of a uint8 input by an int8 weight, cast to float (plus a bias)."""
    b = GraphBuilder()
    k = a_shape[-1]
    w = b.constant("w", RNG.integers(-128, 128, (k, n)).astype(np.int8))
    y = b.node(Op.CAST, [b.node(Op.INTEGER_MATMUL, [b.input("a", a_shape, "uint8"), w])], to="float32")
    if bias:
        y = b.node(Op.ADD, [y, b.constant("bias", RNG.standard_normal(n).astype(np.float32))])
    b.output(y)
    graph = b.build()
    (task,) = extract_tasks(graph).tasks
    return task, graph.constants


def test_targets_with_vnni_multiply_bytes():
    assert VNNI_512.capabilities.byte_dot and VNNI_256.capabilities.byte_dot
    assert not AVX2.capabilities.byte_dot
    assert not Target.parse("llvm -mcpu=skylake-avx512").capabilities.byte_dot


@pytest.mark.parametrize("isa", sorted(TARGETS))
def test_the_product_is_vpdpbusd_where_the_target_has_vnni(isa, tmp_path):
    target, register = TARGETS[isa]
    task, _ = _task((128, 768), 768)
    kern = build_kernel(*TEMPLATE.apply(task, TEMPLATE.fallback(task, target), target), "k", target=target,
                        cache_dir=tmp_path)
    assert byte_dot_registers(kern.path) == ({register} if register else set())


#: (A's shape, n): BERT's projection; rows, reduction and columns no tile divides (k not whole
#: words of four); A with a batch axis; one row
SHAPES = [((128, 768), 768), ((13, 30), 37), ((2, 9, 20), 33), ((1, 64), 48)]


@pytest.mark.parametrize("isa", sorted(TARGETS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[0])) + f"_{s[1]}")
def test_every_config_sums_exactly(isa, shape, tmp_path):
    target, _ = TARGETS[isa]
    if not runs_here(target):
        pytest.skip(f"this host cannot run {isa} code")
    task, constants = _task(*shape, bias=True)
    space = TEMPLATE.space(task, target)
    configs = [TEMPLATE.fallback(task, target)] + [space.get(int(i)) for i in RNG.integers(0, len(space), 4)]
    a = RNG.integers(0, 256, shape[0]).astype(np.uint8)
    weight, bias = constants["w"], constants["bias"]
    expected = (a.astype(np.int64) @ weight.astype(np.int64)).astype(np.float32) + bias
    for config in configs:
        if not TEMPLATE.valid(task, config, target):
            continue
        sched, args = TEMPLATE.apply(task, config, target)
        kern = build_kernel(sched, args, "k", target=target, cache_dir=tmp_path)
        out = np.zeros(expected.shape, np.float32)
        kern(a, weight, bias, out)
        np.testing.assert_array_equal(out, expected, err_msg=f"config {config}")


def _dynamic_mlp(tmp_path):
    """A two-layer MLP quantized by onnxruntime's `quantize_dynamic` (its defaults: uint8
    activations quantized at run time, int8 weights): DynamicQuantizeLinear and MatMulInteger."""
    w1 = (RNG.standard_normal((96, 128)) * 0.1).astype(np.float32)
    w2 = (RNG.standard_normal((128, 40)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 40])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    float_path, path = tmp_path / "mlp.onnx", tmp_path / "mlp_dynamic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), float_path)
    quantize_dynamic(str(float_path), str(path))
    return path


class _Calibration(CalibrationDataReader):
    def __init__(self, name, shape):
        self.feeds = iter([{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.feeds, None)


def _static_gemm_mlp(tmp_path, activations, per_channel):
    """Two Gemm layers (PyTorch's Linear: B transposed, a bias) quantized by onnxruntime's
    `quantize_static` in its default QDQ format: each weight reaches the product dequantized."""
    w1 = (RNG.standard_normal((128, 96)) * 0.1).astype(np.float32)
    w2 = (RNG.standard_normal((40, 128)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    inits = {"w1": w1, "b1": RNG.standard_normal(128).astype(np.float32), "w2": w2,
             "b2": RNG.standard_normal(40).astype(np.float32)}
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 40])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    float_path, path = tmp_path / "gemm_mlp.onnx", tmp_path / f"gemm_mlp_{activations}_{per_channel}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), float_path)
    quantize_static(str(float_path), str(path), _Calibration("x", (8, 96)), quant_format=QuantFormat.QDQ,
                    activation_type=activations, weight_type=QuantType.QInt8, per_channel=per_channel)
    return path


MODELS = {"dynamic": lambda tmp: _dynamic_mlp(tmp),
          "qdq_s8": lambda tmp: _static_gemm_mlp(tmp, QuantType.QInt8, False),
          "qdq_u8_per_channel": lambda tmp: _static_gemm_mlp(tmp, QuantType.QUInt8, True)}


@pytest.mark.parametrize("form", sorted(MODELS))
def test_quantized_models_multiply_bytes_on_vnni_targets_only(form, tmp_path):
    graph = load_onnx(MODELS[form](tmp_path))
    ops = {isa: [n.op for n in optimize_for(graph, target).nodes] for isa, (target, _) in TARGETS.items()}
    assert ops["avx512_vnni"].count(Op.INTEGER_MATMUL) == 2 and ops["avx_vnni"].count(Op.INTEGER_MATMUL) == 2
    assert Op.INTEGER_MATMUL not in ops["avx2"]


@pytest.mark.parametrize("form", sorted(MODELS))
def test_quantized_models_match_onnxruntime(form, tmp_path):
    """Built for this host (int8 products where it has VNNI, float ones elsewhere), equal to
    onnxruntime's integer kernels within float rounding of the dequantized sums."""
    path = MODELS[form](tmp_path)
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / "mlp.so").library)
    try:
        diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-4, atol=1e-5)
    finally:
        model.close()
    assert all(d.ok for d in diffs), diffs


def test_dequantized_weights_give_back_their_integers_and_scales():
    """A QDQ weight arrives multiplied out: Q · s is found again bit for bit (one scale, or one
    per column), and a float weight that no int8 grid holds is left alone."""
    from autosched.graph.integers import integer_weights

    rng = np.random.default_rng(11)
    for _ in range(20):  # scales whose largest weight the float product rounded, either way
        q = rng.integers(-127, 128, (64, 24)).astype(np.int8)
        q[0] = rng.choice([-127, 127], 24)
        for scale in (np.float32(rng.random() * 0.05 + 1e-4), (rng.random(24) * 0.05 + 1e-4).astype(np.float32)):
            weights = (q.astype(np.float32) * scale).astype(np.float32)
            found = integer_weights(weights)
            assert found is not None
            np.testing.assert_array_equal((found[0] * found[1]).astype(np.float32), weights)
    assert integer_weights(RNG.standard_normal((64, 24)).astype(np.float32)) is None


@pytest.mark.parametrize("a_shape, n, in_place", [((64, 1024), 10, True), ((13, 30), 37, False)])
def test_the_register_tile_runs_whole_vectors_reading_a_in_place_where_k_is_whole_words(a_shape, n, in_place):
    """A's words are one 32-bit load each where k is a multiple of four (else A is packed), and
    an output narrower than a vector (a classifier's 10 columns) still accumulates whole
    vectors: with the product's own 10 columns its dot products ran lane by lane, 4x slower."""
    from autosched.compile.kernel import source

    task, _ = _task(a_shape, n)
    code = source(*TEMPLATE.apply(task, TEMPLATE.fallback(task, VNNI_512), VNNI_512), "k", VNNI_512)
    assert "dpbusd_i32x16(" in code and "dot4_u8s8(load" not in code
    assert ("load_word_u8(&in0[" in code) == in_place and ("in0_words" in code) != in_place
