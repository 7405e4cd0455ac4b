"""Built models that prove themselves: the manifest's sizes and SHA-256 digests of the library
and weights are checked before the library is mapped, so a damaged file is one line naming it,
never a wrong answer, a traceback or a signal."""
import json
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from autosched import zoo
from autosched.cli import main
from autosched.compile.model import build_model
from autosched.frontend.onnx import load_onnx
from autosched.runtime import ModelError, load_model
from autosched.runtime.model import Model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The MLP built once, and its inputs."""
    d = tmp_path_factory.mktemp("mlp")
    onnx.save(zoo.mlp(), d / "mlp.onnx")
    files = build_model(load_onnx(d / "mlp.onnx"), d / "mlp.so")
    inputs = d / "x.npz"
    np.savez(inputs, input=np.random.default_rng(0).standard_normal((64, 784)).astype(np.float32))
    return files, inputs


@pytest.fixture
def model(built, tmp_path):
    """A fresh copy of the built MLP to damage: its library path."""
    files, _ = built
    for f in (files.library, files.manifest, files.weights):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / files.library.name


def _overwrite(path, offset, size=4096):
    data = bytearray(path.read_bytes())
    data[offset:offset + size] = b"\x7f" * size
    path.write_bytes(bytes(data))


def _run_cli(*args):
    """The CLI in a child process: a library mapped past its end kills it with SIGBUS, not this test."""
    return subprocess.run([sys.executable, "-m", "autosched.cli", *map(str, args)], capture_output=True, text=True)


def test_an_intact_model_loads_and_its_manifest_records_digests(model):
    manifest = json.loads(model.with_suffix(".json").read_text())
    assert len(manifest["library_sha256"]) == len(manifest["weights_sha256"]) == 64
    assert manifest["library_bytes"] == model.stat().st_size
    load_model(model).close()


def test_weights_of_the_right_size_with_4k_overwritten_are_refused(model, built, tmp_path, capsys):
    weights = model.with_suffix(".weights")
    _overwrite(weights, weights.stat().st_size // 2)
    with pytest.raises(ModelError, match=r"mlp\.weights: damaged"):
        load_model(model)
    assert main(["run", str(model), "--inputs", str(built[1]), "--outputs", str(tmp_path / "y.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "mlp.weights: damaged" in err and err.count("\n") == 1
    assert not (tmp_path / "y.npz").exists()
    load_model(model, verify=False).close()  # the documented escape hatch for huge weights: sizes only


def test_a_library_with_4k_overwritten_is_refused(model):
    _overwrite(model, model.stat().st_size // 2)
    with pytest.raises(ModelError, match=r"mlp\.so: damaged"):
        load_model(model)


@pytest.mark.parametrize("verify", [[], ["--no-verify"]])
def test_a_truncated_library_is_one_line_never_sigbus(model, built, tmp_path, verify):
    """dlopen maps the library's segments; a truncated file dies of SIGBUS on first touch. The
    size check runs before mapping, even unverified."""
    model.write_bytes(model.read_bytes()[:model.stat().st_size // 2])
    out = _run_cli("run", model, "--inputs", built[1], "--outputs", tmp_path / "y.npz", *verify)
    assert out.returncode == 2, out
    assert out.stderr.startswith("error: ") and "mlp.so:" in out.stderr and "truncated" in out.stderr
    assert out.stderr.count("\n") == 1


def test_a_truncated_manifest_is_one_line(model, built, tmp_path):
    manifest = model.with_suffix(".json")
    manifest.write_text(manifest.read_text()[:200])
    out = _run_cli("run", model, "--inputs", built[1], "--outputs", tmp_path / "y.npz")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out
    assert out.stderr.startswith("error: ") and "mlp.json: truncated or not a model manifest" in out.stderr


def test_a_manifest_without_digests_is_refused_unless_unverified(model):
    """Models built before the digests: refused with a line saying to rebuild, since nothing
    proves their files intact; `verify=False` loads them as before."""
    path = model.with_suffix(".json")
    manifest = json.loads(path.read_text())
    for key in ("library_sha256", "library_bytes", "weights_sha256"):
        del manifest[key]
    manifest["format"] = 1
    path.write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match=r"mlp\.json: no checksums .* rebuild the model"):
        load_model(model)
    unchecked = load_model(model, verify=False)
    assert unchecked.run({"input": np.zeros((64, 784), np.float32)})
    unchecked.close()


@pytest.mark.parametrize("where", ["missing/y.npz", ".", "/proc/y.npz"])
def test_outputs_that_cannot_be_written_are_refused_before_the_model_runs(model, built, tmp_path, monkeypatch,
                                                                          capsys, where):
    """/proc takes no new file, even from root (whom permissions do not stop)."""
    def must_not_run(self, feeds):
        raise AssertionError("the model ran before its outputs were known to be writable")
    monkeypatch.setattr(Model, "run", must_not_run)
    assert main(["run", str(model), "--inputs", str(built[1]), "--outputs", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(tmp_path / where) in err, err
    assert not (tmp_path / "y.npz").exists()


def test_outputs_are_written_where_numpy_writes_them_and_said_so(model, built, tmp_path, capsys):
    """numpy appends .npz to a name without it: the line says which file was written."""
    assert main(["run", str(model), "--inputs", str(built[1]), "--outputs", str(tmp_path / "y")]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'y.npz'}\n"
    assert (tmp_path / "y.npz").stat().st_size > 0
