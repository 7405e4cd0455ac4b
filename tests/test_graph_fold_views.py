"""Folding Reshape/Transpose chains into MatMul operand views: the graph alone (numpy reference
equality), and the compiled task against the unfolded graph's numpy results."""
import numpy as np
import pytest
from graph_helpers import ops, same_results

from autosched.compile.kernel import build_kernel
from autosched.compile.model import default_kernel
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import fold_views, optimize
from autosched.graph.reference import random_inputs, run_graph
from autosched.graph.views import VIEWS_ATTR, keeps_rows, operand_views, view_shape
from autosched.task import extract_tasks, task_from_key

RNG = np.random.default_rng(0)


def _attention(seq=6, heads=2, dim=4, softmax=True):
    """BERT's self-attention core: split heads, Q·Kᵀ, softmax, ·V, merge heads, output dense."""
    b = GraphBuilder()
    width = heads * dim

    def split(name, perm):
        x = b.node(Op.RESHAPE, [b.input(name, (1, seq, width))], shape=(1, seq, heads, dim))
        return b.node(Op.TRANSPOSE, [x], perm=perm)

    scores = b.node(Op.MATMUL, [split("q", (0, 2, 1, 3)), split("k", (0, 2, 3, 1))])
    probs = b.node(Op.SOFTMAX, [scores], axis=-1) if softmax else scores
    context = b.node(Op.MATMUL, [probs, split("v", (0, 2, 1, 3))])
    merged = b.node(Op.RESHAPE, [b.node(Op.TRANSPOSE, [context], perm=(0, 2, 1, 3))], shape=(1, seq, width))
    w = b.constant("w", RNG.standard_normal((width, width)).astype(np.float32))
    b.output(b.node(Op.MATMUL, [merged, w]))
    return b.build()


def test_attention_copies_fold_into_its_matmuls():
    """Head splits fold into the attention MatMuls; the merge before the output dense stays,
    since the dense reads its activation in place (a view would make it pack it)."""
    graph = _attention()
    folded = fold_views(graph)
    assert ops(folded) == [Op.MATMUL, Op.SOFTMAX, Op.MATMUL, Op.TRANSPOSE, Op.RESHAPE, Op.MATMUL]
    assert VIEWS_ATTR not in folded.nodes[-1].attrs
    key_view = operand_views(folded.nodes[0].attrs)[1]
    assert key_view == (("reshape", (1, 6, 2, 4)), ("transpose", (0, 2, 3, 1)))
    same_results(graph, folded)


def test_the_standard_pipeline_folds_views():
    assert ops(optimize(_attention())).count(Op.TRANSPOSE) == 1


def test_a_chain_with_another_reader_stays():
    b = GraphBuilder()
    t = b.node(Op.TRANSPOSE, [b.input("x", (3, 4))], perm=(1, 0))
    b.output(b.node(Op.MATMUL, [t, b.input("y", (3, 5))]))
    b.output(b.node(Op.RELU, [t]))
    graph = b.build()
    assert fold_views(graph) is graph


def test_a_chain_that_is_a_graph_output_stays():
    b = GraphBuilder()
    t = b.node(Op.TRANSPOSE, [b.input("x", (3, 4))], perm=(1, 0))
    b.output(t)
    b.output(b.node(Op.MATMUL, [t, b.input("y", (3, 5))]))
    graph = b.build()
    assert ops(fold_views(graph)) == ops(graph)


def test_constant_operands_are_not_viewed():
    b = GraphBuilder()
    w = b.node(Op.TRANSPOSE, [b.constant("w", RNG.standard_normal((5, 4)).astype(np.float32))], perm=(1, 0))
    b.output(b.node(Op.MATMUL, [b.input("x", (3, 4)), w]))
    graph = b.build()
    assert VIEWS_ATTR not in fold_views(graph).nodes[-1].attrs


def test_views_survive_the_task_key():
    task = next(t for t in extract_tasks(fold_views(_attention())).tasks if VIEWS_ATTR in dict(t.attrs))
    again = task_from_key(task.key)
    assert again.attrs == task.attrs and operand_views(again.attrs) == operand_views(task.attrs)


@pytest.mark.parametrize("view, rows", [
    ((("reshape", (1, 6, 2, 4)), ("transpose", (0, 2, 1, 3))), True),   # attention's query
    ((("reshape", (1, 6, 2, 4)), ("transpose", (0, 2, 3, 1))), False),  # attention's key
    ((("reshape", (1, 48)),), False),
    ((), True),
])
def test_views_that_keep_rows_contiguous(view, rows):
    assert keeps_rows((1, 6, 8), view) is rows


def test_view_shape_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="reshape"):
        view_shape((2, 3), (("reshape", (4, 2)),))
    with pytest.raises(ValueError, match="permutation"):
        view_shape((2, 3), (("transpose", (0, 0)),))


def _random_graphs(n: int, seed: int):
    """(seq, heads, dim, perm of the second operand, whether the first is viewed too)."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 12)), int(rng.integers(1, 4)), int(rng.choice([1, 3, 4, 8, 16])),
             [(0, 2, 3, 1), (0, 2, 1, 3)][int(rng.integers(0, 2))], ["none", "rows", "columns"][int(rng.integers(0, 3))])
            for _ in range(n)]


@pytest.mark.parametrize("seq, heads, dim, perm, view_a", _random_graphs(20, 7))
def test_folded_matmul_compiles_to_the_unfolded_results(seq, heads, dim, perm, view_a, cpu_target):
    """Random attention-shaped MatMuls: the folded graph's task, built with the default schedule
    for each ISA, against numpy on the unfolded graph."""
    b = GraphBuilder()
    x = b.node(Op.RESHAPE, [b.input("x", (1, seq, heads * dim))], shape=(1, seq, heads, dim))
    x = b.node(Op.TRANSPOSE, [x], perm=perm)
    inner = x if perm == (0, 2, 3, 1) else None
    k, n = (dim, seq) if inner is not None else (seq, dim)
    if view_a == "columns":  # packed: the view's rows are strided columns of the source
        a = b.node(Op.RESHAPE, [b.input("a", (1, k, heads * seq))], shape=(1, k, heads, seq))
        a = b.node(Op.TRANSPOSE, [a], perm=(0, 2, 3, 1))  # [1, heads, seq, k]
    elif view_a == "rows":  # read in place: a head split, rows contiguous along k
        a = b.node(Op.RESHAPE, [b.input("a", (1, seq, heads * k))], shape=(1, seq, heads, k))
        a = b.node(Op.TRANSPOSE, [a], perm=(0, 2, 1, 3))  # [1, heads, seq, k]
    else:
        a = b.input("a", (1, heads, seq, k))
    b.output(b.node(Op.MATMUL, [a, x]))
    graph = b.build()
    folded = fold_views(graph)
    assert Op.TRANSPOSE not in ops(folded)
    (task,) = extract_tasks(folded).tasks
    feeds = random_inputs(graph.inputs, 1)
    (want,) = run_graph(graph, feeds).values()
    sched, args = default_kernel(task, cpu_target)
    kernel = build_kernel(sched, args, "k", cpu_target)
    got = np.zeros(want.shape, np.float32)
    kernel(*[feeds[name] for name in folded.nodes[0].inputs], got)
    assert n == want.shape[-1]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _merged_attention(seq=6, heads=2, dim=4):
    """Attention after graph substitutions merged its projections: one [1, seq, 3·width] tensor
    split into Q and K (a part of a part) and V, each then split into heads."""
    b = GraphBuilder()
    width = heads * dim
    qk = b.node(Op.SPLIT, [b.input("qkv", (1, seq, 3 * width))], outputs=2, axis=2, split=(2 * width, width))
    v = f"{qk.rsplit(':', 1)[0]}:1"
    q = b.node(Op.SPLIT, [qk], outputs=2, axis=2, split=(width, width))
    k = f"{q.rsplit(':', 1)[0]}:1"

    def heads_of(x, perm):
        return b.node(Op.TRANSPOSE, [b.node(Op.RESHAPE, [x], shape=(1, seq, heads, dim))], perm=perm)

    scores = b.node(Op.MATMUL, [heads_of(q, (0, 2, 1, 3)), heads_of(k, (0, 2, 3, 1))])
    b.output(scores)
    b.output(b.node(Op.MATMUL, [b.node(Op.SOFTMAX, [scores], axis=-1), heads_of(v, (0, 2, 1, 3))]))
    return b.build()


def test_split_parts_fold_into_their_matmuls_as_slices():
    """Each part of a merged projection is read where the merged MatMul wrote it: the Splits go,
    a part of a part is one slice of the source, and the results are unchanged."""
    graph = _merged_attention()
    folded = fold_views(graph)
    assert ops(folded) == [Op.MATMUL, Op.SOFTMAX, Op.MATMUL]
    q_view, k_view = operand_views(folded.nodes[0].attrs)
    assert q_view[0] == ("slice", (2, 0, 8)) and k_view[0] == ("slice", (2, 8, 16))
    assert operand_views(folded.nodes[2].attrs)[1][0] == ("slice", (2, 16, 24))
    assert folded.nodes[0].inputs == ("qkv", "qkv") and folded.nodes[2].inputs[1] == "qkv"
    same_results(graph, folded)


def test_a_split_with_another_reader_stays():
    b = GraphBuilder()
    first = b.node(Op.SPLIT, [b.input("x", (4, 6))], outputs=2, axis=1, split=(2, 4))
    b.output(b.node(Op.MATMUL, [first, b.input("y", (2, 3))]))
    b.output(b.node(Op.RELU, [f"{first.rsplit(':', 1)[0]}:1"]))
    graph = b.build()
    folded = fold_views(graph)
    assert Op.SPLIT in ops(folded)
    same_results(graph, folded)


def test_slice_views_keep_rows_and_refuse_what_does_not_fit():
    view = (("slice", (2, 8, 16)), ("reshape", (1, 6, 2, 4)), ("transpose", (0, 2, 1, 3)))
    assert view_shape((1, 6, 24), view) == (1, 2, 6, 4)
    assert keeps_rows((1, 6, 24), view)
    with pytest.raises(ValueError, match="slice"):
        view_shape((1, 6, 24), (("slice", (2, 16, 32)),))


@pytest.mark.parametrize("seq, heads, dim", [(6, 2, 4), (5, 3, 8), (1, 1, 16)])
def test_sliced_matmuls_compile_to_the_unfolded_results(seq, heads, dim, cpu_target):
    """Both attention products of a merged projection, built with the default schedule for each
    ISA, against numpy on the graph with its Splits, Reshapes and Transposes."""
    graph = _merged_attention(seq, heads, dim)
    folded = fold_views(graph)
    feeds = random_inputs(graph.inputs, 1)
    want = run_graph(graph, feeds, all_values=True)
    for node in (folded.nodes[0], folded.nodes[2]):
        b = GraphBuilder()
        operands = [b.input(f"in{i}", folded.values[name].shape) for i, name in enumerate(node.inputs)]
        b.output(b.node(Op.MATMUL, operands, **node.attrs))
        (task,) = extract_tasks(b.build()).tasks
        sched, args = default_kernel(task, cpu_target)
        kernel = build_kernel(sched, args, "k", cpu_target)
        got = np.zeros(folded.values[node.outputs[0]].shape, np.float32)
        kernel(*[want[name] for name in node.inputs], got)
        np.testing.assert_allclose(got, want[node.outputs[0]], rtol=1e-4, atol=1e-5)
