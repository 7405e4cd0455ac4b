"""5x5 convolutions of stride 2 as 3x3 ones of stride 1 over the input's phases: the weights, the
rewrite, where it applies, and that builds compute what the strided convolution does (numpy
reference; onnxruntime through the zoo's dilated block in the model tests)."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results, transposes
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for
from autosched.graph.passes.space_to_depth import phase_weights
from autosched.task import extract_tasks
from autosched.templates import get_template

RNG = np.random.default_rng(5)


def conv2d(x, w, stride=1, pad=0):
    """Cross-correlation, tap by tap: the reference the rewrite is checked against."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    (kh, kw), oh, ow = w.shape[2:], (x.shape[2] - w.shape[2]) // stride + 1, (x.shape[3] - w.shape[3]) // stride + 1
    return sum(np.einsum("nchw,oc->nohw", x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride], w[:, :, i, j])
               for i in range(kh) for j in range(kw))


def _strided(c=16, oc=32, hw=16, k=5, stride=2, pads=2, before=None, batch=1):
    """A strided convolution with a bias and a ReLU, after `before` ("dilated": a dilated 3x3
    convolution whose phases come back just to be split again) or nothing."""
    b = GraphBuilder("strided")
    x = b.input("x", (batch, c, hw, hw))
    if before == "dilated":
        wd = b.constant("wd", (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32))
        x = b.node(Op.CONV, [x, wd], name="dil", strides=(1, 1), pads=(2,) * 4, dilations=(2, 2), group=1)
    w = b.constant("w", (0.1 * RNG.standard_normal((oc, c, k, k))).astype(np.float32))
    bias = b.constant("b", RNG.standard_normal(oc).astype(np.float32))
    y = b.node(Op.CONV, [x, w, bias], name="down", strides=(stride,) * 2, pads=(pads,) * 4, dilations=(1, 1),
               group=1)
    b.output(b.node(Op.RELU, [y], name="act"))
    return b.build()


def test_the_phase_weights_compute_the_strided_convolution():
    """The 3x3 convolution of the phases, side by side as channels, with `phase_weights`, is the
    5x5 stride-2 convolution (numpy, no rewrite involved)."""
    x = RNG.standard_normal((1, 3, 12, 10)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32)
    phases = np.concatenate([x[:, :, a::2, b::2] for a in range(2) for b in range(2)], axis=1)
    got = conv2d(phases, phase_weights(w), pad=1)
    want = conv2d(x, w, stride=2, pad=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(phase_weights(w).reshape(4, 2, 2, 3, 3, 3)[:, 1, :, :, 2, :] == 0)  # phase 1 has no third row


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_strided_convolution_runs_over_its_phases_with_its_epilogue_in_place(lanes):
    graph = _strided()
    planned = optimize(graph, lanes)
    (conv,) = [n for n in planned.nodes if n.name == "down"]
    assert conv.attrs["strides"] == (1, 1) and conv.attrs["pads"] == (1, 1, 1, 1)
    assert planned.values[conv.inputs[0]].shape == (1, 4 * 16 // lanes, 8, 8, lanes)  # phases as channels
    assert planned.constants[conv.inputs[1]].shape == (32, 64, 3, 3)
    assert planned.values[conv.outputs[0]].shape == (1, 32 // lanes, 8, 8, lanes)  # the output as it was
    assert len(transposes(planned)) == 1
    same_results(graph, planned)


@pytest.mark.parametrize("case", [
    dict(hw=15),  # an odd image: the phases differ in size
    dict(hw=14),  # phases of 7x7, below Winograd's 8x8
    dict(c=4, oc=16),  # too few channels for Winograd: the direct kernel does 44% less
    dict(k=3, pads=1),  # 3x3 of stride 2: its phases make a 2x2 kernel, which Winograd does not take
    dict(pads=1),  # not "same": the phases' kernel would be off centre
    dict(stride=1),  # not strided
])
def test_where_winograd_would_not_take_the_phases_the_convolution_stays(case):
    planned = optimize(_strided(**case), 16)
    (conv,) = [n for n in planned.nodes if n.name == "down"]
    assert conv.attrs["strides"] == (case.get("stride", 2),) * 2
    assert transposes(planned) == []


def test_after_a_dilated_convolution_only_the_strided_one_moves_phases():
    """The dilated convolution runs per phase in its kernel, in place: the strided one's input
    phases are the only Transpose, with one image or two."""
    for batch in (1, 2):
        graph = _strided(c=32, oc=64, hw=32, before="dilated", batch=batch)
        planned = optimize(graph, 8)
        assert transposes(planned) == ["down/phase_depth"]
        same_results(graph, planned)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_matches_the_strided_convolution_and_its_fallback_is_winograd(target, tmp_path):
    graph = _strided()
    built_matches_reference(graph, tmp_path / "strided.so", target)
    tasks = extract_tasks(optimize_for(graph, target)).tasks
    (task,) = [t for t in tasks if t.op == "ConvNCHWc"]
    assert tuple(task.shapes[1]) == (32, 64, 3, 3)
    assert get_template("ConvNCHWc", "llvm").fallback(task, target)["algorithm"] != "direct"
