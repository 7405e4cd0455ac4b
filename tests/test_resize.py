"""Linear Resize computed axis by axis (`opset/resize.py`): the innermost resized axis first, each
pass its own parallel vector loops, and builds that match onnxruntime on the upsamplings models
use (a segmentation head's 16x bilinear, an FPN's 2x, a volume's trilinear)."""
import numpy as np
import onnx
import pytest
from graph_helpers import built_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from autosched.frontend.onnx import load_onnx
from autosched.target import Target
from autosched.task import extract_tasks


def _resize(path, in_shape, out_shape, **attrs):
    sizes = numpy_helper.from_array(np.array(out_shape, np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="up", **attrs)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [sizes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


CASES = {
    "segmentation head": ((1, 3, 5, 5), (1, 3, 37, 37), dict(mode="linear")),
    "fpn 2x": ((1, 16, 7, 9), (1, 16, 14, 18), dict(mode="linear", coordinate_transformation_mode="asymmetric")),
    "align corners": ((2, 4, 6, 5), (2, 4, 11, 13), dict(mode="linear", coordinate_transformation_mode="align_corners")),
    "downsampling": ((1, 8, 20, 16), (1, 8, 7, 5), dict(mode="linear")),
    "one axis": ((1, 8, 6, 10), (1, 8, 6, 25), dict(mode="linear")),
    "trilinear": ((1, 2, 4, 5, 6), (1, 2, 8, 9, 13), dict(mode="linear")),
    "nearest": ((1, 3, 5, 5), (1, 3, 15, 10), dict(mode="nearest")),
    "bicubic": ((1, 3, 5, 5), (1, 3, 13, 11), dict(mode="cubic")),
    "bicubic downsampling": ((1, 4, 20, 16), (1, 4, 9, 7), dict(mode="cubic")),
    "bicubic a=-0.5, outside excluded": ((1, 2, 6, 7), (1, 2, 14, 15), dict(mode="cubic", cubic_coeff_a=-0.5,
                                                                             exclude_outside=1)),
    "bicubic align corners": ((2, 3, 4, 6), (2, 3, 9, 13), dict(mode="cubic", coordinate_transformation_mode="align_corners")),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_builds_match_onnxruntime(case, tmp_path):
    built_matches_onnxruntime(_resize(tmp_path / "resize.onnx", *case[:2], **case[2]), tmp_path / "resize.so",
                              rtol=1e-5, atol=1e-5)


def test_a_bilinear_upsampling_runs_one_pass_per_axis_the_innermost_first(tmp_path):
    """Two parallel vector loop nests: the width pass over the input's rows (the only gathers
    along the vector axis), then the height pass, whose two rows per output row are whole
    vectors."""
    from autosched.backend import renderer_for
    from autosched.compute import default_schedule, task_compute
    from autosched.lower import lower
    from autosched.schedule import Attach

    graph = load_onnx(_resize(tmp_path / "resize.onnx", (1, 3, 21, 21), (1, 3, 321, 321), mode="linear"))
    target = Target.parse("llvm -mcpu=haswell")
    (task,) = extract_tasks(graph).tasks
    args, outs = task_compute(task, target.cpu_capabilities)
    schedule = default_schedule(task, outs, target.cpu_capabilities)
    assert [st.op.name for st in schedule.stages if st.attach is Attach.ROOT and st.op.axes] == \
        ["resize_axis3", "resize_axis2"]
    code = renderer_for("llvm").render(lower(schedule, args + outs, "resize"))
    assert code.count("#pragma omp parallel for") == 2


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_a_resize_to_its_own_size_is_an_identity(mode, tmp_path):
    """SegFormer's head resizes each of its four maps to the first one's size, the first one
    included: that Resize reads every position in place, imports as an identity and builds."""
    sizes = numpy_helper.from_array(np.array([1, 4, 8, 8], np.int64), "sizes")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Resize", ["r", "", "", "sizes"], ["same"], name="same", mode=mode),
             helper.make_node("Add", ["same", "x"], ["y"])]
    graph = helper.make_graph(nodes, "same_size", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4, 8, 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, 8, 8))], [sizes])
    path = tmp_path / "same.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert "Resize" not in {n.op.value for n in load_onnx(path).nodes}
    built_matches_onnxruntime(path, tmp_path / "same.so", rtol=1e-6, atol=1e-6)
