"""Whole-model build and run: real gcc builds of every kernel, the C executor, onnxruntime as reference."""
import json
import math
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from autosched import zoo
from autosched.cli import main
from autosched.compile.evaluate import compare, kernel_times, onnxruntime_session, sample_inputs
from autosched.compile.model import build_model, group_arguments
from autosched.errors import AutoschedError, FrontendError
from autosched.frontend.onnx import import_model, load_onnx
from autosched.graph.ir import Op
from autosched.graph.passes import fuse, optimize
from autosched.runtime import ModelError, load_model
from autosched.target import Target
from autosched.task import extract_tasks


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    zoo.save_zoo(d)
    return d


@pytest.mark.parametrize("name, target", [(name, "llvm") for name in ("mlp", "resnet18", "mobilenet_v2", "bert_layer")]
                         + [(name, "llvm -mcpu=haswell") for name in ("mlp", "resnet18", "bert_layer")])
def test_zoo_model_matches_onnxruntime(zoo_dir, tmp_path, name, target):
    """Untuned builds for the host and for AVX2 (6×16 matmul tiles, 8-float conv blocks)."""
    path = zoo_dir / f"{name}.onnx"
    graph = load_onnx(path)
    files = build_model(graph, tmp_path / f"{name}.so", target)
    model = load_model(files.library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("name, make", [("vit_block", zoo.vit_block), ("resnext_block", lambda: zoo.resnext_block(size=16))])
def test_models_beside_the_zoo_match_onnxruntime(tmp_path, target, name, make):
    """The ViT-style block (vector tanh, folded LayerNorms, the patch embedding as a MatMul,
    softmax over 197 tokens) and ResNeXt-style bottlenecks (grouped convolutions in blocks of
    whole groups, 4 channels wide and 8), built for real."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(make(), path)
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / f"{name}.so", target).library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("cpu, lanes", [("skylake-avx512", 16), ("znver3 -mattr=+avx512f", 16), ("haswell", 8)])
def test_grouped_convolutions_build_in_whole_vectors(tmp_path, cpu, lanes):
    """ResNeXt's groups of 4 and 8 channels run in blocks of the target's vector, several
    groups per block (compile only: gcc builds them for each -mcpu whatever the host runs)."""
    files = build_model(import_model(zoo.resnext_block(size=8), source="resnext_block"), tmp_path / "rx.so",
                        f"llvm -mcpu={cpu}")
    tasks = [json.loads(t["key"]) for t in json.loads(files.manifest.read_text())["tasks"]]
    grouped = sorted({dict(t["attrs"])["out_block"] for t in tasks if t["op"] == "ConvNCHWc"
                      and dict(t["attrs"]).get("group", 1) > 1})
    assert grouped == [lanes]


def test_a_model_built_for_an_isa_this_cpu_lacks_is_refused(zoo_dir, tmp_path):
    """Loading AVX-512 code on an AVX2 CPU would die of SIGILL: the manifest names the ISA and
    loading refuses it with the flags that are missing."""
    from autosched.runtime.model import _check_isa
    from autosched.target import CpuInfo
    files = build_model(load_onnx(zoo_dir / "mlp.onnx"), tmp_path / "mlp.so", "llvm -mcpu=skylake-avx512")
    manifest = json.loads(files.manifest.read_text())
    assert manifest["isa"] == "x86_64-avx512" and "avx512f" in manifest["isa_flags"]
    avx2_host = CpuInfo("AMD EPYC 7601", frozenset({"sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"}))
    with pytest.raises(ModelError, match=r"mlp.so: built for x86_64-avx512 .*this CPU lacks avx512bw, avx512dq, "
                                         r"avx512f, avx512vl"):
        _check_isa(files.library, manifest, avx2_host)
    _check_isa(files.library, json.loads(build_model(load_onnx(zoo_dir / "mlp.onnx"), tmp_path / "hsw.so",
                                                     "llvm -mcpu=haswell").manifest.read_text()), avx2_host)


def test_identical_tasks_share_one_kernel(tmp_path):
    graph = import_model(zoo.resnet18())
    files = build_model(graph, tmp_path / "r18.so")
    manifest = load_model(files.library).manifest
    groups = fuse(optimize(graph, Target.parse("llvm").layout_lanes))
    assert len(manifest["tasks"]) < len(groups)
    assert sum(t["weight"] for t in manifest["tasks"]) == len(groups)
    source = files.library.with_suffix(".c").read_text()
    assert source.count("int32_t autosched_model_run") == 1
    run = source[source.index("int32_t autosched_model_run"):source.index("static double model_now")]
    assert run.count("if (task") == len(groups)  # one call per group, no Python in between


def test_a_profile_times_every_kernel_call_in_the_model(zoo_dir, tmp_path):
    """Per call: its group, op and task, and its median seconds inside the model run, which
    add up to about the model's latency (the executor adds only the calls between them)."""
    graph = load_onnx(zoo_dir / "mlp.onnx")
    files = build_model(graph, tmp_path / "mlp.so")
    model = load_model(files.library)
    feeds = sample_inputs(graph, 0)
    calls = model.profile(feeds, runs=5)
    groups = fuse(optimize(graph, Target.parse("llvm").layout_lanes))
    assert [(c.group, c.op) for c in calls] == [(g.name, g.anchor.op.value) for g in groups]
    assert all(c.seconds > 0 for c in calls) and {c.task for c in calls} == set(range(len(model.manifest["tasks"])))
    model.close()
    manifest = json.loads(files.manifest.read_text())
    del manifest["calls"]  # as an older autosched built it
    files.manifest.write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match=r"mlp.so: built without a per-kernel profile .*rebuild it"):
        load_model(files.library).profile(feeds)


