"""Softsign, y = x / (1 + |x|): imported from ONNX, alone and fused after a MatMul and a Conv;
shapes, the numpy reference against onnxruntime, and the default schedule's kernel (AVX2 and
AVX-512 code generated on any host, run where the host has the ISA) against the reference."""
import numpy as np
import onnxruntime as ort
import pytest
from isa import ISAS, runs_here
from onnx import TensorProto, helper, numpy_helper

from autosched.compile.kernel import build_kernel, source
from autosched.compute import default_schedule, task_compute
from autosched.frontend.onnx import import_model
from autosched.graph.ir import Op
from autosched.graph.passes import optimize
from autosched.graph.reference import random_inputs, run_graph
from autosched.task import extract_tasks

_RNG = np.random.default_rng(0)


def _model(nodes, x_shape, initializers=()):
    graph = helper.make_graph(nodes, "softsign", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weight(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


MODELS = {
    # name: (model, output shape, the op the task is anchored on)
    "alone": (_model([helper.make_node("Softsign", ["x"], ["y"])], [2, 3, 8, 37]), (2, 3, 8, 37), Op.SOFTSIGN),
    "after_matmul": (_model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softsign", ["h"], ["y"])],
                            [16, 32], [("w", _weight(32, 24))]), (16, 24), Op.MATMUL),
    "after_conv": (_model([helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
                           helper.make_node("Softsign", ["h"], ["y"])],
                          [1, 4, 10, 32], [("w", _weight(8, 4, 3, 3)), ("b", _weight(8))]), (1, 8, 10, 32), Op.CONV),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_import_shape_and_reference_match_onnxruntime(name):
    model, shape, anchor = MODELS[name]
    graph = import_model(model)
    assert graph.outputs[0].shape == shape and graph.outputs[0].dtype == "float32"
    assert graph.nodes[-1].op is Op.SOFTSIGN
    inputs = random_inputs(graph.inputs, seed=0)
    inputs["x"] = inputs["x"] * 4  # well into the saturating tails
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, inputs)
    np.testing.assert_allclose(run_graph(graph, inputs)["y"], want, rtol=1e-5, atol=1e-5)


def _task(name):
    model, _, anchor = MODELS[name]
    (task,) = extract_tasks(optimize(import_model(model))).tasks
    assert task.op == anchor.value
    assert [e.op for e in task.epilogue] == ([] if anchor is Op.SOFTSIGN else ["Softsign"])  # fused as an epilogue
    return task


@pytest.mark.parametrize("isa", sorted(ISAS))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_default_schedule_kernel_matches_the_reference(name, isa):
    target, _, lanes = ISAS[isa]
    task = _task(name)
    args, outs = task_compute(task, target.capabilities)
    sched = default_schedule(task, outs, target.capabilities)
    assert f"f32x{lanes}" in source(sched, args + outs, "softsign", target)
    if not runs_here(target):
        pytest.skip(f"the host cannot run {isa} code (generated above)")
    inputs = task.random_inputs(0)
    inputs[0] = inputs[0] * 4
    kernel = build_kernel(sched, args + outs, "softsign", target=target)
    y = np.empty(task.out_shapes[0], np.float32)
    kernel(*inputs, y)
    np.testing.assert_allclose(y, task.reference(inputs)[0], rtol=1e-5, atol=1e-5)
