"""The model zoo: valid ONNX, and the reference evaluator agrees with onnxruntime."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from autosched import zoo
from autosched.frontend.onnx import import_model, load_onnx
from autosched.graph.ir import Op
from autosched.graph.passes import optimize
from autosched.graph.reference import random_inputs, run_graph


@pytest.fixture(scope="module", params=sorted(zoo.MODELS))
def model(request):
    return request.param, zoo.MODELS[request.param]()


def _onnxruntime(model, inputs):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def test_model_is_valid_onnx(model):
    name, proto = model
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == 8 and [(o.domain, o.version) for o in proto.opset_import] == [("", 17)]
    if name in ("resnet18", "mobilenet_v2"):
        assert any(node.op_type == "BatchNormalization" for node in proto.graph.node)


def test_reference_matches_onnxruntime_before_and_after_passes(model):
    name, proto = model
    graph = import_model(proto, source=name)
    inputs = random_inputs(graph.inputs, seed=1)
    want = _onnxruntime(proto, inputs)
    optimized = optimize(graph)
    for candidate in (graph, optimized):
        got = run_graph(candidate, inputs)
        assert got.keys() == want.keys()
        for output in want:
            np.testing.assert_allclose(got[output], want[output], rtol=1e-3, atol=1e-4)
    assert not any(node.op in (Op.BATCH_NORM, Op.DROPOUT, Op.IDENTITY) for node in optimized.nodes)
    assert len(optimized.constants) <= len(graph.constants)


def test_shapes_agree_with_onnx_shape_inference(model):
    name, proto = model
    graph = import_model(proto, source=name)
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    checked = 0
    for info in (*inferred.graph.value_info, *inferred.graph.output):
        dims = info.type.tensor_type.shape.dim
        if info.name in graph.values and all(d.HasField("dim_value") for d in dims):
            assert graph.values[info.name].shape == tuple(d.dim_value for d in dims), info.name
            checked += 1
    assert checked >= len(graph.nodes)


def test_outputs_are_not_degenerate(model):
    name, proto = model
    graph = import_model(proto, source=name)
    (out,) = run_graph(graph, random_inputs(graph.inputs, seed=2)).values()
    assert np.isfinite(out).all() and 0.01 < out.std() < 100


def test_models_are_deterministic_per_seed():
    assert zoo.mlp(seed=3).SerializeToString() == zoo.mlp(seed=3).SerializeToString()
    assert zoo.mlp(seed=3).SerializeToString() != zoo.mlp(seed=4).SerializeToString()


def test_module_entry_saves_every_model(tmp_path):
    root = Path(zoo.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "autosched.zoo", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, check=True, env=env)
    written = sorted(Path(line).name for line in result.stdout.split())
    assert written == sorted(f"{name}.onnx" for name in zoo.MODELS)
    assert load_onnx(tmp_path / "mlp.onnx").inputs[0].shape == (64, 784)


def test_vit_block_matches_onnxruntime_and_its_written_out_parts_fold():
    """The ViT-style block: LayerNorms written out become three LayerNormalization nodes, x³ and
    x² multiplications, the patch embedding a MatMul, and the reference agrees with onnxruntime
    before and after."""
    proto = zoo.vit_block()
    onnx.checker.check_model(proto, full_check=True)
    graph = import_model(proto, source="vit_block")
    inputs = random_inputs(graph.inputs, seed=1)
    want = _onnxruntime(proto, inputs)
    optimized = optimize(graph)
    for candidate in (graph, optimized):
        got = run_graph(candidate, inputs)
        for output in want:
            np.testing.assert_allclose(got[output], want[output], rtol=1e-3, atol=1e-4)
    optimized_ops = [node.op for node in optimized.nodes]
    assert optimized_ops.count(Op.LAYER_NORM) == 3
    assert not {Op.POW, Op.REDUCE_MEAN, Op.SQRT, Op.CONV} & set(optimized_ops)  # the patch embedding: a MatMul


def test_save_zoo_writes_named_models_and_refuses_unknown_ones(tmp_path):
    assert [p.name for p in zoo.save_zoo(tmp_path, ["vit_block", "mlp"])] == ["vit_block.onnx", "mlp.onnx"]
    with pytest.raises(ValueError, match="unknown model 'vgg'.*squeezenet"):
        zoo.save_zoo(tmp_path, ["vgg"])