def test_run_into_writes_the_arrays_it_is_given_each_time(zoo_dir, tmp_path):
    """The buffers' addresses are kept for the same arrays run after run; other arrays (a new
    input, another output) get theirs, and the arrays run before keep what they got."""
    graph = load_onnx(zoo_dir / "mlp.onnx")
    model = load_model(build_model(graph, tmp_path / "mlp.so").library)
    feeds = [sample_inputs(graph, seed) for seed in (0, 1)]
    ins = [[np.ascontiguousarray(f[v["name"]]) for v in model.inputs] for f in feeds]
    outs = [[np.empty(v["shape"], np.float32) for v in model.outputs] for _ in range(3)]
    model.run_into(ins[0], outs[0])
    model.run_into(ins[0], outs[0])
    model.run_into(ins[1], outs[1])
    model.run_into(ins[0], outs[2])
    want = [model.run(f) for f in feeds]
    for got, expected in zip(outs, (want[0], want[1], want[0])):
        np.testing.assert_array_equal(got[0], next(iter(expected.values())))
    assert not np.array_equal(outs[0][0], outs[1][0])
    model.close()


def _huge_page_mappings() -> dict[int, int]:
    """This process's mappings madvised for transparent huge pages ("hg"): start -> bytes."""
    found, start = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                start = (lo, hi - lo)
            elif head == "VmFlags:" and "hg" in line.split()[1:]:
                found[start[0]] = start[1]
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_weights_and_arena_get_fresh_huge_page_mappings_at_every_load(zoo_dir, tmp_path):
    """Each load maps the weights and the arena anew, on 2 MiB boundaries and madvised for huge
    pages before they are touched, and a close unmaps them: from the heap, a second load of the
    same build in one process reused blocks already backed by small pages (MobileNetV2: 0 and
    12 MB of huge pages), one more way for one build to run at two speeds."""
    library = build_model(load_onnx(zoo_dir / "mlp.onnx"), tmp_path / "mlp.so").library
    huge = 2 << 20
    for _ in range(2):
        before = _huge_page_mappings()
        model = load_model(library)
        new = {a: n for a, n in _huge_page_mappings().items() if before.get(a) != n}
        weights = model.manifest["weights_bytes"]
        assert all(a % huge == 0 and n % huge == 0 for a, n in new.items())
        assert sum(new.values()) >= math.ceil(weights / huge) * huge + huge  # the weights', and an arena
        model.close()
        assert not set(new) & set(_huge_page_mappings())


def test_group_arguments_follow_task_order():
    graph = optimize(import_model(zoo.bert_layer()))
    for group in fuse(graph):
        args = group_arguments(group)
        assert args[:len(group.anchor.inputs)] == list(group.anchor.inputs)
        assert args[-len(group.outputs):] == list(group.outputs)


