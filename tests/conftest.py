"""Fixtures shared by the test modules."""
import os

import numpy as np
import onnx
import pytest
from isa import RUN_TARGETS
from onnx import TensorProto, helper, numpy_helper
from postgres_server import NoServer, PostgresServer
from process_helpers import kill_started

from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.task import extract_tasks
from autosched.zoo import mlp


@pytest.fixture(params=RUN_TARGETS, ids=lambda t: t.isa if t.option("mcpu") is None else t.option("mcpu"))
def cpu_target(request):
    """Each CPU target the op tests run default schedules for: AVX2 and the host's ISA."""
    return request.param


def _gemm_relu_gemm(path, outputs, seed):
    """Gemm 8×64 · 64×48, Relu, Gemm · 48×`outputs`: two tasks, the first the same in every such model."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((48, outputs)).astype(np.float32), "w2")
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, outputs])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """Two Gemms of different size (the larger gets tuned first) and a Relu between them."""
    return _gemm_relu_gemm(tmp_path_factory.mktemp("model") / "small.onnx", 16, 0)


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """The small model's first Gemm (the same task) and a wider second one (another task)."""
    return _gemm_relu_gemm(tmp_path_factory.mktemp("other") / "other.onnx", 32, 1)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """The zoo MLP's three Gemm tasks."""
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(mlp(), path)
    return extract_tasks(optimize(load_onnx(path))).tasks


@pytest.fixture(autouse=True)
def _no_tuner_outlives_its_test():
    yield
    kill_started()


def _no_postgres(reason: str):
    """Locally a missing server (or driver) skips the PostgreSQL cases; in CI they must run."""
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the PostgreSQL tests, but: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the whole run, started by the first test that needs it."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _no_postgres('the PostgreSQL driver is not installed: pip install -e ".[test]"')
    try:
        with PostgresServer.start() as server:
            yield server
    except NoServer as e:
        _no_postgres(str(e))


@pytest.fixture(params=["sqlite", "postgres"])
def dialect(request):
    """The database tests run on both: an SQLite file and a database of a real PostgreSQL server."""
    return request.param


@pytest.fixture
def make_db(dialect, request, tmp_path):
    """`make_db(name)`: the location of a new, empty tuning database of this test's dialect (an
    SQLite path that does not exist yet, or the URL of a new PostgreSQL database)."""
    if dialect == "sqlite":
        return lambda name="t": str(tmp_path / f"{name}.db")
    server = request.getfixturevalue("postgres_server")
    return lambda name="t": server.create_database(name)


@pytest.fixture
def db_url(make_db):
    """One new, empty database of this test's dialect."""
    return make_db("t")
