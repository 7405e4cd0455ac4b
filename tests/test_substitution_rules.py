"""The shipped substitution rules, their proofs, the generator and the `substitutions` verbs.

Every shipped rule is proved again with z3 from the operator properties and evaluated on the
op records' numpy references at several random shapes; the generator is run on a small
enumeration and must find the merges the optimizer needs; bad rule files are refused in one line.
"""
import json

import pytest

from autosched.cli import main
from autosched.graph.substitutions.evaluate import agree
from autosched.graph.substitutions.generate import DOMAINS, Candidate, Enumeration, canonical, generate, prune, specializes
from autosched.graph.substitutions.rules import SHIPPED, Rule, RuleFileError, load_rules
from autosched.graph.substitutions.terms import parse_shape, parse_term
from autosched.graph.substitutions.verify import Prover, check_rules


@pytest.fixture(scope="module")
def shipped():
    return load_rules(SHIPPED)


def test_at_least_100_rules_ship_each_with_a_proof(shipped):
    assert len(shipped.rules) >= 100
    assert all(r.proof for r in shipped.rules)
    assert len({r.name for r in shipped.rules}) == len(shipped.rules)


def test_every_shipped_rule_holds_on_the_numpy_references_at_several_shapes(shipped):
    for rule in shipped.rules:
        for seed in (1, 2):
            assert agree(rule.src, rule.dst, rule.shapes, trials=3, seed=seed) is None, rule.name


def test_a_sample_of_the_shipped_rules_is_proved_again_from_the_properties(shipped):
    """Every tenth rule here; `-m slow` proves them all (minutes)."""
    problems = [c.problem for c in check_rules(shipped.rules[::10]) if c.problem]
    assert not problems


@pytest.mark.slow
def test_every_shipped_rule_is_proved_again_from_the_properties(shipped):
    problems = [c.problem for c in check_rules(shipped.rules) if c.problem]
    assert not problems


def _has(rules, src, dst, shapes):
    return any([str(t) for t in r.src] == src and [str(t) for t in r.dst] == dst
               and {v: ",".join(map(str, sh)) for v, sh in r.shapes.items()} == shapes for r in rules)


def test_the_showcase_merges_ship(shipped):
    """Parallel matrix products of one input merged into one GEMM, also as biased dense layers on
    batches of rows; a 1x1 beside a 3x3
    convolution of one input merged through an enlarged, concatenated kernel, with a split
    (Inception) or, where the outputs are concatenated after their activations, without one
    (SqueezeNet's fire module); 1x1 convolutions of one input stacked (Inception's branches)."""
    assert _has(shipped.rules, ["matmul(a,b)", "matmul(a,c)"],
                ["split0_1[C](matmul(a,concat1(b,c)))", "split1_1[C](matmul(a,concat1(b,c)))"],
                {"a": "A,B", "b": "B,C", "c": "B,D"})
    conv_shapes = {"a": "A,B,C,D", "b": "E,B,3,3", "c": "E", "d": "F,B,1,1", "e": "F"}
    assert _has(shipped.rules, ["convb(a,b,c)", "convb(a,d,e)"],
                ["split0_1[E](convb(a,concat0(b,enlarge(d)),concat0(c,e)))",
                 "split1_1[E](convb(a,concat0(b,enlarge(d)),concat0(c,e)))"], conv_shapes)
    assert _has(shipped.rules, ["concat1(relu(convb(a,b,c)),relu(convb(a,d,e)))"],
                ["relu(convb(a,concat0(b,enlarge(d)),concat0(c,e)))"], conv_shapes)
    # dense layers with their biases on [batch, tokens, features] (attention's Q, K and V projections)
    assert _has(shipped.rules, ["addb(matmul3(a,b),c)", "addb(matmul3(a,d),e)"],
                ["split0_2[D](addb(matmul3(a,concat1(b,d)),concat0(c,e)))",
                 "split1_2[D](addb(matmul3(a,concat1(b,d)),concat0(c,e)))"],
                {"a": "A,B,C", "b": "C,D", "c": "D", "d": "C,E", "e": "E"})
    # linear layers as exported (Gemm, weights [out, in], a bias)
    assert _has(shipped.rules, ["gemmt(a,b,c)", "gemmt(a,d,e)"],
                ["split0_1[C](gemmt(a,concat0(b,d),concat0(c,e)))", "split1_1[C](gemmt(a,concat0(b,d),concat0(c,e)))"],
                {"a": "A,B", "b": "C,B", "c": "C", "d": "D,B", "e": "D"})
    # 1x1 convolutions of one input (an Inception block's branches), after their activations
    assert _has(shipped.rules, ["relu(convb(a,b,c))", "relu(convb(a,d,e))"],
                ["split0_1[E](relu(convb(a,concat0(b,d),concat0(c,e))))",
                 "split1_1[E](relu(convb(a,concat0(b,d),concat0(c,e))))"],
                {"a": "A,B,C,D", "b": "E,B,1,1", "c": "E", "d": "F,B,1,1", "e": "F"})


def test_the_prover_refuses_a_wrong_rule_and_names_the_properties_of_a_right_one():
    prover = Prover()
    shapes = {"x": parse_shape("M,K"), "a": parse_shape("K,M")}
    wrong = prover.prove((parse_term("transpose(matmul(x,a))"),), (parse_term("matmul(transpose(x),transpose(a))"),), shapes)
    assert not wrong.proved
    right = prover.prove((parse_term("transpose(matmul(x,a))"),), (parse_term("matmul(transpose(a),transpose(x))"),),
                         shapes)
    assert right.proved and right.properties == ("transpose-matmul",)


