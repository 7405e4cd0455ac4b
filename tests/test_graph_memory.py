"""Static memory planning: live buffers never share bytes."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched import zoo
from autosched.frontend.onnx import import_model
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import fuse, optimize, plan_memory
from autosched.graph.passes.memory import ALIGNMENT


def _check_plan(graph, groups, plan):
    external = {v.name for v in (*graph.inputs, *graph.outputs)} | set(graph.constants)
    produced = {name for g in groups for name in g.outputs if name not in external}
    assert set(plan.buffers) == produced
    for index, group in enumerate(groups):
        for name in group.outputs:
            if name in plan.buffers:
                assert plan.buffers[name].first == index
        for name in group.inputs:
            name = plan.aliases.get(name, name)  # a Reshape that is no kernel reads its root's bytes
            if name in plan.buffers:
                assert plan.buffers[name].first < index <= plan.buffers[name].last
    for buffer in plan.buffers.values():
        assert buffer.offset % ALIGNMENT == 0 and buffer.size >= graph.values[buffer.name].nbytes
        assert buffer.offset + buffer.size <= plan.arena_size
    for a, b in itertools.combinations(plan.buffers.values(), 2):
        if a.overlaps_in_time(b):
            assert not a.overlaps_in_memory(b), (a, b)


def test_resnet18_plan_shares_memory_without_overlap():
    graph = optimize(import_model(zoo.resnet18(), source="resnet18"))
    groups = fuse(graph)
    plan = plan_memory(graph, groups)
    _check_plan(graph, groups, plan)
    total = sum(b.size for b in plan.buffers.values())
    assert plan.arena_size < total / 2
    # Two 64×112×112 fp32 activations must coexist (conv1 → maxpool); nothing forces more.
    assert plan.arena_size <= 2 * 64 * 112 * 112 * 4 + 64 * 56 * 56 * 4


def test_buffers_read_later_stay_alive():
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    keep = b.node(Op.SOFTMAX, [x], axis=1, name="keep")
    t = b.node(Op.TRANSPOSE, [keep], perm=(1, 0), name="t")
    u = b.node(Op.TRANSPOSE, [t], perm=(1, 0), name="u")
    b.output(b.node(Op.CONCAT, [u, keep], axis=0, name="out"))
    graph = b.build()
    groups = fuse(graph)
    plan = plan_memory(graph, groups)
    _check_plan(graph, groups, plan)
    assert (plan.buffers["keep"].first, plan.buffers["keep"].last) == (0, 3)
    assert not plan.buffers["keep"].overlaps_in_memory(plan.buffers["t"])
    assert not plan.buffers["keep"].overlaps_in_memory(plan.buffers["u"])


@st.composite
def _random_graphs(draw):
    b = GraphBuilder()
    values = [b.input("x", (draw(st.integers(1, 6)), 8))]
    shapes = {values[0]: b.values[values[0]].shape}
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["relu", "add", "concat", "slice", "softmax"]))
        v = draw(st.sampled_from(values))
        rows = shapes[v][0]
        if kind == "add":
            partners = [w for w in values if shapes[w] == shapes[v]]
            out = b.node(Op.ADD, [v, draw(st.sampled_from(partners))], name=f"n{i}")
        elif kind == "concat":
            out = b.node(Op.CONCAT, [v, draw(st.sampled_from(values))], axis=0, name=f"n{i}")
        elif kind == "slice" and rows > 1:
            out = b.node(Op.SLICE, [v], starts=(0, 0), ends=(rows // 2, 8), steps=(1, 1), name=f"n{i}")
        elif kind == "softmax":
            out = b.node(Op.SOFTMAX, [v], axis=1, name=f"n{i}")
        else:
            out = b.node(Op.RELU, [v], name=f"n{i}")
        values.append(out)
        shapes[out] = b.values[out].shape
    b.output(values[-1])
    return b.build()


@settings(max_examples=60, deadline=None)
@given(_random_graphs())
def test_random_graphs_never_overlap_live_buffers(graph):
    graph = optimize(graph)
    groups = fuse(graph)
    _check_plan(graph, groups, plan_memory(graph, groups))


def test_empty_plan():
    b = GraphBuilder()
    b.output(b.node(Op.RELU, [b.input("x", (2,))]))
    graph = b.build()
    plan = plan_memory(graph, fuse(graph))
    assert plan.arena_size == 0 and not plan.buffers


def test_a_reshape_of_an_intermediate_is_no_kernel_and_keeps_its_root_alive(tmp_path):
    """Reshapes of an intermediate (and of such a Reshape) rename its bytes: no group, its readers
    read the root's buffer, which lives until they did. A Reshape of a graph input, or into a
    graph output, keeps its copy (those bytes live outside the arena). The build runs as numpy."""
    from autosched.compile.model import build_model
    from autosched.graph.reference import random_inputs, run_graph
    from autosched.runtime import load_model
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    s = b.node(Op.SOFTMAX, [x], axis=1, name="s")
    r = b.node(Op.RESHAPE, [s], shape=(2, 16), name="r")
    q = b.node(Op.RESHAPE, [r], shape=(32,), name="q")
    xi = b.node(Op.RESHAPE, [x], shape=(32,), name="xi")
    mid = b.node(Op.ADD, [xi, xi], name="mid")
    b.output(b.node(Op.ADD, [q, mid], name="out"))
    b.output(b.node(Op.RESHAPE, [s], shape=(8, 4), name="o2"))
    graph = b.build()
    groups = fuse(graph)
    plan = plan_memory(graph, groups)
    _check_plan(graph, groups, plan)
    assert plan.aliases == {"r": "s", "q": "s"}
    assert {g.name for g in groups} == {"s", "xi", "mid", "o2"}  # out is mid's epilogue
    reader = next(i for i, g in enumerate(groups) if "q" in g.inputs)
    assert plan.buffers["s"].last >= reader and plan.views["q"] is plan.buffers["s"]
    model = load_model(build_model(graph, tmp_path / "m.so", "llvm").library)
    try:
        inputs = random_inputs(graph.inputs, seed=0)
        got, want = model.run(inputs), run_graph(graph, inputs)
        for name in ("out", "o2"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)
    finally:
        model.close()
