"""GridSample (`opset/grid_sample.py`): builds that match onnxruntime for each interpolation and
padding mode, on grids that reach past the input, and in the places models use it (a sampled
feature map from a convolution, a grid computed by the network)."""
import numpy as np
import onnx
import pytest
from graph_helpers import built_matches_onnxruntime
from isa import runs_here
from onnx import TensorProto, helper, numpy_helper

from autosched.errors import FrontendError
from autosched.frontend.onnx import load_onnx
from autosched.graph.reference import run_graph
from autosched.target import Target
from tests.cuda_markers import needs_nvcc

MODEL_OPSET = 20


def _grid_sample(path, x_shape, grid_shape, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample", **attrs)
    graph = helper.make_graph([node], "grid_sample", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                                                      helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", MODEL_OPSET)]), path)
    return path


#: each mode with each padding once, both alignments; the conformance suite has the rest
CASES = {
    "bilinear zeros": dict(mode="linear"),
    "bilinear border aligned": dict(mode="linear", padding_mode="border", align_corners=1),
    "nearest reflection": dict(mode="nearest", padding_mode="reflection"),
    "nearest zeros aligned": dict(mode="nearest", align_corners=1),
    "bicubic border": dict(mode="cubic", padding_mode="border"),
    "bicubic reflection aligned": dict(mode="cubic", padding_mode="reflection", align_corners=1),
}


@pytest.mark.parametrize("attrs", CASES.values(), ids=CASES.keys())
def test_builds_match_onnxruntime_on_grids_past_the_input(attrs, tmp_path):
    """The random grid is standard normal: a third of its coordinates fall outside [-1, 1], so
    every padding rule is exercised, on a map whose sides differ (x and y not swapped)."""
    built_matches_onnxruntime(_grid_sample(tmp_path / "gs.onnx", (2, 5, 7, 11), (2, 6, 9, 2), **attrs),
                              tmp_path / "gs.so", rtol=1e-4, atol=1e-4)


def test_trilinear_sampling_of_a_volume_matches_onnxruntime(tmp_path):
    built_matches_onnxruntime(_grid_sample(tmp_path / "gs.onnx", (1, 3, 4, 5, 6), (1, 3, 4, 5, 3), mode="linear",
                                           padding_mode="reflection"), tmp_path / "gs.so", rtol=1e-4, atol=1e-4)


def _sampled_features(path):
    """A convolution's feature map sampled where the network says: the grid is tanh of a
    second convolution's two channels, moved last, as a deformable or spatial-transformer head
    computes it."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    wg = numpy_helper.from_array((rng.standard_normal((2, 16, 3, 3)) * 0.2).astype(np.float32), "wg")
    nodes = [helper.make_node("Conv", ["x", "w"], ["f"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("Conv", ["r", "wg"], ["o"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Tanh", ["o"], ["t"]),
             helper.make_node("Transpose", ["t"], ["grid"], perm=[0, 2, 3, 1]),
             helper.make_node("GridSample", ["r", "grid"], ["y"], mode="bilinear")]
    graph = helper.make_graph(nodes, "sampled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 24, 20))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, wg])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), path)
    return path


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"])
def test_a_feature_map_sampled_on_a_computed_grid_matches_onnxruntime(target, tmp_path):
    """Opset 16's spelling ("bilinear"), the sampled map in the convolutions' blocked layout,
    compiled for AVX2 and AVX-512 (run where the host has them)."""
    if not runs_here(Target.parse(target)):
        pytest.skip(f"this host cannot run {target}")
    built_matches_onnxruntime(_sampled_features(tmp_path / "sampled.onnx"), tmp_path / "sampled.so",
                              rtol=1e-4, atol=1e-4, target=target)


def test_the_taps_are_made_once_per_position_not_per_channel(tmp_path):
    """The gather stage reads index and weight tables of [N, *out]: the coordinate arithmetic
    does not grow with the channels (64 channels cost what 1 does, within the gather)."""
    from autosched.compute import default_schedule, task_compute
    from autosched.opset.grid_sample import TAPS_TAG
    from autosched.schedule import Attach
    from autosched.task import extract_tasks

    graph = load_onnx(_grid_sample(tmp_path / "gs.onnx", (1, 64, 8, 8), (1, 4, 4, 2), mode="cubic"))
    target = Target.parse("llvm -mcpu=haswell")
    (task,) = extract_tasks(graph).tasks
    _, outs = task_compute(task, target.cpu_capabilities)
    schedule = default_schedule(task, outs, target.cpu_capabilities)
    tables = [st.op for st in schedule.stages if st.op.tag == TAPS_TAG and st.attach is Attach.ROOT]
    assert len(tables) == 2 * 2 * 4  # (index, weight) per axis and tap
    assert {tuple(t.shape) for t in tables} == {(1, 4, 4)}


def test_the_reference_matches_onnx_and_bad_attributes_are_refused(tmp_path):
    from onnx.reference import ReferenceEvaluator

    path = _grid_sample(tmp_path / "gs.onnx", (1, 2, 5, 6), (1, 3, 4, 2), mode="cubic", padding_mode="reflection")
    rng = np.random.default_rng(1)
    x, grid = rng.standard_normal((1, 2, 5, 6)).astype(np.float32), (1.5 * rng.standard_normal((1, 3, 4, 2))).astype(
        np.float32)
    (want,) = ReferenceEvaluator(str(path)).run(None, {"x": x, "grid": grid})
    (got,) = run_graph(load_onnx(path), {"x": x, "grid": grid}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(FrontendError, match="'sample'.*padding_mode 'wrap'"):
        load_onnx(_grid_sample(tmp_path / "bad.onnx", (1, 2, 5, 6), (1, 3, 4, 2), padding_mode="wrap"))
    with pytest.raises(FrontendError, match="'sample'.*mode 'area'"):
        load_onnx(_grid_sample(tmp_path / "bad.onnx", (1, 2, 5, 6), (1, 3, 4, 2), mode="area"))


def test_a_grid_of_the_wrong_shape_names_the_node(tmp_path):
    with pytest.raises(FrontendError, match="sample.*grid \\[1, 3, 4, 3\\] does not sample 2-D input"):
        load_onnx(_grid_sample(tmp_path / "bad.onnx", (1, 2, 5, 6), (1, 3, 4, 3)))


@needs_nvcc
def test_the_cuda_build_matches_onnxruntime_in_emulation(tmp_path, capsys):
    """nvcc builds the tap stages and the gather for the GPU; without one, the emulation runs
    the same kernels on the CPU (mocked GPU: no device here)."""
    from autosched.cli import main

    path = _grid_sample(tmp_path / "gs.onnx", (2, 5, 7, 11), (2, 6, 9, 2), mode="cubic", padding_mode="reflection")
    assert main(["check", str(path), "--target", "cuda -arch=sm_80", "--emulate"]) == 0
    assert "ok" in capsys.readouterr().out


def test_a_model_onnxruntime_cannot_load_is_checked_against_onnxs_reference(tmp_path, capsys):
    """Deformable DETR samples on float64 grids, for which onnxruntime has no GridSample: `check`
    says so and names `--reference onnx`, which compares with ONNX's reference evaluator (its
    opset-16 "bilinear" spelled as opset 20's "linear" for it)."""
    from autosched.cli import main

    nodes = [helper.make_node("Cast", ["grid"], ["grid64"], to=TensorProto.DOUBLE),
             helper.make_node("GridSample", ["x", "grid64"], ["y"], name="sample", mode="bilinear")]
    graph = helper.make_graph(nodes, "double_grid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 6, 7)),
                                                     helper.make_tensor_value_info("grid", TensorProto.FLOAT, (1, 4, 5, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "double_grid.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), path)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "onnxruntime cannot load the model" in err and "`check --reference onnx`" in err
    assert main(["check", str(path), "--reference", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "reference: ONNX's reference evaluator" in out and out.rstrip().endswith("ok")


def test_a_double_model_samples_in_double(tmp_path):
    """float64 input and grid: taps and sums in double, as onnxruntime computes them (in single
    precision the build was 7.7e-7 off; now 4e-16)."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border")
    graph = helper.make_graph([node], "double", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, (1, 3, 6, 7)),
                                                 helper.make_tensor_value_info("grid", TensorProto.DOUBLE, (1, 4, 5, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    path = tmp_path / "double.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", MODEL_OPSET)]), path)
    built_matches_onnxruntime(path, tmp_path / "double.so", rtol=1e-12, atol=1e-12)


def _affine_grid(path, theta_shape, size, constant_size=True):
    inits = [numpy_helper.from_array(np.array(size, np.int64), "size")] if constant_size else []
    inputs = [helper.make_tensor_value_info("theta", TensorProto.FLOAT, theta_shape)]
    if not constant_size:
        inputs.append(helper.make_tensor_value_info("size", TensorProto.INT64, (len(size),)))
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine")
    graph = helper.make_graph([node], "affine", inputs, [helper.make_tensor_value_info("grid", TensorProto.FLOAT, None)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    return path


def test_an_affine_grid_is_one_product_and_bad_ones_name_the_node(tmp_path):
    """A 2-D and a 3-D AffineGrid match onnxruntime; a theta that does not fit the size, and a
    size given at run time, are refused naming the node."""
    built_matches_onnxruntime(_affine_grid(tmp_path / "a2.onnx", (2, 2, 3), (2, 3, 5, 7)), tmp_path / "a2.so")
    built_matches_onnxruntime(_affine_grid(tmp_path / "a3.onnx", (1, 3, 4), (1, 2, 3, 4, 5)), tmp_path / "a3.so")
    with pytest.raises(FrontendError, match="'affine'.*theta \\[2, 2, 3\\] is not an affine map of size \\[2, 3, 4, 5, 6\\]"):
        load_onnx(_affine_grid(tmp_path / "bad.onnx", (2, 2, 3), (2, 3, 4, 5, 6)))
    with pytest.raises(FrontendError, match="'affine'"):
        load_onnx(_affine_grid(tmp_path / "dynamic.onnx", (2, 2, 3), (2, 3, 5, 7), constant_size=False))
