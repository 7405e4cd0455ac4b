"""3-D convolutions (video and volumetric models) compiled as 2-D ones over a batch of depth
windows (`graph/passes/fold_depth.py`), checked against onnxruntime on real gcc builds."""
import numpy as np
import onnx
import pytest
from graph_helpers import built_matches_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from autosched.graph.ir import Op
from autosched.graph.passes import fold_depth, optimize


def _conv3d(name, x, y, rng, cin, cout, kernel, stride=(1, 1, 1), pads=(1, 1, 1, 1, 1, 1), dilation=(1, 1, 1), group=1,
            bias=True):
    """A Conv node over [N, C, D, H, W] and its initializers."""
    w = numpy_helper.from_array((rng.standard_normal((cout, cin // group, *kernel)) * 0.2).astype(np.float32), f"{name}_w")
    inits = [w]
    inputs = [x, w.name]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), f"{name}_b"))
        inputs.append(f"{name}_b")
    node = helper.make_node("Conv", inputs, [y], name=name, kernel_shape=list(kernel), strides=list(stride),
                            pads=list(pads), dilations=list(dilation), group=group)
    return node, inits


def _model(nodes, inits, x_shape, outputs):
    graph = helper.make_graph(nodes, "video", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _residual_block(rng):
    """R3D's basic block: conv-ReLU-conv, a strided 1x1x1 shortcut, Add, ReLU, a global mean; the
    second conv's output also a graph output (an NCDHW value a plain reader needs too)."""
    c1, i1 = _conv3d("c1", "x", "c1y", rng, 8, 16, (3, 3, 3), stride=(2, 2, 2))
    r1 = helper.make_node("Relu", ["c1y"], ["r1"])
    c2, i2 = _conv3d("c2", "r1", "c2y", rng, 16, 16, (3, 3, 3))
    sc, i3 = _conv3d("sc", "x", "scy", rng, 8, 16, (1, 1, 1), stride=(2, 2, 2), pads=(0,) * 6, bias=False)
    add = helper.make_node("Add", ["c2y", "scy"], ["sum"])
    r2 = helper.make_node("Relu", ["sum"], ["r2"])
    mean = helper.make_node("ReduceMean", ["r2"], ["pooled"], axes=[2, 3, 4], keepdims=0)
    return _model([c1, r1, c2, sc, add, r2, mean], i1 + i2 + i3, (1, 8, 6, 10, 10), ["pooled", "c2y"])


def _check(tmp_path, model, target="llvm"):
    onnx.save(model, tmp_path / "video.onnx")
    return built_matches_onnxruntime(tmp_path / "video.onnx", tmp_path / "video.so", target=target)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])  # blocks of 16 and of 8 lanes
def test_a_residual_block_of_3d_convolutions_matches_onnxruntime_with_one_transpose_in_and_out(tmp_path, target):
    graph = _check(tmp_path, _residual_block(np.random.default_rng(0)), target)
    folded = fold_depth(graph)
    assert not any(n.op is Op.CONV and len(folded.values[n.inputs[0]].shape) == 5 for n in folded.nodes)
    transposes = [n for n in folded.nodes if n.op is Op.TRANSPOSE]
    # x into depth-major, r2 back for the mean, c2y back as a graph output: the ReLUs and the Add run on
    # the convolutions' 2-D outputs (batches of depths), where they fuse into their epilogues
    assert {n.outputs[0] for n in transposes} == {"x_depth_major", "r2", "c2y"}
    elementwise = [n for n in folded.nodes if n.op in (Op.RELU, Op.ADD)]
    assert [folded.values[n.outputs[0]].shape for n in elementwise] == [(3, 16, 5, 5)] * 3
    convs = [n for n in folded.nodes if n.op is Op.CONV]
    assert [folded.values[n.inputs[0]].shape for n in convs] == [(3, 24, 10, 10), (3, 48, 5, 5), (3, 8, 10, 10)]


