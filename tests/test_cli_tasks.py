"""`autosched tasks`: the task table, shape binding, and error reporting."""

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from autosched import zoo
from autosched.cli import main
from autosched.cli.app import COMMANDS
from autosched.cli.args import parse_shape
from autosched.errors import FrontendError


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    paths = {}
    for name in ("resnet18", "mlp"):
        paths[name] = root / f"{name}.onnx"
        onnx.save(zoo.MODELS[name](), paths[name])
    dynamic = zoo.mlp()
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    dynamic.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    paths["dynamic"] = root / "dynamic_mlp.onnx"
    onnx.save(dynamic, paths["dynamic"])
    return paths


def test_tasks_table_for_resnet18(models, capsys):
    assert main(["tasks", str(models["resnet18"]), "--target", "llvm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"model: {models['resnet18']}" and out[1] == "target: llvm"
    assert out[2].startswith("substitutions: ")  # what the graph optimizer did (nothing cheaper for ResNet-18)
    assert out[3].split()[:6] == ["#", "op", "weight", "GFLOPs", "share", "shapes"]
    rows = out[4:-1]
    # the convolutions in channel blocks (layout planning): no conversion but the one before the
    # Reshape, which is no kernel (its output aliases the pool's bytes)
    assert len(rows) == 19
    assert out[-1].startswith("19 tasks for 24 fused groups, 3.6")
    assert sum(int(row.split()[2]) for row in rows) == 24
    assert [row.split()[1] for row in rows].count("LayoutTransform") == 1
    assert abs(sum(float(row.split()[4].rstrip("%")) for row in rows) - 100) < 0.1
    first = rows[0].split()
    assert first[1] == "ConvNCHWc+Relu" and first[5] == "1x3x224x224,64x3x7x7,64" and first[6].startswith('{"attrs"')


def test_shape_binding(models, capsys):
    assert main(["tasks", str(models["dynamic"]), "--shape", "input=8x784"]) == 0
    assert "8x784,1024x784,1024" in capsys.readouterr().out
    assert main(["tasks", str(models["dynamic"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "input 'input' has dynamic dimension 0 ('batch')" in err
    assert "Traceback" not in err


def test_errors_are_one_line_unless_debugging(tmp_path, capsys):
    missing = tmp_path / "missing.onnx"
    assert main(["tasks", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err
    with pytest.raises(FrontendError):
        main(["--debug", "tasks", str(missing)])
    with pytest.raises(FrontendError):
        main(["tasks", str(missing), "--debug"])


def test_bad_arguments_exit_2(models, capsys):
    with pytest.raises(SystemExit) as info:
        main(["tasks", str(models["mlp"]), "--shape", "input"])
    assert info.value.code == 2 and "NAME=DIMxDIMx" in capsys.readouterr().err
    assert main(["tasks", str(models["mlp"]), "--target", "tpu"]) == 2
    assert "unknown target kind 'tpu'" in capsys.readouterr().err


def test_parse_shape():
    assert parse_shape("input=1x3x224x224") == ("input", (1, 3, 224, 224))
    assert parse_shape("a=b=2X3") == ("a=b", (2, 3))


def test_subcommands_come_from_one_table():
    assert "tasks" in COMMANDS and COMMANDS["tasks"].run.__name__ == "run_tasks"


def test_command_line_in_a_subprocess(models):
    root = Path(zoo.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "autosched.cli", "tasks", str(models["mlp"])],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "Gemm+Relu" in result.stdout and "3 tasks for 3 fused groups" in result.stdout
