"""PET's corrected partially equivalent transformations (graph/substitutions/pet.py).

The region analysis and the random-integer checks must find exactly the output rows (or
columns) where the uncorrected "spatial to batch" program differs from the original, judged
here on float inputs through the numpy references; the corrected program must equal the
original (references, and a real gcc build); a correction that misses a region is never
offered; and the substitution search keeps a transformation only where the costs say so:
never on rooflines, and where a real SQLite database's records say the transformed kernels
are faster."""
import numpy as np
import pytest
from db_helpers import HERE, measured

from autosched.compile.model import build_model
from autosched.database import Database
from autosched.database.queries import space_of
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize
from autosched.graph.reference import random_inputs, run_graph
from autosched.graph.substitutions import pet
from autosched.runtime import load_model
from autosched.substitution import substitute
from autosched.target import Target
from autosched.task import extract_tasks

RNG = np.random.default_rng(0)


def conv_model(h=8, w=8, c=4, f=6, k=3, s=1, p=1, d=1, g=1):
    """Relu, a convolution with a bias, Relu: the convolution reads a computed value, as in a model."""
    b = GraphBuilder()
    x = b.node(Op.RELU, [b.input("x", (1, c, h, w))])
    weight = b.constant("w", RNG.standard_normal((f, c // g, k, k)).astype(np.float32))
    bias = b.constant("b", RNG.standard_normal(f).astype(np.float32))
    y = b.node(Op.CONV, [x, weight, bias], strides=(s, s), dilations=(d, d), pads=(p, p, p, p), group=g)
    b.output(b.node(Op.RELU, [y]))
    return b.build()


CASES = {
    "3x3": {}, "5x5": dict(k=5, p=2, h=12, w=12), "stride 2": dict(s=2, h=16, w=16), "dilated": dict(d=2, p=2, h=12, w=12),
    "grouped": dict(g=2), "1x1": dict(k=1, p=0), "no padding": dict(p=0, h=12, w=12),
}


def _conv(graph):
    return next(n for n in graph.nodes if n.op is Op.CONV)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("t", pet.TRANSFORMS, ids=lambda t: t.name)
def test_the_regions_found_wrong_are_where_the_partial_program_is_wrong_and_the_correction_is_exact(case, t):
    graph = conv_model(**CASES[case])
    node = _conv(graph)
    fixed = pet.correct(graph, node, t)
    if fixed is None:
        assert not pet.applies(graph, node, t)
        pytest.skip(f"{t.name} does not cut this convolution into whole strips")
    feeds = random_inputs(graph.inputs, 1)
    out = graph.outputs[0].name
    want = run_graph(graph, feeds)[out]
    diff = np.abs(run_graph(pet.partial(graph, node, t), feeds)[out] - want)
    rows = set(np.nonzero(diff.max(axis=tuple(i for i in range(4) if i != t.axis)) > 1e-5)[0].tolist())
    assert rows == {o for lo, hi in fixed.wrong for o in range(lo, hi)}
    np.testing.assert_allclose(run_graph(fixed.graph, feeds)[out], want, rtol=1e-5, atol=1e-5)
    assert fixed.regions >= 2 * len(fixed.wrong) + (1 if not fixed.wrong else 0)


def test_corrections_of_one_shape_are_one_kernel():
    """Four strips leave three cuts; their three corrections are one batched convolution."""
    graph = conv_model(h=16, w=16)
    fixed = pet.correct(graph, _conv(graph), pet.SpatialSplit(2, 4))
    assert fixed.wrong == ((3, 5), (7, 9), (11, 13))
    assert [n.op for n in fixed.graph.nodes].count(Op.CONV) == 2  # the batched strips and the corrections
    assert 0 < fixed.correction_flops < 0.4 * 2 * 16 * 16 * 6 * 4 * 9


def test_a_correction_that_misses_a_region_is_never_offered(monkeypatch):
    graph = conv_model()
    monkeypatch.setattr(pet, "_merge", lambda intervals: [])  # "nothing to correct"
    assert pet.correct(graph, _conv(graph), pet.SpatialSplit(2, 2)) is None


def test_the_point_evaluator_computes_the_convolution_modulo_the_prime():
    graph = conv_model(h=5, w=6, c=3, f=4, s=2, g=1)
    node = _conv(graph)
    rng = np.random.default_rng(1)
    env = {name: rng.integers(0, 50, graph.values[name].shape) for name in node.inputs}
    x, w, b = (env[name] for name in node.inputs)
    want = run_graph_int(x, w, b, stride=2, pad=1)
    idx = np.indices(want.shape)
    got = pet.PointEvaluator(graph, env).gather(node.outputs[0], tuple(idx))
    np.testing.assert_array_equal(got, want % pet.PRIME)


def run_graph_int(x, w, b, stride, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            window = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("ncij,fcij->nf", window, w) + b
    return out


def _build_and_compare(tmp_path, target, emulate=False):
    """A ResNet-like convolution in four strips, corrected, built for `target` and run against the
    reference of the original."""
    graph = conv_model(h=16, w=16, c=8, f=8)
    fixed = pet.correct(graph, _conv(graph), pet.SpatialSplit(2, 4))
    files = build_model(fixed.graph, tmp_path / "pet.so", target, emulate=emulate)
    feeds = random_inputs(graph.inputs, 2)
    model = load_model(files.library)
    try:
        got = model.run(feeds)[graph.outputs[0].name]
    finally:
        model.close()
    np.testing.assert_allclose(got, run_graph(graph, feeds)[graph.outputs[0].name], rtol=1e-4, atol=1e-4)


def test_a_corrected_program_builds_and_runs_exactly(tmp_path, cpu_target):
    _build_and_compare(tmp_path, cpu_target)


def test_a_corrected_program_builds_for_cuda_and_runs_exactly_in_the_emulation(tmp_path):
    """The CUDA build's kernels (strips, batched corrections, copies) run in the CPU emulation of
    the CUDA execution model: there is no GPU here to run them on."""
    _build_and_compare(tmp_path, Target.parse("cuda -arch=sm_80"), emulate=True)


def test_the_search_keeps_a_transformation_only_where_the_records_say_it_pays(tmp_path):
    """By rooflines the corrected program costs more (its copies and corrections): not kept, but
    costed and reported. With a record for every tunable task of both programs, and the
    transformed convolutions faster in them, it is kept (its copies are still estimated, scaled
    to the records), and what it computes is unchanged."""
    graph = conv_model(h=32, w=32, c=64, f=64)
    plain, report = substitute(graph, HERE)
    assert report.applied == () and report.corrected > 0
    assert "PET transformations corrected and verified" in report.summary()

    fixed = pet.correct(graph, _conv(graph), pet.SpatialSplit(2, 2))
    db = Database(str(tmp_path / "tuning.db"))
    before = {t.key for t in extract_tasks(optimize(graph, HERE.layout_lanes)).tasks}
    for task in extract_tasks(optimize(fixed.graph, HERE.layout_lanes)).tasks:
        if space_of(task, HERE) is not None:  # the tunable ones: the convolutions
            db.commit(measured(task, HERE, [2e-3 if task.key in before else 2e-4]))
    for task in extract_tasks(optimize(graph, HERE.layout_lanes)).tasks:
        if space_of(task, HERE) is not None:
            db.commit(measured(task, HERE, [2e-3]))
    rewritten, report = substitute(graph, HERE, db)
    db.close()
    assert report.applied and report.applied[0].startswith("pet-"), report.summary()
    feeds = random_inputs(graph.inputs, 3)
    out = graph.outputs[0].name
    np.testing.assert_allclose(run_graph(rewritten, feeds)[out], run_graph(graph, feeds)[out], rtol=1e-5, atol=1e-5)