def test_cli_build_then_run(zoo_dir, tmp_path):
    out = tmp_path / "mlp.so"
    assert main(["build", str(zoo_dir / "mlp.onnx"), "--target", "llvm", "-o", str(out)]) == 0
    x = np.random.default_rng(3).standard_normal((64, 784)).astype(np.float32)
    np.savez(tmp_path / "x.npz", input=x)
    proc = subprocess.run([sys.executable, "-m", "autosched.cli", "run", str(out), "--inputs", str(tmp_path / "x.npz"),
                           "--outputs", str(tmp_path / "y.npz")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "y.npz") as y:
        (name,) = y.files
        sess = onnxruntime_session(zoo_dir / "mlp.onnx", 2)
        np.testing.assert_allclose(y[name], sess.run(None, {"input": x})[0], rtol=1e-3, atol=1e-4)


def test_cli_check_and_bench(zoo_dir, capsys):
    assert main(["check", str(zoo_dir / "mlp.onnx")]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["bench", str(zoo_dir / "mlp.onnx"), "--runs", "3", "--threads", "1"]) == 0
    assert "ratio" in capsys.readouterr().out


def test_bench_shows_the_slowest_kernels_beside_onnxruntimes_nodes(zoo_dir, tmp_path, monkeypatch, capsys):
    """The MLP's three Gemm kernels against onnxruntime's nodes; onnxruntime's profile goes to
    the command's temporary directory and leaves with it."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", str(zoo_dir / "mlp.onnx"), "--runs", "3", "--threads", "1", "--kernels", "2"]) == 0
    out = capsys.readouterr().out
    table = out.split("slowest kernels")[1].splitlines()[2:]
    assert len(table) == 3 and all("|" in row for row in table)
    ours = [float(row.split("|")[0].split()[-1]) for row in table]
    assert ours[0] >= ours[1] > 0 and table[2].lstrip().startswith("all 3 kernels")
    assert ours[2] >= ours[0] + ours[1]
    assert list(tmp_path.iterdir()) == []
    assert main(["bench", str(zoo_dir / "mlp.onnx"), "--kernels", "-1"]) == 2
    assert "--kernels takes how many" in capsys.readouterr().err


def test_kernel_times_keep_only_the_runs_after_the_other_runtime_settled(zoo_dir, tmp_path):
    """Blocks of 2 timed runs, each after untimed ones while the other runtime's threads spin
    down: of both sides' profiles only the 5 timed runs count, each MLP kernel once per run."""
    files = build_model(load_onnx(zoo_dir / "mlp.onnx"), tmp_path / "mlp.so")
    model = load_model(files.library)
    feeds = {"input": np.ones((64, 784), np.float32)}
    ours, theirs = kernel_times(model, zoo_dir / "mlp.onnx", 1, feeds, 5, tmp_path, block=2, settle_s=0.05)
    model.close()
    assert len(ours) == 3 and {k.calls for k in ours} == {5}
    assert theirs and {k.calls for k in theirs} == {5}
    [profile] = tmp_path.glob("onnxruntime*.json")
    runs = [e for e in json.loads(profile.read_text()) if e.get("name") == "model_run"]
    assert len(runs) > 5  # the untimed ones among them


def test_check_fails_beyond_tolerance(zoo_dir, capsys):
    assert main(["check", str(zoo_dir / "mlp.onnx"), "--rtol", "0", "--atol", "0"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_a_model_newer_than_onnxruntimes_ir_is_checked_as_the_ir_it_supports(zoo_dir, tmp_path, caplog):
    """onnx stamps its newest IR version on the models it makes; an older onnxruntime refuses them
    (onnx 1.23 models on onnxruntime 1.30 did, on the GPU machine): the reference relabels."""
    model = onnx.load(zoo_dir / "mlp.onnx")
    model.ir_version = 99
    path = tmp_path / "ir99.onnx"
    onnx.save(model, path)
    session = onnxruntime_session(path, 1)
    assert "newer than this onnxruntime's" in caplog.text
    assert [o.name for o in session.get_outputs()] == [o.name for o in model.graph.output]
    model.graph.node[0].op_type = "NoSuchOp"
    onnx.save(model, path)
    with pytest.raises(AutoschedError, match="ir99.onnx: onnxruntime cannot load the model"):
        onnxruntime_session(path, 1)


def test_bad_inputs_are_clear_errors(zoo_dir, tmp_path, capsys):
    files = build_model(load_onnx(zoo_dir / "mlp.onnx"), tmp_path / "mlp.so")
    model = load_model(files.library)
    with pytest.raises(ModelError, match=r"input input must be float32\[64, 784\]"):
        model.run({"input": np.zeros((2, 784), np.float32)})
    with pytest.raises(ModelError, match="missing"):
        model.run({})
    model.close()
    files.weights.write_bytes(files.weights.read_bytes()[:-4])
    with pytest.raises(ModelError, match="truncated or replaced"):
        load_model(files.library)
    assert main(["run", str(tmp_path / "nothing.so"), "--inputs", "x.npz", "--outputs", "y.npz"]) == 2
    assert "not a built model" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["build", str(bad), "-o", str(tmp_path / "bad.so")]) == 2
    assert "bad.onnx" in capsys.readouterr().err


def test_model_with_output_that_is_an_input(tmp_path):
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    model = onnx.helper.make_model(onnx.helper.make_graph([node], "g", [x], [y, x]),
                                   opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    files = build_model(import_model(model), tmp_path / "m.so")
    out = load_model(files.library).run({"x": np.array([-1.0, 0.5, 2.0], np.float32)})
    np.testing.assert_array_equal(out["y"], [0.0, 0.5, 2.0])
    np.testing.assert_array_equal(out["x"], [-1.0, 0.5, 2.0])


def test_weight_packing_happens_at_build_time(tmp_path):
    files = build_model(import_model(zoo.mlp()), tmp_path / "mlp.so")
    manifest = load_model(files.library).manifest
    assert all(k["precomputed_stages"] == 1 for k in manifest["kernels"])  # each Gemm's packed weight panels
    run_body = files.library.with_suffix(".c").read_text().split("int32_t autosched_model_run")[1]
    assert "NULL" in run_body  # the unpacked weights are not even passed


def _conv_transpose_model(kernel, stride, pads=(0, 0, 0, 0), output_padding=(0, 0), bias=True, size=(5, 6),
                          group=1, dilation=1):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal((16, 8 // group, kernel, kernel))).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"))
        inputs.append("b")
    up = helper.make_node("ConvTranspose", inputs, ["up"], strides=[stride, stride], pads=list(pads),
                          output_padding=list(output_padding), group=group, dilations=[dilation, dilation])
    out = helper.make_node("Relu", ["up"], ["y"])
    span = dilation * (kernel - 1) + 1
    out_size = [stride * (n - 1) + e + span - p - q for n, e, p, q in zip(size, output_padding, pads[:2], pads[2:])]
    graph = helper.make_graph([up, out], "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, *size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, *out_size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kernel, stride, pads, output_padding, bias, size, group, dilation, phases", [
    (2, 2, (0, 0, 0, 0), (0, 0), True, (5, 6), 1, 1, 1),  # a U-Net's upsampling: a 1x1 convolution, then the shuffle
    (2, 2, (0, 0, 0, 0), (0, 0), False, (5, 6), 1, 1, 1),
    (3, 2, (1, 1, 1, 1), (1, 1), True, (5, 6), 1, 1, 1),  # taps of 2 and 1 per phase, a crop
    (4, 2, (1, 1, 1, 1), (0, 0), True, (5, 6), 1, 1, 1),  # a GAN generator's: one convolution does 1.4x the work
    (4, 2, (1, 1, 1, 1), (0, 0), True, (4, 4), 1, 1, 4),  # on 4x4, 1.56x: a convolution per phase
    (3, 2, (1, 1, 1, 1), (1, 1), False, (3, 4), 2, 1, 4),  # the same with groups, taps of 2 and 1: 1.67x
    (4, 1, (0, 0, 0, 0), (0, 0), True, (1, 1), 1, 1, 1),  # its first layer: a 1x1 input's whole output is one patch
    (5, 3, (4, 1, 0, 2), (2, 0), True, (4, 3), 1, 1, 1),  # padding past a whole phase row; 3 divides no output side
    (3, 2, (1, 0, 1, 0), (0, 1), True, (5, 6), 2, 2, 1),  # groups and dilation, outputs of odd sides
    (3, 1, (1, 1, 1, 1), (0, 0), True, (5, 6), 1, 1, 1),  # no stride: an ordinary convolution
])
def test_conv_transpose_matches_onnxruntime(tmp_path, kernel, stride, pads, output_padding, bias, size, group, dilation,
                                            phases):
    """Strided ConvTranspose is one convolution of every output phase, a shuffle and a crop, or,
    where the phases need different rows and the stride divides the output, one convolution per
    phase over its own rows and the shuffle: it multiplies no inserted zero (the Pad that
    inserted them is gone)."""
    path = tmp_path / "ct.onnx"
    onnx.save(_conv_transpose_model(kernel, stride, pads, output_padding, bias, size, group, dilation), path)
    graph = load_onnx(path)
    assert not any(n.op.value == "Pad" for n in graph.nodes)
    convs = [n for n in graph.nodes if n.op.value == "Conv"]
    assert len(convs) == phases and all((c.attrs["strides"], c.attrs["dilations"]) == ((1, 1), (1, 1)) for c in convs)
    if phases > 1:  # each computes what it needs and no more: nothing to crop
        assert not any(n.op.value == "Slice" for n in graph.nodes)
        assert sum(math.prod(graph.values[c.outputs[0]].shape) for c in convs) == math.prod(graph.outputs[0].shape)
    model = load_model(build_model(graph, tmp_path / "ct.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("name", ["conv1d_stack", "fpn_block", "unet_decoder", "shufflenet_block", "dcgan_generator",
                                  "deeplab_block", "video_block", "resnest_block", "hrnet_stage", "res2net_block",
                                  *[pytest.param(n, marks=pytest.mark.slow) for n in
                                    ("vgg_small", "inception_block", "se_block", "dilated_block", "mbv3_block",
                                     "effnet_block", "dense_block", "convnext_block", "csp_block", "mixer_block",
                                     "regnet_block", "swin_block")]])
def test_blocks_no_developer_had_seen_match_onnxruntime(tmp_path, name):
    """`zoo_blocks`: 1-D convolutions, Resize and ConvTranspose (the fast suite's three: they did
    not import before 2026-11-27), ShuffleNetV2's split, padded channel blocks and shuffle, and
    the DCGAN generator's strided ConvTransposes, DeepLab's dilated convolutions on odd maps (per
    phase in Winograd's kernel) and ASPP head (taps cropped, regions), the video block's 3-D
    convolutions, BatchNorms and pools (`fold_depth`), ResNeSt's split attention (its grouped
    convolutions one per group, `split_groups`, their concat split again in place), HRNet's and
    Res2Net's convolutions of 18, 26 and 36 channels (plain, Winograd F(2) untuned); the others
    under -m slow."""
    from autosched.zoo_blocks import BLOCKS

    path = tmp_path / f"{name}.onnx"
    onnx.save(BLOCKS[name](), path)
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / f"{name}.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


def _activations_model() -> onnx.ModelProto:
    """Convolutions followed by PRelu, Mish, Elu, and a mask: Where(Greater(z, t), z, y) then a
    three-way Max, as exported detection and segmentation heads have them."""
    from autosched.zoo_builder import ModelBuilder, tensor_info

    b = ModelBuilder(3)
    y = b.node("PRelu", [b.conv_bn("input", "c1", 16, 32, 3), b.normal("slope", (32, 1, 1), 0.2)], "prelu")
    y = b.node("Mish", [b.conv_bn(y, "c2", 32, 32, 3)], "mish")
    y = b.node("Elu", [b.conv_bn(y, "c3", 32, 32, 1)], "elu", alpha=0.7)
    z = b.conv_bn(y, "c4", 32, 32, 1)
    mask = b.node("Greater", [z, b.constant("t", np.array(0.1, np.float32))], "gt")
    y = b.node("Max", [b.node("Where", [mask, z, y], "where"), y, z], "max3")
    model = b.model("acts", [tensor_info("input", (1, 16, 28, 28))], [tensor_info(y, (1, 32, 28, 28))])
    model.opset_import[0].version = 18  # Mish's first
    return model


def test_activations_comparisons_and_where_fuse_into_convolutions(tmp_path):
    path = tmp_path / "acts.onnx"
    onnx.save(_activations_model(), path)
    graph = load_onnx(path)
    tasks = extract_tasks(optimize(graph, Target.parse("llvm").capabilities.lanes(4)))
    epilogues = sorted(tuple(e.op for e in t.epilogue) for t in tasks.tasks if t.op == "ConvNCHWc")
    assert epilogues == [("Elu",), ("Greater", "Where", "Max", "Max"), ("Mish",), ("PRelu",)]
    model = load_model(build_model(graph, tmp_path / "acts.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


def _sub_pixel_model() -> onnx.ModelProto:
    """ESPCN-style: convolutions, then a head to r² channels spread into r x r pixel blocks."""
    from autosched.zoo_builder import ModelBuilder, tensor_info

    b = ModelBuilder(11)
    y = b.node("Tanh", [b.conv_bn("input", "c1", 1, 32, 5)], "t1")
    y = b.node("DepthToSpace", [b.conv_bn(y, "c2", 32, 9, 3)], "d2s", blocksize=3)
    return b.model("espcn", [tensor_info("input", (1, 1, 24, 24))], [tensor_info(y, (1, 1, 72, 72))])


def _normalized_block(op: str) -> onnx.ModelProto:
    """A residual block with GroupNormalization + SiLU (a diffusion UNet's) or
    InstanceNormalization + ReLU (a style-transfer network's)."""
    from autosched.zoo_builder import ModelBuilder, tensor_info

    b, c = ModelBuilder(12), 32
    rng = np.random.default_rng(1)

    def norm(x: str, name: str) -> str:
        params = [b.constant(f"{name}.{p}", rng.uniform(0.5, 1.5, c).astype(np.float32)) for p in ("s", "b")]
        attrs = {"num_groups": 8} if op == "GroupNormalization" else {}
        y = b.node(op, [x, *params], name, **attrs)
        return b.node("Mul", [y, b.node("Sigmoid", [y], f"{name}/sig")], f"{name}/silu") if attrs else \
            b.node("Relu", [y], f"{name}/relu")

    h = b.conv_bn(norm(b.conv_bn("input", "c1", c, c, 3), "n1"), "c2", c, c, 3)
    model = b.model("block", [tensor_info("input", (1, c, 16, 16))],
                    [tensor_info(b.node("Add", ["input", norm(h, "n2")], "res"), (1, c, 16, 16))])
    model.opset_import[0].version = 21  # GroupNormalization's per-channel scale and bias
    return model


def _lrn_segmentation_model() -> onnx.ModelProto:
    """AlexNet-style convolution, ReLU, LRN and pool, then an 8-class head whose ArgMax over the
    channels is the output (a segmentation map)."""
    from autosched.zoo_builder import ModelBuilder, tensor_info

    b = ModelBuilder(14)
    y = b.node("LRN", [b.node("Relu", [b.conv_bn("input", "c1", 3, 32, 3)], "r1")], "lrn", size=5, alpha=1e-3)
    y = b.conv_bn(b.node("MaxPool", [y], "pool", kernel_shape=[2, 2], strides=[2, 2]), "head", 32, 8, 1)
    y = b.node("ArgMax", [y], "classes", axis=1, keepdims=0)
    return b.model("seg", [tensor_info("input", (1, 3, 32, 32))], [tensor_info(y, (1, 16, 16), onnx.TensorProto.INT64)])


@pytest.mark.parametrize("make", [_sub_pixel_model, lambda: _normalized_block("GroupNormalization"),
                                  lambda: _normalized_block("InstanceNormalization"), _lrn_segmentation_model],
                         ids=["depth_to_space", "group_norm", "instance_norm", "lrn_argmax"])
def test_ops_imported_as_compositions_build_and_match_onnxruntime(tmp_path, make):
    path = tmp_path / "m.onnx"
    onnx.save(make(), path)
    graph = load_onnx(path)
    model = load_model(build_model(graph, tmp_path / "m.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


def test_an_embedding_of_run_time_token_ids_builds_and_matches_onnxruntime(tmp_path):
    """Gather of a table by the model's int64 input (every NLP model's first op), then a
    position add, LayerNorm and a projection; negative ids count from the table's end."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(5)
    table, positions = (rng.standard_normal(s).astype(np.float32) for s in ((50, 32), (7, 32)))
    proj, scale = rng.standard_normal((32, 16)).astype(np.float32), np.ones(32, np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Add", ["e", "positions"], ["p"]),
             helper.make_node("LayerNormalization", ["p", "scale"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "proj"], ["y"])]
    graph = helper.make_graph(nodes, "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 16])],
                              [onnx.numpy_helper.from_array(a, n) for a, n in
                               ((table, "table"), (positions, "positions"), (proj, "proj"), (scale, "scale"))])
    path = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    model = load_model(build_model(load_onnx(path), tmp_path / "embed.so").library)
    feeds = {"ids": rng.integers(-50, 50, (2, 7)).astype(np.int64)}
    diffs = compare(model, onnxruntime_session(path, 2), feeds, rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


def test_a_decoder_block_of_opset_23_attention_ops_matches_onnxruntime(tmp_path):
    """zoo.llama_block, small: RMSNormalization, RotaryEmbedding (halves and interleaved pairs),
    Attention with grouped-query heads, is_causal and a padding mask that leaves the first two
    queries nothing to attend (their rows are 0, not NaN). Its 16 tokens are enough rows for the
    SwiGLU gate's sigmoid to be a kernel of its own (`fuse._keeps_out`)."""
    path = tmp_path / "decoder.onnx"
    onnx.save(zoo.llama_block(seq=16, hidden=64, heads=4, kv_heads=2, ff=96, padding_mask=True), path)
    graph = load_onnx(path)
    assert any(task.op == "Sigmoid" for task in extract_tasks(optimize(graph)).tasks)
    model = load_model(build_model(graph, tmp_path / "decoder.so").library)
    keep = np.broadcast_to(np.arange(16) >= 2, (1, 1, 16, 16))  # the first 2 keys are padding
    feeds = {**sample_inputs(graph, 1), "attention_mask": keep}
    diffs = compare(model, onnxruntime_session(path, 2), feeds, rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs


def test_a_decode_step_stacks_the_query_heads_of_each_key_value_head(tmp_path):
    """One new token over a K/V cache with grouped-query heads: no bias remains (the causal
    frontier admits every key), so each K/V head's query heads are one matrix and K and V are
    not repeated per query head (no Expand); the outputs and presents match onnxruntime."""
    from onnx import TensorProto, helper

    info = helper.make_tensor_value_info
    f = TensorProto.FLOAT
    node = helper.make_node("Attention", ["q", "k", "v", "", "past_key", "past_value"], ["y", "present_key", "present_value"],
                            is_causal=1)
    graph = helper.make_graph([node], "decode", [info("q", f, [1, 4, 1, 8]), info("k", f, [1, 2, 1, 8]), info("v", f, [1, 2, 1, 8]),
                                                 info("past_key", f, [1, 2, 7, 8]), info("past_value", f, [1, 2, 7, 8])],
                              [info("y", f, [1, 4, 1, 8]), info("present_key", f, [1, 2, 8, 8]),
                               info("present_value", f, [1, 2, 8, 8])])
    path = tmp_path / "decode.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), path)
    graph = load_onnx(path)
    assert Op.EXPAND not in {n.op for n in graph.nodes}
    model = load_model(build_model(graph, tmp_path / "decode.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-4, atol=1e-5)
    model.close()
    assert len(diffs) == 3 and all(d.ok for d in diffs), diffs


def test_top_k_routing_and_gather_nd_by_run_time_indices_match_onnxruntime(tmp_path):
    """A mixture-of-experts router (TopK of a projection's logits, ties included, a softmax of
    the chosen ones, Hardmax beside it) and a GatherND of a table by run-time index pairs,
    negative ones and batch_dims 1 included."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)
    info = helper.make_tensor_value_info
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in (
        (rng.standard_normal((16, 8)).astype(np.float32), "router"), (np.array([3], np.int64), "k"),
        (rng.standard_normal((2, 5, 6, 7)).astype(np.float32), "table"))]
    nodes = [helper.make_node("MatMul", ["x", "router"], ["logits"]),
             helper.make_node("TopK", ["logits", "k"], ["top", "experts"], axis=-1),
             helper.make_node("Softmax", ["top"], ["weights"], axis=-1),
             helper.make_node("Hardmax", ["logits"], ["choice"], axis=-1),
             helper.make_node("TopK", ["ties", "k"], ["low", "low_at"], axis=1, largest=0),
             helper.make_node("GatherND", ["table", "where"], ["rows"], batch_dims=1)]
    graph = helper.make_graph(nodes, "router", [info("x", TensorProto.FLOAT, [4, 16]), info("ties", TensorProto.FLOAT, [2, 9]),
                                                info("where", TensorProto.INT64, [2, 3, 2])],
                              [info("weights", TensorProto.FLOAT, [4, 3]), info("experts", TensorProto.INT64, [4, 3]),
                               info("choice", TensorProto.FLOAT, [4, 8]), info("low", TensorProto.FLOAT, [2, 3]),
                               info("low_at", TensorProto.INT64, [2, 3]), info("rows", TensorProto.FLOAT, [2, 3, 7])], inits)
    path = tmp_path / "router.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    model = load_model(build_model(load_onnx(path), tmp_path / "router.so").library)
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32),
             "ties": np.array([[3, 1, 1, 2, 1, 5, 0, 0, 9], [-np.inf, 2, -np.inf, 4, 4, 4, 1, 7, 8]], np.float32),
             "where": np.array([[[0, 1], [-1, -2], [4, 5]], [[2, 0], [-5, 3], [1, -6]]], np.int64)}
    diffs = compare(model, onnxruntime_session(path, 2), feeds, rtol=1e-5, atol=1e-6)
    model.close()
    assert len(diffs) == 6 and all(d.ok for d in diffs), diffs


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_scatters_by_run_time_indices_match_onnxruntime(tmp_path, target):
    """A K/V cache written at run-time positions (ScatterND, the position a model input, one
    negative), ScatterElements adding into rows with a repeated index, and a ScatterND taking
    the maximum of two updates of one row."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(12)
    info = helper.make_tensor_value_info
    nodes = [helper.make_node("ScatterND", ["cache", "at", "new"], ["cache_out"]),
             helper.make_node("ScatterElements", ["counts", "where", "adds"], ["summed"], axis=1, reduction="add"),
             helper.make_node("ScatterND", ["cache", "twice", "two"], ["peaks"], reduction="max")]
    graph = helper.make_graph(nodes, "scatter", [
        info("cache", TensorProto.FLOAT, [2, 6, 8]), info("at", TensorProto.INT64, [2, 1, 2]),
        info("new", TensorProto.FLOAT, [2, 1, 8]), info("counts", TensorProto.FLOAT, [3, 5]),
        info("where", TensorProto.INT64, [3, 4]), info("adds", TensorProto.FLOAT, [3, 4]),
        info("twice", TensorProto.INT64, [2, 2]), info("two", TensorProto.FLOAT, [2, 8])],
        [info("cache_out", TensorProto.FLOAT, [2, 6, 8]), info("summed", TensorProto.FLOAT, [3, 5]),
         info("peaks", TensorProto.FLOAT, [2, 6, 8])])
    path = tmp_path / "scatter.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    model = load_model(build_model(load_onnx(path), tmp_path / "scatter.so", target).library)
    feeds = {"cache": rng.standard_normal((2, 6, 8)).astype(np.float32),
             "at": np.array([[[0, 3]], [[1, -1]]], np.int64), "new": rng.standard_normal((2, 1, 8)).astype(np.float32),
             "counts": rng.standard_normal((3, 5)).astype(np.float32),
             "where": np.array([[0, 0, 4, 2], [1, -1, 3, 3], [2, 2, 2, 0]], np.int64),
             "adds": rng.standard_normal((3, 4)).astype(np.float32),
             "twice": np.array([[1, 2], [1, 2]], np.int64), "two": rng.standard_normal((2, 8)).astype(np.float32)}
    diffs = compare(model, onnxruntime_session(path, 2), feeds, rtol=1e-5, atol=1e-6)
    model.close()
    assert len(diffs) == 3 and all(d.ok for d in diffs), diffs


def test_a_scatter_too_large_to_compare_every_row_with_every_index_is_refused_by_name():
    from onnx import TensorProto, helper
    info = helper.make_tensor_value_info
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="big_scatter", axis=0)
    graph = helper.make_graph([node], "big", [info("x", TensorProto.FLOAT, [1 << 14, 64]),
                                              info("i", TensorProto.INT64, [1 << 10, 64]),
                                              info("u", TensorProto.FLOAT, [1 << 10, 64])],
                              [info("y", TensorProto.FLOAT, [1 << 14, 64])])
    with pytest.raises(FrontendError, match="big_scatter.*more than the"):
        import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_check_takes_the_inputs_random_values_would_not_be(tmp_path, capsys):
    """Run-time indices: random int64 values fall outside the table, onnxruntime refuses them, and
    `check` says so in one line; `--inputs` gives them (an unknown name is an error)."""
    from onnx import TensorProto, helper

    table = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    graph = helper.make_graph([helper.make_node("GatherND", ["table", "at"], ["y"])], "lookup",
                              [helper.make_tensor_value_info("at", TensorProto.INT64, [2, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [table])
    path = tmp_path / "lookup.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    db = str(tmp_path / "t.db")
    assert main(["check", str(path), "--db", db, "--seed", "3"]) == 2
    assert "give such inputs with --inputs" in capsys.readouterr().err
    np.savez(tmp_path / "at.npz", at=np.array([[3], [-4]], np.int64))
    assert main(["check", str(path), "--db", db, "--inputs", str(tmp_path / "at.npz")]) == 0
    np.savez(tmp_path / "bad.npz", index=np.array([[1]], np.int64))
    assert main(["check", str(path), "--db", db, "--inputs", str(tmp_path / "bad.npz")]) == 2
    assert "index is no input of the model (its inputs: at)" in capsys.readouterr().err


def test_lp_pools_match_onnxruntime_and_an_overhanging_ceil_window_is_refused(tmp_path):
    """LpPool as an average pool of |x|^p counting the padding, times the window: p 1 and 3,
    padded and strided; ceil_mode where it changes nothing; refused where a window overhangs."""
    from onnx import TensorProto, helper

    def model(**ceil: int) -> onnx.ModelProto:
        nodes = [helper.make_node("LpPool", ["x"], ["l1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], p=1),
                 helper.make_node("LpPool", ["x"], ["l3"], kernel_shape=[2, 3], strides=[1, 2], p=3, **ceil)]
        graph = helper.make_graph(nodes, "lp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("l1", "l3")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])

    path = tmp_path / "lp.onnx"
    onnx.save(model(ceil_mode=1), path)  # the 2x3 windows at stride 1 and 2 fit the 9x9 input exactly
    graph = load_onnx(path)
    built = load_model(build_model(graph, tmp_path / "lp.so").library)
    diffs = compare(built, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-4, atol=1e-5)
    built.close()
    assert len(diffs) == 2 and all(d.ok for d in diffs), diffs
    overhang = model(ceil_mode=1)
    next(a for a in overhang.graph.node[1].attribute if a.name == "strides").ints[:] = [2, 2]  # rows: 7 past the first, stride 2
    with pytest.raises(FrontendError, match="ceil_mode with a window past the padding"):
        import_model(overhang, source="lp.onnx")


def _recurrent_model() -> onnx.ModelProto:
    """A bidirectional LSTM with peepholes and clipping over 20 steps, its Y read by a GRU
    (linear_before_reset) whose initial state is a model input (onnxruntime runs no batch-first
    layout; the node tests cover it)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(8)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [w("lw", 2, 128, 16), w("lr", 2, 128, 32), w("lb", 2, 256), w("lp", 2, 96),
             w("gw", 1, 48, 64), w("gr", 1, 48, 16), w("gb", 1, 96)]
    nodes = [helper.make_node("LSTM", ["x", "lw", "lr", "lb", "", "", "", "lp"], ["ly", "", "lc"], hidden_size=32,
                              direction="bidirectional", clip=5.0),
             helper.make_node("Transpose", ["ly"], ["lt"], perm=[0, 2, 1, 3]),  # [T, batch, dirs, H]
             helper.make_node("Reshape", ["lt", "shape"], ["g_in"]),
             helper.make_node("GRU", ["g_in", "gw", "gr", "gb", "", "h0"], ["gy", "gh"], hidden_size=16,
                              linear_before_reset=1)]
    inits.append(onnx.numpy_helper.from_array(np.array([20, 2, 64], np.int64), "shape"))
    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "rnn", [info("x", TensorProto.FLOAT, [20, 2, 16]), info("h0", TensorProto.FLOAT, [1, 2, 16])],
                              [info("gy", TensorProto.FLOAT, [20, 1, 2, 16]), info("gh", TensorProto.FLOAT, [1, 2, 16]),
                               info("lc", TensorProto.FLOAT, [2, 2, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_recurrent_layers_unroll_build_and_match_onnxruntime(tmp_path):
    path = tmp_path / "rnn.onnx"
    onnx.save(_recurrent_model(), path)
    graph = load_onnx(path)
    tasks = extract_tasks(optimize(graph, Target.parse("llvm").capabilities.lanes(4)))
    steps = [t for t in tasks.tasks if t.op == "MatMul" and t.weight >= 20]
    assert steps, "each direction's 20 step products are one task"
    files = build_model(graph, tmp_path / "rnn.so")
    model = load_model(files.library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs
    # the steps share one packed copy of their recurrent weights: one copy per step put 25 MB of
    # copies in an LSTM's weights file, and each step read its own from memory (3x the time)
    run_body = files.library.with_suffix(".c").read_text().split("int32_t autosched_model_run")[1]
    packed = re.findall(r"(task\d+)\(.*\(model_weights \+ (\d+)\)\) != 0\)", run_body)
    per_kernel: dict[str, set[str]] = {}
    for symbol, offset in packed:
        per_kernel.setdefault(symbol, set()).add(offset)
    steps_kernels = [offsets for symbol, offsets in per_kernel.items()
                     if sum(s == symbol for s, _ in packed) >= 20]
    assert steps_kernels and all(len(offsets) <= 4 for offsets in steps_kernels), per_kernel


def test_a_qdq_model_runs_as_the_rounding_it_stands_for(tmp_path):
    """A QDQ-format int8 convolution (quantized input, per-channel int8 weights, requantized
    output) computed in float: its outputs match onnxruntime's int8 kernels within one step of
    the output's scale (a sum landing on a rounding boundary may round either way)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(9)
    weights = rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in (
        (np.array(0.05, np.float32), "sx"), (np.array(3, np.uint8), "zx"), (weights, "w_q"),
        ((rng.random(16) * 0.01 + 0.002).astype(np.float32), "sw"), (np.zeros(16, np.int8), "zw"),
        (np.array(0.1, np.float32), "sy"), (np.array(128, np.uint8), "zy"))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w_q", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "qdq", [info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [info("y", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    path = tmp_path / "qdq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    graph = load_onnx(path)
    assert not {n.op.value for n in graph.nodes} & {"QuantizeLinear", "DequantizeLinear"}
    model = load_model(build_model(graph, tmp_path / "qdq.so").library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=0, atol=0.1 + 1e-6)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs
