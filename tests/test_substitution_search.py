"""The substitution optimizer: rules matched and applied in real graphs, TASO's search against
the target's costs, its fallbacks, and the commands that run it.

A SqueezeNet fire module (a 1x1 squeeze, then a 1x1 and a 3x3 expand of the same input,
concatenated) must come out with its two expand convolutions merged into one through an
enlarged, concatenated kernel, computing the same outputs (numpy reference here, onnxruntime
through `check`). Parallel matrix products of one input merge into one GEMM plus a split
when the cost says so."""
import logging

import numpy as np
import pytest
from graph_helpers import same_results
from onnx import TensorProto, helper, numpy_helper

from autosched import zoo
from autosched.cli import main
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for
from autosched.graph.passes.substitute import search
from autosched.graph.substitutions.apply import Matcher, apply, directions, unify
from autosched.graph.substitutions.rules import SHIPPED, Rule, load_rules
from autosched.graph.substitutions.terms import parse_shape, parse_term, subterms, symbol
from autosched.graph.views import operand_views
from autosched.graph_cost import roofline
from autosched.substitution import _rules, constants_last, prepare, substitute
from autosched.target import Target
from autosched.task import extract_tasks

LLVM = Target.parse("llvm")


def _fire(rng, x, c, s, e, hw, prefix=""):
    """ONNX nodes and weights of a fire module reading `x`: squeeze to s, expand to e + e."""
    nodes, weights = [], []

    def conv(inp, name, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        weights.extend([numpy_helper.from_array(w, f"{prefix}{name}.w"), numpy_helper.from_array(b, f"{prefix}{name}.b")])
        nodes.append(helper.make_node("Conv", [inp, f"{prefix}{name}.w", f"{prefix}{name}.b"], [f"{prefix}{name}"],
                                      pads=[k // 2] * 4))
        nodes.append(helper.make_node("Relu", [f"{prefix}{name}"], [f"{prefix}{name}.relu"]))
        return f"{prefix}{name}.relu"

    squeezed = conv(x, "squeeze", c, s, 1)
    e1, e3 = conv(squeezed, "expand1x1", s, e, 1), conv(squeezed, "expand3x3", s, e, 3)
    nodes.append(helper.make_node("Concat", [e1, e3], [f"{prefix}out"], axis=1))
    return nodes, weights, f"{prefix}out"


def fire_model(c=16, s=8, e=16, hw=8):
    rng = np.random.default_rng(0)
    nodes, weights, out = _fire(rng, "x", c, s, e, hw)
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def fire_path(tmp_path):
    path = tmp_path / "fire.onnx"
    path.write_bytes(fire_model().SerializeToString())
    return path


def _load(path):
    from autosched.frontend.onnx import load_onnx
    return load_onnx(path, {})


def test_the_fire_module_expands_merge_into_one_convolution(fire_path):
    graph = _load(fire_path)
    rewritten, report = substitute(graph, LLVM)
    assert report.applied and report.cost_after < report.cost_before
    assert [n.op for n in graph.nodes].count(Op.CONV) == 3
    assert [n.op for n in rewritten.nodes].count(Op.CONV) == 2  # the squeeze, and both expands as one
    assert Op.CONCAT not in [n.op for n in prepare(rewritten).nodes if n.inputs[0] not in rewritten.constants]
    same_results(graph, rewritten)


def test_the_search_is_deterministic_and_never_keeps_a_costlier_graph(fire_path):
    graph = _load(fire_path)
    first, a = substitute(graph, LLVM)
    second, b = substitute(graph, LLVM)
    assert a.applied == b.applied and [n.op for n in first.nodes] == [n.op for n in second.nodes]
    # a graph nothing can improve comes back as it was
    builder = GraphBuilder()
    x = builder.input("x", (4, 4))
    builder.output(builder.node(Op.RELU, [x]))
    plain = builder.build()
    same, report = substitute(plain, LLVM)
    assert same is plain and not report.applied and "none lowers" in report.summary()


def _qkv(m=32, k=48):
    rng = np.random.default_rng(1)
    b = GraphBuilder("qkv")
    x = b.input("x", (m, k))
    w = [b.constant(f"w{i}", (rng.standard_normal((k, k)) * 0.1).astype(np.float32)) for i in range(3)]
    q, kk, v = (b.node(Op.MATMUL, [x, wi]) for wi in w)
    scores = b.node(Op.MATMUL, [q, b.node(Op.TRANSPOSE, [kk], perm=(1, 0))])
    b.output(b.node(Op.MATMUL, [b.node(Op.SOFTMAX, [scores], axis=-1), v]))
    return b.build()


def _recurrence(steps=4, width=16):
    """An unrolled recurrent cell: each step's input and state projected by weights every step
    shares, a scalar gain every step shares, the state carried to the next step."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("recurrence")
    u, w = (b.constant(n, (rng.standard_normal((width, width)) * 0.1).astype(np.float32)) for n in ("u", "w"))
    gain = b.constant("gain", np.float32(0.5))
    h = b.input("h0", (1, width))
    for t in range(steps):
        x = b.input(f"x{t}", (1, width))
        z = b.node(Op.ADD, [b.node(Op.MATMUL, [x, u]), b.node(Op.MATMUL, [h, w])])
        h = b.node(Op.MUL, [b.node(Op.TANH, [z]), gain])
        h = b.node(Op.MUL, [h, h]) if t == 1 else h
    b.output(h)
    return b.build()


def test_parallel_projections_of_one_input_merge_into_one_gemm():
    """With a cost of one per MatMul reading a graph input, the search merges the Q, K and V
    projections step by step (two two-way merges) into one MatMul on concatenated weights."""
    graph = _qkv()
    rules = [d for d in directions(load_rules(SHIPPED).rules)]

    def cost(g):
        return sum(1.0 for n in g.nodes if n.op is Op.MATMUL) + 0.01 * len(g.nodes)

    result = search(prepare(graph), rules, cost, budget_s=120, max_graphs=300)
    matmuls = [n for n in result.graph.nodes if n.op is Op.MATMUL]
    assert len(matmuls) == 3  # one projection for all three, and the two attention products
    assert result.graph.values[matmuls[0].inputs[1]].shape == (48, 144) or any(
        n.op is Op.CONCAT for n in result.graph.nodes)
    same_results(graph, result.graph)


def _linear_qkv(m=32, k=48):
    """Q, K and V as exporters write linear layers: Gemm with a [out, in] weight and a bias."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("linear_qkv")
    x = b.input("x", (m, k))
    q, kk, v = (b.node(Op.GEMM, [x, b.constant(f"w{i}", (rng.standard_normal((k, k)) * 0.1).astype(np.float32)),
                                 b.constant(f"b{i}", (rng.standard_normal(k) * 0.1).astype(np.float32))],
                       alpha=1.0, beta=1.0, transA=0, transB=1) for i in range(3))
    scores = b.node(Op.MATMUL, [q, b.node(Op.TRANSPOSE, [kk], perm=(1, 0))])
    b.output(b.node(Op.MATMUL, [b.node(Op.SOFTMAX, [scores], axis=-1), v]))
    return b.build()


def test_exported_linear_projections_merge_into_one_gemm_read_in_place():
    """The linear domain's rule twice: one Gemm on stacked weights and concatenated biases, its
    parts read by the attention MatMuls as slices (no Split kernel), the same results."""
    graph = _linear_qkv()
    rewritten, report = substitute(graph, LLVM)
    assert len(report.applied) == 2 and all(r.startswith("linear-") for r in report.applied), report.summary()
    tasks = extract_tasks(optimize_for(rewritten, LLVM)).tasks
    assert [t.shapes for t in tasks if t.op == "Gemm"] == [((32, 48), (144, 48), (144,))]
    assert "Split" not in [t.op for t in tasks]
    same_results(graph, rewritten)


def _torch_qkv(m=64, k=96):
    """Q, K and V as PyTorch exports a Linear: MatMul on a [in, out] weight, then the bias added
    first (`Add(bias, MatMul(x, W))`)."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("torch_qkv")
    x = b.input("x", (1, m, k))
    q, kk, v = (b.node(Op.ADD, [b.constant(f"b{i}", (rng.standard_normal(k) * 0.1).astype(np.float32)),
                               b.node(Op.MATMUL, [x, b.constant(f"w{i}", (rng.standard_normal((k, k)) * 0.1)
                                                                .astype(np.float32))])]) for i in range(3))
    scores = b.node(Op.MATMUL, [q, b.node(Op.TRANSPOSE, [kk], perm=(0, 2, 1))])
    b.output(b.node(Op.MATMUL, [b.node(Op.SOFTMAX, [scores], axis=-1), v]))
    return b.build()


def test_constants_move_last_in_adds_and_muls_only():
    """A constant first and a computed value second swap; two constants, two computed values
    and a Sub (not commutative) stay as written."""
    b = GraphBuilder("order")
    x = b.input("x", (4, 8))
    c = b.constant("c", np.ones(8, np.float32))
    added = b.node(Op.ADD, [c, x])
    both = b.node(Op.MUL, [c, c])
    b.output(b.node(Op.SUB, [c, b.node(Op.MUL, [added, b.node(Op.ADD, [x, both])])]))
    graph = b.build()
    before = [n.inputs for n in graph.nodes]
    after = [n.inputs for n in constants_last(graph).nodes]
    assert [n.op for n in graph.nodes] == [Op.ADD, Op.MUL, Op.ADD, Op.MUL, Op.SUB]
    assert after == [(x, "c"), *before[1:]]
    same_results(graph, constants_last(graph))


def test_projections_exported_with_the_bias_first_merge():
    """The rules spell a bias second; PyTorch's exporter writes it first, and Hugging Face
    transformers' Q, K and V projections never merged until `prepare` put constants last."""
    graph = _torch_qkv()
    rewritten, report = substitute(graph, LLVM)
    assert report.applied.count("dense-0050") == 2, report.summary()
    tasks = extract_tasks(optimize_for(rewritten, LLVM)).tasks
    assert [t.shapes for t in tasks if t.op == "MatMul" and len(t.shapes[1]) == 2] == [((1, 64, 96), (96, 288))]
    same_results(graph, rewritten)


def test_the_graph_a_tune_measured_is_the_graph_built(tmp_path):
    """A session in the database that tuned the unmerged projections keeps them unmerged, though
    the search alone merges them: a search re-run on a tune's records must not build a graph of
    tasks the tune never measured. Without that session it merges, as above."""
    from autosched.database import Database, tasks_digest
    graph = _linear_qkv()
    merged, report = substitute(graph, LLVM)
    assert report.applied and not report.tuned
    db = Database(tmp_path / "t.db")
    try:
        tuned = extract_tasks(optimize_for(prepare(graph), LLVM)).tasks
        db.start_session("qkv.onnx", LLVM, 100, tasks_digest(t.key for t in tuned))
        kept, report = substitute(graph, LLVM, db)
        assert not report.applied and report.tuned and "the graph a tune in the database measured" in report.summary()
        assert [t.key for t in extract_tasks(optimize_for(kept, LLVM)).tasks] == [t.key for t in tuned]
        db.start_session("qkv.onnx", LLVM, 100, tasks_digest(  # a later tune of the merged graph wins
            t.key for t in extract_tasks(optimize_for(merged, LLVM)).tasks))
        again, report = substitute(graph, LLVM, db)
        assert report.applied and report.tuned
    finally:
        db.close()


def test_bert_projections_merge_into_one_matmul_whose_parts_are_read_in_place(tmp_path, capsys):
    """The zoo's BERT layer, small: the search merges its three biased Q, K and V projections
    (the dense rule twice) into one MatMul on concatenated weights and biases; the build reads
    each part where that MatMul wrote it (no Split kernel: the parts are slices in the attention
    MatMuls' operand views), and `check` matches onnxruntime."""
    path = tmp_path / "bert.onnx"
    path.write_bytes(zoo.bert_layer(seq=16, hidden=64, heads=4).SerializeToString())
    graph, report = substitute(_load(path), LLVM)
    assert len(report.applied) == 2 and all(r.startswith("dense-") for r in report.applied), report.summary()
    tasks = extract_tasks(optimize_for(graph, LLVM)).tasks
    assert ((1, 16, 64), (64, 192)) in [t.shapes for t in tasks if t.op == "MatMul"]
    assert "Split" not in [t.op for t in tasks]
    slices = [step for t in tasks for view in operand_views(t.attrs) for step in view if step[0] == "slice"]
    assert sorted(arg for _, arg in slices) == [(2, 0, 64), (2, 64, 128), (2, 128, 192)]
    assert main(["check", str(path), "--db", str(tmp_path / "tuning.db"), "--no-shipped"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def test_a_scaled_query_moves_onto_its_product_and_the_qkv_copy_goes(tmp_path, capsys):
    """Swin's window attention (a small `zoo_blocks.swin_block`), the queries scaled before QKᵀ
    as Swin and timm write it: the attention rule moves the scale onto the product (its
    epilogue), so Q, K and V are all views of the one projection and no copy kernel of them is
    left (without the rule, the queries' Mul read a transposed copy of all three: 1.3-1.7 ms of
    the full block's 30 on a Zen 3 host). The same results, and `check` matches onnxruntime."""
    from autosched.zoo_blocks import swin_block
    path = tmp_path / "swin.onnx"
    path.write_bytes(swin_block(side=14, c=32, heads=2).SerializeToString())
    graph = _load(path)
    rewritten, report = substitute(graph, LLVM)
    assert report.applied == ("attention-0002", "attention-0002"), report.summary()

    def copies(g):
        tasks = extract_tasks(optimize_for(g, LLVM)).tasks
        return [t for t in tasks if t.op == "Mul" or dict(t.attrs).get("perm") == (2, 0, 3, 1, 4)]

    assert len(copies(prepare(graph))) == 2 and not copies(rewritten)
    scores = [t for t in extract_tasks(optimize_for(rewritten, LLVM)).tasks
              if t.op == "MatMul" and t.out_shapes[0][-2:] == (49, 49)]
    assert scores and all([e.op for e in t.epilogue][:2] == ["Mul", "Add"] for t in scores)
    same_results(graph, rewritten)
    assert main(["check", str(path), "--db", str(tmp_path / "tuning.db"), "--no-shipped"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def test_shapes_unify_partially_for_the_variables_bound_so_far():
    """A match's first roots are checked against the rule's shapes before the next is sought: a
    dimension that reads a symbol only later variables fix is left open, one they fix is not."""
    shapes = {"a": parse_shape("A,B"), "b": parse_shape("A+B"), "c": parse_shape("B,C")}
    assert unify({"a": (2, 3)}, shapes) == {"A": 2, "B": 3}
    assert unify({"a": (2, 3), "b": (5,)}, shapes) == {"A": 2, "B": 3}
    assert unify({"a": (2, 3), "b": (6,)}, shapes) is None
    assert unify({"b": (5,)}, shapes) is None  # A and B unknown: no proof of 5 = A + B
    assert unify({"b": (5,)}, shapes, partial=True) == {}
    assert unify({"b": (5,), "c": (3, 4)}, shapes, partial=True) == {"B": 3, "C": 4}
    assert unify({"a": (2,)}, shapes, partial=True) is None  # the wrong rank fails at once


def test_a_rule_applies_only_where_the_shapes_unify():
    """`matmul(a,b), matmul(a,c)` with b and c of the same shape [B,C] does not match projections of
    different widths, and a split must cut where the rule's symbolic size says."""
    rule = Rule("same-width", {"a": parse_shape("A,B"), "b": parse_shape("B,C"), "c": parse_shape("B,C")},
                (parse_term("matmul(a,b)"), parse_term("matmul(a,c)")),
                (parse_term("split0_1[C](matmul(a,concat1(b,c)))"), parse_term("split1_1[C](matmul(a,concat1(b,c)))")),
                ("matmul-concat-columns", "split0-concat1", "split1-concat1"))
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    b.output(b.node(Op.MATMUL, [x, b.constant("w1", np.ones((6, 5), np.float32))]),
             b.node(Op.MATMUL, [x, b.constant("w2", np.ones((6, 7), np.float32))]))
    assert not list(Matcher(b.build()).matches(directions([rule])[0]))
    b2 = GraphBuilder()
    x = b2.input("x", (4, 6))
    b2.output(b2.node(Op.MATMUL, [x, b2.constant("w1", np.ones((6, 5), np.float32))]),
              b2.node(Op.MATMUL, [x, b2.constant("w2", 2 * np.ones((6, 5), np.float32))]))
    graph = b2.build()
    matches = list(Matcher(graph).matches(directions([rule])[0]))
    assert len(matches) == 2  # (w1, w2) and (w2, w1)
    merged = apply(graph, matches[0])
    assert [n.op for n in merged.nodes] == [Op.CONCAT, Op.MATMUL, Op.SPLIT]
    same_results(graph, merged)


def test_a_bad_rule_file_an_unproved_rule_and_a_timeout_fall_back_with_one_line(tmp_path, fire_path, caplog):
    graph = _load(fire_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    unproved = tmp_path / "unproved.json"
    rules = load_rules(SHIPPED)
    from autosched.graph.substitutions.rules import RuleFile, save_rules
    save_rules(unproved, RuleFile((Rule("fake-1", rules.rules[0].shapes, rules.rules[0].src, rules.rules[0].dst, ()),)))
    cases = [(dict(rules=bad), "cannot read the substitution rules"),
             (dict(rules=unproved), "rule fake-1 is not proved from the operator properties"),
             (dict(budget_s=0.0), "ran past its budget")]
    for kwargs, message in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="autosched"):
            same, report = substitute(graph, LLVM, **kwargs)
        assert same is graph and not report.applied
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and message in lines[0] and "\n" not in lines[0]
        assert report.summary().startswith("substitutions: off")


def test_tasks_shows_the_rewrites_and_no_substitutions_turns_them_off(fire_path, tmp_path, capsys):
    db = str(tmp_path / "tuning.db")
    assert main(["tasks", str(fire_path), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "substitutions: 1 rewrite (conv-" in out
    with_rewrites = out.count("Conv")
    assert main(["tasks", str(fire_path), "--db", db, "--no-substitutions"]) == 0
    out = capsys.readouterr().out
    assert "substitutions: off (--no-substitutions)" in out
    assert out.count("Conv") > with_rewrites


def test_check_passes_against_onnxruntime_with_substitutions(fire_path, tmp_path, capsys):
    assert main(["check", str(fire_path), "--db", str(tmp_path / "tuning.db"), "--no-shipped"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def test_a_task_costs_its_best_record_in_the_database_else_its_roofline(fire_path, tmp_path):
    """The cost the search compares: a real SQLite database's best record for a task where it
    has one, else the shipped records', the estimate (scaled to the records) for the others,
    each task costed once."""
    from db_helpers import HERE, measured

    from autosched.database import Database
    from autosched.graph.passes import optimize_for
    from autosched.graph_cost import GraphCost, roofline
    from autosched.task import extract_tasks

    graph = _load(fire_path)
    tasks = extract_tasks(optimize_for(graph, HERE)).tasks
    # tunable ones first (the input's conversion into blocks is a task too)
    tasks = sorted(tasks, key=lambda t: t.op != "ConvNCHWc")
    db = Database(str(tmp_path / "tuning.db"))
    db.commit(measured(tasks[0], HERE, [7e-3, 5e-3]))
    cost = GraphCost(HERE, db, lambda g: optimize_for(g, HERE))
    total = cost(graph)
    # the estimates are scaled by how much slower than its roofline the measured task ran
    scale = 5e-3 / roofline(tasks[0], HERE)
    assert cost.scale == pytest.approx(scale)
    assert total == pytest.approx(5e-3 + scale * sum(roofline(t, HERE) for t in tasks[1:]))
    assert (cost.measured, cost.estimated) == (1, len(tasks) - 1)
    assert cost(graph) == total
    assert (cost.measured, cost.estimated) == (1, len(tasks) - 1)
    assert all(0 < roofline(t, HERE) < 1e-3 for t in tasks)
    # the shipped records, as a build falls back to them: used where the database has none
    shipped = Database("sqlite://")
    shipped.commit(measured(tasks[0], HERE, [1e-3]))
    shipped.commit(measured(tasks[1], HERE, [2e-3]))
    with_shipped = GraphCost(HERE, db, lambda g: optimize_for(g, HERE), shipped)
    assert with_shipped(graph) == pytest.approx(
        5e-3 + 2e-3 + (7e-3 / (roofline(tasks[0], HERE) + roofline(tasks[1], HERE)))
        * sum(roofline(t, HERE) for t in tasks[2:]))
    assert (with_shipped.measured, with_shipped.estimated) == (2, len(tasks) - 2)
    db.close()


def test_after_tuning_the_rewritten_graph_it_is_still_the_one_built(fire_path, tmp_path):
    """Records of the rewritten graph's tasks, far slower than their rooflines (a busy machine),
    must not make the unrewritten graph, judged by bare rooflines, look cheaper: `tune` records
    the rewritten graph's tasks and `build` must build that graph."""
    from db_helpers import HERE, measured

    from autosched.database import Database
    from autosched.graph.passes import optimize_for
    from autosched.graph_cost import roofline
    from autosched.task import extract_tasks

    graph = _load(fire_path)
    rewritten, report = substitute(graph, HERE)
    assert report.applied
    db = Database(str(tmp_path / "tuning.db"))
    for task in extract_tasks(optimize_for(rewritten, HERE)).tasks:
        if task.op == "ConvNCHWc":  # the tuned tasks (the layout conversion has no template)
            db.commit(measured(task, HERE, [1000 * roofline(task, HERE)]))
    again, tuned = substitute(graph, HERE, db)
    assert tuned.applied == report.applied and tuned.measured > 0
    assert [n.op for n in again.nodes] == [n.op for n in rewritten.nodes]
    db.close()


def test_a_rewrite_is_not_kept_for_trading_a_task_measured_slow_for_an_unmeasured_one(tmp_path):
    """The zoo MLP with records slower than their rooflines: doubling a Relu (relu(x) =
    relu(relu(x)), proved) changes a Gemm's task key, and its scaled estimate undercuts its own
    record; by rooflines alone it is no cheaper, so it is not kept."""
    import onnx
    from db_helpers import measured

    from autosched.database import Database
    from autosched.frontend.onnx import load_onnx
    from autosched.task import extract_tasks
    from autosched.zoo import mlp

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    graph = load_onnx(path)
    tasks = extract_tasks(optimize(graph)).tasks
    with Database(str(tmp_path / "t.db")) as db:
        db.commit(measured(tasks[0], LLVM, [1e-3]))
        db.commit(measured(tasks[1], LLVM, [2e-3]))
        same, report = substitute(graph, LLVM, db)
    assert same is graph and not report.applied and report.measured == 2


def test_the_search_leaves_out_rewrites_that_only_wrap_what_they_matched():
    """`x => split0(concat(x, y))`, the reverse of a rule that drops junk, adds operators around a
    value the graph has: searched, such rewrites used most of BERT's graph budget."""
    shipped = load_rules(SHIPPED).rules
    dropping = [r for r in shipped if r.reversible and any(d in set(subterms(s)) for s, d in zip(r.src, r.dst))]
    assert dropping
    names = {r.name for r in _rules(SHIPPED)}
    assert all(r.name in names and f"{r.name}~" not in names for r in dropping)


def test_a_roofline_counts_the_bytes_a_view_reads():
    """A part of a merged projection costs what the part holds, not the whole merged tensor."""
    def task(width, split):
        b = GraphBuilder()
        x = b.input("x", (1, 64, width))
        if split:
            x = b.node(Op.SPLIT, [x], outputs=2, axis=2, split=(256, width - 256))
        b.output(b.node(Op.MATMUL, [b.input("y", (1, 256, 64)), x]))
        return extract_tasks(optimize_for(b.build(), LLVM)).tasks[0]

    whole, part = task(256, False), task(768, True)
    assert part.shapes[1] == (1, 64, 768) and operand_views(part.attrs)[1]
    assert roofline(part, LLVM) == roofline(whole, LLVM)


@pytest.mark.parametrize("make", ["qkv", "fire", "recurrence"])
def test_roots_found_upward_from_a_bound_variable_are_every_root_a_scan_finds(make, fire_path, monkeypatch):
    """A rule's roots after the first are searched only among the nodes that reach a value the
    first bound (the scan of every node of the op made two-root rules quadratic: 22 s in an
    unrolled LSTM), or that match their term alone, and only while the shapes bound so far
    unify. Every rule must match exactly what the scan matched, in the same order."""
    graph = prepare({"qkv": _qkv, "recurrence": _recurrence}.get(make, lambda: _load(fire_path))())
    rules = directions(load_rules(SHIPPED).rules)

    def found(matcher):
        return [(m.rule.name, m.roots, tuple(sorted(m.binding.items()))) for r in rules for m in matcher.matches(r)]

    pruned = found(Matcher(graph))
    monkeypatch.setattr(Matcher, "_candidates", lambda self, term, binding: iter(self.by_op.get(
        symbol(term.op).op.value, ())))
    monkeypatch.setattr(Matcher, "_shapes_fit", lambda self, rule, binding: True)
    scanned = found(Matcher(graph))
    assert pruned == scanned
    assert any(len(roots) > 1 for _, roots, _ in pruned)  # two-root rules matched here


def test_an_inception_blocks_1x1_branches_merge_split_and_concatenate_in_place(tmp_path, capsys):
    """The pointwise domain's rule: 1x1 convolutions reading the block's input (64, 96 and 16
    channels) become one on stacked kernels, whose output is split back into the branches
    without a kernel (views of channel blocks), and the branches are written straight into the
    block's concatenated output (no Concat kernel). Merging the 64-channel branch too would make
    the Concat a kernel again (that part would already be a view of the merged output), which
    costs more than the kernel launch it saves, so the search merges the other two; onnxruntime agrees."""
    import onnx

    from autosched.zoo_blocks import inception_block
    path = tmp_path / "inception.onnx"
    onnx.save(inception_block(), path)
    graph = _load(path)
    rewritten, report = substitute(graph, LLVM)
    assert report.applied and all(r.startswith("pointwise-") for r in report.applied), report.summary()
    tasks = extract_tasks(optimize_for(rewritten, LLVM)).tasks
    pointwise = sorted(t.shapes[1][0] for t in tasks if t.op == "ConvNCHWc" and t.shapes[1][2:] == (1, 1))
    assert pointwise == [32, 64, 112]  # the pool branch's, the 64-channel branch's, and 96 + 16 merged
    assert not {"Split", "Concat"} & {t.op for t in tasks}
    assert main(["check", str(path), "--db", str(tmp_path / "tuning.db"), "--no-shipped"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
