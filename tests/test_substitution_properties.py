"""The substitution algebra's foundations: every operator property holds on the op records'
numpy references (at random shapes, random tensors), wrong properties are caught by the same
check, every algebra symbol's symbolic shape agrees with its record's shape function and
recognizes the attributes it gives, and the term text form round-trips."""
import numpy as np
import pytest

from autosched.graph.ir import Node, Value
from autosched.graph.substitutions.evaluate import agree, concrete, evaluate, random_arrays, random_dims
from autosched.graph.substitutions.properties import PROPERTIES, Property
from autosched.graph.substitutions.terms import (
    App,
    TermError,
    parse_shape,
    parse_term,
    shape_of,
    subterms,
    symbol,
    symbols,
)
from autosched.opset.registry import lookup


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.name)
def test_property_holds_on_the_numpy_references(prop: Property):
    assert shape_of(prop.lhs, prop.shapes) == shape_of(prop.rhs, prop.shapes)
    assert agree((prop.lhs,), (prop.rhs,), prop.shapes, trials=6, seed=1) is None


@pytest.mark.parametrize("shapes, lhs, rhs", [
    ("x:M,K; a:K,M", "transpose(matmul(x,a))", "matmul(transpose(x),transpose(a))"),  # order of factors
    ("x:B,C,H,W; w:F,C,3,3", "conv(relu(x),w)", "relu(conv(x,w))"),  # relu is not linear
    ("x:M,K; y:N,K", "split0_0[N](concat0(x,y))", "x"),  # cut at the wrong size: ill typed
    ("x:B,C,H,W; w:F,C,3,3", "maxpool(conv(x,w))", "conv(maxpool(x),w)"),
])
def test_a_wrong_property_fails_the_same_check(shapes, lhs, rhs):
    prop = Property("wrong", tuple((v.strip(), s.strip()) for v, _, s in (p.partition(":") for p in shapes.split(";"))),
                    lhs, rhs)
    try:
        typed = shape_of(prop.lhs, prop.shapes) == shape_of(prop.rhs, prop.shapes)
    except TermError:
        typed = False
    assert not typed or agree((prop.lhs,), (prop.rhs,), prop.shapes, trials=6) is not None


def test_every_symbol_appears_in_some_property():
    used = {t.op for p in PROPERTIES for side in (p.lhs, p.rhs) for t in subterms(side) if isinstance(t, App)}
    assert used == set(symbols())


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.name)
def test_symbolic_shapes_agree_with_the_records_shape_functions(prop: Property):
    """Each application's symbolic shape, made concrete, is what the record's shape function
    infers for the graph node the symbol stands for, and the symbol recognizes that node."""
    rng = np.random.default_rng(3)
    syms = {s for shape in prop.shapes.values() for d in shape for s in d.symbols}
    dims = random_dims(syms, rng)
    env = random_arrays(prop.shapes, dims, rng)
    for side in (prop.lhs, prop.rhs):
        for term in subterms(side):
            if not isinstance(term, App):
                continue
            alg = symbol(term.op)
            operands = [evaluate(a, env, dims) for a in term.args]
            shapes = [a.shape for a in operands]
            n = term.size.value(dims) if term.size is not None else None
            attrs = alg.attrs(shapes, n)
            node = Node("n", alg.op, tuple(f"in{i}" for i in range(len(shapes))), ("o0", "o1"), attrs)
            inferred = lookup(alg.op).shape(node, [Value(f"in{i}", s, "float64") for i, s in enumerate(shapes)])
            assert inferred[alg.output][0] == concrete(shape_of(term, prop.shapes), dims), str(term)
            assert alg.matches(attrs, shapes, n)


def test_terms_round_trip_through_text():
    for text in ("split0_1[K+N](matmul(x,concat1(a,c)))", "conv(x,concat0(w,enlarge(u)))", "scale(add(x,y),s)"):
        assert str(parse_term(text)) == text
    assert [str(d) for d in parse_shape("M,K+N,3,2*A+1")] == ["M", "K+N", "3", "2*A+1"]


@pytest.mark.parametrize("text, message", [
    ("matmul(x,", "expected"), ("frobnicate(x)", "no algebra symbol"), ("x y", "trailing"), ("a.b", "unexpected"),
])
def test_bad_terms_are_refused_in_one_line(text, message):
    with pytest.raises(TermError, match=message) as info:
        parse_term(text)
    assert "\n" not in str(info.value)


def test_ill_typed_terms_are_refused():
    shapes = {"x": parse_shape("M,K"), "a": parse_shape("N,K")}
    with pytest.raises(TermError, match="differ"):
        shape_of(parse_term("matmul(x,a)"), shapes)