def test_a_rule_whose_shapes_do_not_force_its_split_is_not_proved():
    """split0 at N of concat1(a, c) is a only when a has N columns: with a of M columns it is not."""
    prover = Prover()
    shapes = {"x": parse_shape("M,K"), "a": parse_shape("K,M"), "c": parse_shape("K,P")}
    proof = prover.prove((parse_term("matmul(x,a)"),), (parse_term("split0_1[P](matmul(x,concat1(a,c)))"),), shapes)
    assert not proof.proved


def test_pruning_drops_renamings_special_cases_and_instances():
    shapes = {"x": parse_shape("M,K"), "y": parse_shape("M,K"), "a": parse_shape("K,N"), "b": parse_shape("K,N"),
              "c": parse_shape("K,P")}
    same = [Candidate(shapes, (parse_term("add(x,y)"),), (parse_term("add(y,x)"),)),
            Candidate(shapes, (parse_term("add(a,b)"),), (parse_term("add(b,a)"),))]
    assert len(prune(same)) == 1
    general = Candidate(shapes, (parse_term("matmul(x,concat1(a,c))"),),
                        (parse_term("concat1(matmul(x,a),matmul(x,c))"),))
    special = Candidate(shapes, (parse_term("matmul(x,concat1(a,b))"),),
                        (parse_term("concat1(matmul(x,a),matmul(x,b))"),))
    assert specializes(canonical(special).shapes, canonical(general).shapes)
    assert [c.text() for c in prune([general, special])] == [canonical(general).text()]
    instance = Candidate(shapes, (parse_term("add(relu(x),y)"),), (parse_term("add(y,relu(x))"),))
    assert [c.text() for c in prune([same[0], instance])] == [canonical(same[0]).text()]


def test_enumeration_groups_equal_terms_and_finds_the_gemm_merge():
    enum = Enumeration(DOMAINS[0], max_ops=2)
    texts = {c.text() for c in enum.candidates()}
    assert "add(y,x) => add(x,y)" in texts
    assert ("matmul(x,a) ; matmul(x,c) => split0_1[N](matmul(x,concat1(a,c))) ; "
            "split1_1[N](matmul(x,concat1(a,c)))") in texts


def test_the_dense_domain_merges_biased_projections_at_one_operator_each():
    """A bias on a dense layer is its epilogue and two weights concatenated fold at build time,
    so the Q/K/V merge is found among terms of one operator."""
    dense = next(d for d in DOMAINS if d.name == "dense")
    texts = {c.text() for c in Enumeration(dense, max_ops=1).candidates()}
    assert ("addb(matmul3(x,a),d) ; addb(matmul3(x,b),e) => split0_2[N](addb(matmul3(x,concat1(a,b)),concat0(d,e))) ; "
            "split1_2[N](addb(matmul3(x,concat1(a,b)),concat0(d,e)))") in texts


def test_generate_counts_each_step():
    rules, report = generate(max_ops=1, domains=DOMAINS[:1])
    c = report.counts
    assert c["candidates"] >= c["pruned"] == c["proved"] + c["unprovable"]
    assert c["proved"] == c["shipped"] + c["failed numpy"] == len(rules.rules) > 0
    assert set(report.seconds) == {"enumerate", "prune", "verify", "test"}


@pytest.mark.parametrize("content, message", [
    ("not json", "cannot read"),
    ('{"format": "other"}', "not an autosched substitution rule file"),
    ('{"format": "autosched-substitutions", "version": 99}', "version 99"),
    ('{"format": "autosched-substitutions", "version": 1, "rules": [{"name": "r1", "shapes": {"x": "M,K"}, '
     '"src": ["matmul(x,"], "dst": ["x"]}]}', "rule r1: "),
    ('{"format": "autosched-substitutions", "version": 1, "rules": [{"name": "r2", "shapes": {"x": "M,K"}, '
     '"src": ["x"], "dst": ["transpose(x)"]}]}', "rule r2: .*different shapes"),
])
def test_a_bad_rule_file_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "rules.json"
    path.write_text(content)
    with pytest.raises(RuleFileError, match=message) as info:
        load_rules(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_cli_lists_and_verifies(tmp_path, capsys, shipped):
    assert main(["substitutions", "list"]) == 0
    out = capsys.readouterr().out
    assert f"{len(shipped.rules)} rules in" in out and "matrix-0001" in out
    assert main(["substitutions", "list", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rules"]) == len(shipped.rules)
    wrong = Rule("wrong-1", {"x": parse_shape("M,M"), "a": parse_shape("M,M")}, (parse_term("matmul(x,a)"),),
                 (parse_term("matmul(a,x)"),))
    data = json.loads(SHIPPED.read_text())
    data["rules"] = [data["rules"][0], wrong.to_json()]
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(data))
    assert main(["substitutions", "verify", "--rules", str(path)]) == 1
    out = capsys.readouterr().out
    assert "rule wrong-1: not proved" in out and "1 of 2 rules proved" in out


def test_cli_generates_a_rule_file(tmp_path, capsys):
    path = tmp_path / "rules.json"
    assert main(["substitutions", "generate", "-o", str(path), "--max-ops", "1"]) == 0
    out = capsys.readouterr().out
    assert "candidates:" in out and "enumerate" in out and f"to {path}" in out
    assert load_rules(path).rules
