"""Dilated 3x3 convolutions in a model: the graph keeps them as they are (Winograd cuts its
tiles per phase in the kernel, `autosched.ops.winograd`), the untuned build takes Winograd where
the phases are large enough, and builds compute what the dilated convolution does (numpy
reference; onnxruntime through the zoo's dilated block in the model tests)."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, transposes
from isa import ISAS, RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for
from autosched.task import extract_tasks
from autosched.templates import get_template

RNG = np.random.default_rng(3)


def _dilated(c=64, hw=16, d=2, pads=None, residual=False):
    """A dilated convolution with a bias and a ReLU (and, with `residual`, a residual Add
    before the ReLU), then an ordinary 3x3 convolution."""
    b = GraphBuilder("dilated")
    x = b.input("x", (1, c, hw, hw))
    w = b.constant("w", (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32))
    bias = b.constant("b", RNG.standard_normal(c).astype(np.float32))
    pad = d if pads is None else pads
    y = b.node(Op.CONV, [x, w, bias], name="dil", strides=(1, 1), pads=(pad,) * 4, dilations=(d, d), group=1)
    if residual:
        y = b.node(Op.ADD, [y, x], name="res")
    y = b.node(Op.RELU, [y], name="act")
    w2 = b.constant("w2", (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32))
    b.output(b.node(Op.CONV, [y, w2], name="next", strides=(1, 1), pads=(1,) * 4, dilations=(1, 1), group=1))
    return b.build()


def _dilated_task(graph, target):
    tasks = extract_tasks(optimize_for(graph, target)).tasks
    return next(t for t in tasks if t.op == "ConvNCHWc" and tuple(dict(t.attrs)["dilations"]) != (1, 1))


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_dilated_convolution_stays_one_blocked_kernel(lanes):
    planned = optimize(_dilated(), lanes)
    (conv,) = [n for n in planned.nodes if n.name == "dil"]
    assert conv.op is Op.CONV_NCHWC and conv.attrs["dilations"] == (2, 2)
    assert planned.values[conv.inputs[0]].shape == (1, 64 // lanes, 16, 16, lanes)
    assert transposes(planned) == []


CASES = {
    "same": dict(),
    "uneven phases": dict(hw=17),  # phases of 9 and 8 rows
    "not same": dict(pads=1, hw=18),  # 16x16 outputs
    "dilation 3": dict(d=3, hw=26),
    "residual": dict(residual=True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_matches_the_dilated_convolution_and_its_fallback_is_winograd_f4(case, target, tmp_path):
    """Phases of 8 and 9 take F(4), where an undilated map of their size takes F(2) (`uses_f4`:
    d² phases share each transformed weight)."""
    graph = _dilated(**case)
    built_matches_reference(graph, tmp_path / "dilated.so", target)
    assert get_template("ConvNCHWc", "llvm").fallback(_dilated_task(graph, target), target)["algorithm"] == "winograd_4"


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_undilated_maps_below_16_keep_f2(isa):
    """The control of `uses_f4`: an undilated 14x14 map ran F(2) in 0.72 ms, F(4) in 0.87 (AVX2);
    the choice is the same for every ISA's fallback."""
    target = ISAS[isa][0]
    task = _dilated_task(_dilated(hw=28, d=2, pads=2), target)
    plain = next(t for t in extract_tasks(optimize_for(_dilated(hw=14, d=1, pads=1), target)).tasks if t.op == "ConvNCHWc")
    template = get_template("ConvNCHWc", "llvm")
    assert (template.fallback(task, target)["algorithm"], template.fallback(plain, target)["algorithm"]) == \
        ("winograd_4", "winograd_2")


@pytest.mark.parametrize("case", [dict(c=16), dict(hw=14)], ids=["16 channels", "phases of 7x7"])
def test_where_winograd_would_not_pay_the_fallback_is_direct(case):
    """Too few channels (the direct kernel is at the peak already), or phases below Winograd's 8x8."""
    target = RUN_TARGETS[0]
    task = _dilated_task(_dilated(**case), target)
    assert get_template("ConvNCHWc", "llvm").fallback(task, target)["algorithm"] == "direct"