@pytest.mark.parametrize("kernel, stride, pads, dilation, group, depth", [
    ((3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, 5),   # the common case
    ((3, 1, 1), (1, 1, 1), (1, 0, 0, 1, 0, 0), (1, 1, 1), 1, 5),   # (2+1)-D's temporal half
    ((1, 3, 3), (1, 2, 2), (0, 1, 1, 0, 1, 1), (1, 1, 1), 1, 4),   # its spatial half: KD = 1, no stacking
    ((3, 7, 7), (1, 2, 2), (1, 3, 3, 1, 3, 3), (1, 1, 1), 1, 4),   # R3D's stem
    ((2, 3, 3), (2, 1, 1), (0, 1, 1, 1, 1, 1), (2, 1, 1), 1, 7),   # depth stride, dilation, uneven depth pads
    ((3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 8, 5),   # depthwise (X3D): each group's C/g·KD channels contiguous
    ((3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 2, 3),   # groups of 4 channels
])
def test_3d_convolutions_of_every_geometry_match_onnxruntime(tmp_path, kernel, stride, pads, dilation, group, depth):
    rng = np.random.default_rng(1)
    conv, inits = _conv3d("c", "x", "y", rng, 8, 8, kernel, stride, pads, dilation, group)
    relu = helper.make_node("Relu", ["y"], ["out"])
    graph = _check(tmp_path, _model([conv, relu], inits, (2, 8, depth, 9, 9), ["out"]))
    [conv2d] = [n for n in optimize(graph).nodes if n.op is Op.CONV]
    assert len(optimize(graph).values[conv2d.inputs[0]].shape) == 4


@pytest.mark.parametrize("op, kernel, stride, pads, ceil, include_pad, depth, batch", [
    ("MaxPool", (2, 2, 2), (2, 2, 2), (0,) * 6, 0, 0, 6, 1),                   # C3D's pools
    ("MaxPool", (1, 2, 2), (1, 2, 2), (0,) * 6, 0, 0, 5, 1),                   # spatial only: KD = 1
    ("MaxPool", (3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), 0, 0, 7, 1),         # S3D's, padded: the padding never wins a max
    ("MaxPool", (3, 3, 3), (2, 2, 2), (0, 1, 1, 0, 1, 1), 1, 0, 6, 1),         # ceil mode past the depth's end
    ("AveragePool", (3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), 0, 0, 5, 1),     # border windows count fewer depths
    ("AveragePool", (3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), 0, 1, 5, 1),     # the padding counted
    ("AveragePool", (2, 2, 2), (2, 2, 2), (0, 0, 0, 0, 0, 0), 1, 0, 5, 1),     # ceil mode: the last window one depth
    ("MaxPool", (3, 3, 3), (2, 2, 2), (1, 1, 1, 1, 1, 1), 0, 0, 5, 2),        # a batch of two clips
    ("AveragePool", (3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), 0, 0, 5, 2),
])
def test_3d_pools_match_onnxruntime(tmp_path, op, kernel, stride, pads, ceil, include_pad, depth, batch):
    """A 3-D pool is its 2-D pool over every depth, then the max or the mean over the depth
    windows (slices of the images' batch for one clip, of the depth-major view for more), after
    a 3-D convolution (so its input is already depth-major) and before another."""
    rng = np.random.default_rng(2)
    conv, inits = _conv3d("c", "x", "y", rng, 4, 8, (3, 3, 3))
    extra = {"count_include_pad": include_pad} if op == "AveragePool" else {}
    pool = helper.make_node(op, ["y"], ["p"], kernel_shape=list(kernel), strides=list(stride), pads=list(pads),
                            ceil_mode=ceil, **extra)
    after, more = _conv3d("d", "p", "out", rng, 8, 8, (1, 1, 1), pads=(0,) * 6)
    graph = _check(tmp_path, _model([conv, pool, after], inits + more, (batch, 4, depth, 9, 11), ["out"]))
    folded = fold_depth(graph)
    assert not any(len(folded.values[n.inputs[0]].shape) == 5 and n.op in (Op.CONV, Op.MAX_POOL, Op.AVERAGE_POOL)
                   for n in folded.nodes)
    assert sum(n.op is Op.TRANSPOSE for n in folded.nodes) == 2


@pytest.mark.parametrize("kernel, stride, pads, output_padding", [
    ((2, 2, 2), (2, 2, 2), (0,) * 6, (0, 0, 0)),           # a 3-D U-Net's upsampling: every output phase one tap
    ((3, 3, 3), (2, 2, 2), (1,) * 6, (1, 1, 1)),           # taps of 2 and 1 per phase, a crop
    ((3, 3, 3), (1, 2, 2), (1,) * 6, (0, 1, 1)),           # the depth unstrided: an ordinary convolution along it
])
def test_3d_transposed_convolutions_match_onnxruntime(tmp_path, kernel, stride, pads, output_padding):
    """A strided ConvTranspose over three axes is one 3-D convolution of every output phase and a
    shuffle (the 2-D import's, of any rank), which `fold_depth` then computes as a 2-D one."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((8, 4, *kernel)) * 0.2).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    up = helper.make_node("ConvTranspose", ["x", "w", "b"], ["up"], kernel_shape=list(kernel), strides=list(stride),
                          pads=list(pads), output_padding=list(output_padding))
    relu = helper.make_node("Relu", ["up"], ["out"])
    graph = _check(tmp_path, _model([up, relu], [w, b], (1, 8, 3, 5, 6), ["out"]))
    assert not any(n.op.value == "ConvTranspose" for n in graph.nodes)


def test_a_batchnorm_that_folds_into_no_3d_convolution_reads_the_clip_back_in_ncdhw(tmp_path):
    """Pre-activation: BatchNorm and ReLU before the convolution (per-channel constants, which do
    not broadcast over a batch of depths): they run on NCDHW, the convolution after them on its
    depths, and the result is right."""
    rng = np.random.default_rng(4)
    params = [numpy_helper.from_array(a.astype(np.float32), name) for a, name in (
        (rng.uniform(0.5, 1.5, 8), "gamma"), (rng.standard_normal(8), "beta"), (rng.standard_normal(8) * 0.1, "mean"),
        (rng.uniform(0.5, 1.5, 8), "var"))]
    bn = helper.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["normed"])
    relu = helper.make_node("Relu", ["normed"], ["act"])
    conv, inits = _conv3d("c", "act", "out", rng, 8, 16, (3, 3, 3))
    graph = _check(tmp_path, _model([bn, relu, conv], params + inits, (1, 8, 4, 7, 7), ["out"]))
    assert sum(n.op is Op.TRANSPOSE for n in fold_depth(graph).nodes) == 2  # the activation in, the output out


@pytest.mark.parametrize("group, batch", [(1, 1), (2, 1), (1, 2)])
def test_3d_convolutions_of_weights_computed_at_run_time_match_onnxruntime(tmp_path, group, batch):
    """Filters that are a graph input: reordered by a Transpose and a Reshape at run time, as the
    constant ones are when the model is built, on both paths (a clip of one without groups; the
    depth-major view's)."""
    conv = helper.make_node("Conv", ["x", "w"], ["out"], kernel_shape=[3, 3, 3], pads=[1] * 6, group=group)
    graph = helper.make_graph([conv], "video", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 5, 6, 6]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 4 // group, 3, 3, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    _check(tmp_path, onnx.shape_inference.infer_shapes(model))
