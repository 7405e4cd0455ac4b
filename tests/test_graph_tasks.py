"""Task extraction: workload keys, deduplication, epilogue description, FLOPs."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from autosched import zoo
from autosched.frontend.onnx import import_model
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import fuse, optimize
from autosched.task import Operand, extract_tasks


def _tasks(model):
    return extract_tasks(optimize(import_model(model, source="model")))


@pytest.fixture(scope="module")
def resnet_tasks():
    return _tasks(zoo.resnet18())


def test_resnet18_dedup_and_weights(resnet_tasks):
    tasks = resnet_tasks
    assert len(tasks.groups) == 23 and len(tasks.tasks) == 18  # the flatten Reshape is no kernel: an alias
    assert sum(t.weight for t in tasks.tasks) == len(tasks.groups)
    block = [t for t in tasks.tasks if t.op == "Conv" and t.shapes[:2] == ((1, 64, 56, 56), (64, 64, 3, 3))]
    assert sorted((tuple(e.op for e in t.epilogue), t.weight) for t in block) == [(("Add", "Relu"), 2), (("Relu",), 2)]
    assert 3.6e9 < tasks.total_flops < 3.7e9
    for i in range(len(tasks.groups)):
        group, task = tasks.groups[i], tasks.task_of(i)
        assert task.op == group.anchor.op.value and len(task.epilogue) == len(group.epilogue)


def test_task_records_the_epilogue_structurally(resnet_tasks):
    residual = next(t for t in resnet_tasks.tasks if [e.op for e in t.epilogue] == ["Add", "Relu"])
    add, relu = residual.epilogue
    assert add.operands == (Operand(step=0), Operand(shape=residual.out_shapes[0], dtype="float32"))
    assert relu.operands == (Operand(step=1),)
    assert residual.extra_inputs == (add.operands[1],)
    assert dict(residual.attrs) == {"dilations": (1, 1), "group": 1, "pads": (1, 1, 1, 1), "strides": (1, 1)}
    body = json.loads(residual.key)
    assert body["op"] == "Conv" and body["epilogue"][0][0] == "Add"


def test_gelu_epilogue_refers_back_to_earlier_steps():
    tasks = _tasks(zoo.bert_layer())
    gelu = next(t for t in tasks.tasks if any(e.op == "Erf" for e in t.epilogue))
    assert [e.op for e in gelu.epilogue] == ["Add", "Mul", "Erf", "Add", "Mul", "Mul"]  # x / sqrt(2) as x * (1 / sqrt(2))
    mul = gelu.epilogue[4]
    assert mul.operands == (Operand(step=1), Operand(step=4))
    assert gelu.shapes == ((1, 128, 768), (768, 3072))
    projections = next(t for t in tasks.tasks if t.shapes == ((1, 128, 768), (768, 768)) and len(t.epilogue) == 1)
    assert projections.weight == 3  # query, key, value


ZOO_KEYS = """
import json, sys
from autosched import zoo
from autosched.frontend.onnx import import_model
from autosched.graph.passes import optimize
from autosched.target import Target
from autosched.task import extract_tasks
lanes = Target.parse("llvm -mcpu=haswell").layout_lanes
keys = {f"{name} {planned}": [t.key for t in extract_tasks(optimize(import_model(build(), source=name),
                                                                    *([lanes] if planned else []))).tasks]
        for name, build in zoo.MODELS.items() for planned in (False, True)}
json.dump(keys, sys.stdout)
"""


def test_keys_are_the_same_in_fresh_processes():
    """Keys are what the tuning database stores: a tune in one process and a build in another
    (string hashing salted differently in each) must name every zoo model's tasks alike, with
    and without layout planning."""
    def keys(hash_seed: str) -> dict:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", ZOO_KEYS], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    first, second = keys("1"), keys("2")
    assert first == second
    assert set(first) == {f"{name} {planned}" for name in zoo.MODELS for planned in (False, True)}
    assert all(first.values())
    assert first["mobilenet_v2 False"] == [t.key for t in _tasks(zoo.mobilenet_v2()).tasks]  # and this process


def test_keys_ignore_node_and_value_names():
    model = zoo.mlp()
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    names = {}
    for node in renamed.graph.node:
        node.name = f"renamed_{node.name}"
        for i, name in enumerate(node.output):
            names[name] = node.output[i] = f"v{len(names)}"
        for i, name in enumerate(node.input):
            node.input[i] = names.get(name, name)
    for output in renamed.graph.output:
        output.name = names[output.name]
    assert [t.key for t in _tasks(model).tasks] == [t.key for t in _tasks(renamed).tasks]


def test_same_subgraph_in_another_graph_has_the_same_key(resnet_tasks):
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.input("activation", (1, 64, 56, 56))
    w, bias = b.constant("weights", rng.standard_normal((64, 64, 3, 3)).astype(np.float32)), b.constant("b", np.zeros(64, np.float32))
    y = b.node(Op.CONV, [x, w, bias], strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), group=1)
    b.output(b.node(Op.RELU, [y]))
    (task,) = extract_tasks(b.build()).tasks
    assert task.key in {t.key for t in resnet_tasks.tasks}


def test_flops_of_anchors():
    b = GraphBuilder()
    x = b.input("x", (4, 6, 8))
    y = b.node(Op.MATMUL, [x, b.constant("w", np.zeros((8, 5), np.float32))])
    b.output(b.node(Op.RELU, [y]))
    graph = b.build()
    (task,) = extract_tasks(graph, fuse(graph)).tasks
    assert task.flops == 2 * 4 * 6 * 5 * 8 + 4 * 6 * 5
    assert task.out_shapes == ((4, 6, 5),) and task.out_dtypes == ("float32",)
