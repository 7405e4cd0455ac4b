"""The IR's records, validation and topological sort."""

import numpy as np
import pytest

from autosched.errors import GraphError
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Graph, Node, Op, Value, toposort
from autosched.opset.record import OpKind
from autosched.opset.registry import OPS, kind_of


def _node(name, inputs, outputs):
    return Node(name, Op.RELU, tuple(inputs), tuple(outputs))


def test_every_op_has_a_kind():
    assert set(OPS) == set(Op)
    assert kind_of(Op.CONV) is OpKind.ANCHOR and kind_of(Op.ERF) is OpKind.ELEMWISE


def test_toposort_orders_producers_first_and_keeps_sorted_lists():
    a, b, c = _node("a", ["x"], ["va"]), _node("b", ["va"], ["vb"]), _node("c", ["va", "vb"], ["vc"])
    assert toposort([c, b, a], ["x"]) == [a, b, c]
    assert toposort([a, b, c], ["x"]) == [a, b, c]


def test_toposort_names_the_nodes_of_a_cycle():
    nodes = [_node("first", ["x"], ["v1"]), _node("loop_a", ["v1", "v3"], ["v2"]), _node("loop_b", ["v2"], ["v3"])]
    with pytest.raises(GraphError, match="cycle") as info:
        toposort(nodes, ["x"])
    message = str(info.value)
    assert "loop_a" in message and "loop_b" in message and "first" not in message


def test_toposort_names_reader_and_missing_value():
    with pytest.raises(GraphError, match="node 'reader' reads 'ghost'"):
        toposort([_node("reader", ["ghost"], ["y"])], ["x"])


def test_toposort_rejects_two_producers():
    """Also where the list is otherwise in order (sorted lists take a check of one pass), and
    where one node writes a value twice or writes a graph input."""
    with pytest.raises(GraphError, match="produced twice"):
        toposort([_node("p1", ["x"], ["y"]), _node("p2", ["x"], ["y"])], ["x"])
    with pytest.raises(GraphError, match="produced twice"):
        toposort([_node("p", ["x"], ["y", "y"])], ["x"])
    with pytest.raises(GraphError, match="produced twice"):
        toposort([_node("p", ["x"], ["x"])], ["x"])


def test_graph_sorts_nodes_and_checks_records():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.node(Op.RELU, [x], name="r1")
    z = b.node(Op.EXP, [y], name="e1")
    b.output(z)
    g = b.build()
    shuffled = g.replace(nodes=g.nodes[::-1])
    assert [n.name for n in shuffled.nodes] == ["r1", "e1"]
    assert g.values[z] == Value(z, (2, 3), "float32")
    with pytest.raises(GraphError, match="no shape or dtype record"):
        g.replace(values={k: v for k, v in g.values.items() if k != y})


def test_graph_rejects_constant_with_wrong_record():
    b = GraphBuilder()
    w = b.constant("w", np.zeros((2, 2), np.float32))
    b.output(b.node(Op.RELU, [w]))
    g = b.build()
    with pytest.raises(GraphError, match="constant 'w' holds float32"):
        g.replace(constants={"w": np.zeros((3,), np.float32)})


def test_graph_rejects_unproduced_output():
    b = GraphBuilder()
    x = b.input("x", (2,))
    b.output(b.node(Op.RELU, [x]))
    g = b.build()
    with pytest.raises(GraphError, match="never produced"):
        Graph(g.inputs, g.outputs, (), {}, g.values)


def test_value_sizes():
    v = Value("v", (2, 3, 4), "float16")
    assert v.size == 24 and v.nbytes == 48
